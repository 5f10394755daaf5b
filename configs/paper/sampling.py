"""Flat sampling vs TreePO's tree vs LATR at equal samples: 8 samples per prompt, a tree
of 8 leaves (2 segments of 4 tokens, 4 first branches each split in 2) with the tree
advantage, or 8 samples of which the authors' mix schedule grows a share as a LATR tree
(lookahead branching, then plain sampling). The tree decodes shared prefixes once: compare
held-out accuracy per rollout token.

    python -m launch.sweep --config=configs/paper/sampling.py:tiny --workdir=runs/paper/sampling

LATR's lookahead points (20, 30, 50 tokens after a branch for the authors' 1,024-token
answers) are scaled to the demo's 8-token answers: 2 and 3 tokens; its other settings
are the authors'.
"""

from configs import demo
from configs.paper import _study
from configs.paper._study import TARGET, get_config  # noqa: F401 - the sweep's config

LATR = {"sampling.sampler": "latr", "sampling.latr.lookahead": "2,3"}


def get_sweep(arg: str | None = None):
    get_config(arg)
    tree = _study.changes(demo.get_config(), demo.get_config("tree"))
    return _study.runs([{"name": "flat"}, {"name": "treepo", **tree},
                        {"name": "latr", **LATR}])
