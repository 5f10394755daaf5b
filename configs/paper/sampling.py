"""Flat sampling vs TreePO's tree vs LATR at equal samples: 8 samples per prompt, a tree
of 8 leaves (2 segments of 4 tokens, 4 first branches each split in 2) with the tree
advantage, or 8 samples of which the authors' mix schedule grows a share as a LATR tree
(lookahead branching, then plain sampling). The tree decodes shared prefixes once: compare
held-out accuracy per rollout token.

    python -m launch.sweep --config=configs/paper/sampling.py:tiny --workdir=runs/paper/sampling

LATR's lengths are scaled from the authors' 1,024-token answers to the demo's 8 tokens:
the lookahead points (20, 30, 50 tokens after a branch) to 2 and 3, and the tree phase's
limit (512 steps, half the answer) to 4. Unscaled, the phase never ends within 8 tokens
(it lasts more than max(lookahead) steps) and a group's free slots repeat its greedy
root. Its other settings are the authors'.
"""

from configs import demo
from configs.paper import _study
from configs.paper._study import TARGET, get_config  # noqa: F401 - the sweep's config

LATR = {"sampling.sampler": "latr", "sampling.latr.lookahead": "2,3",
        "sampling.latr.max_steps": 4}


def get_sweep(arg: str | None = None):
    get_config(arg)
    tree = _study.changes(demo.get_config(), demo.get_config("tree"))
    return _study.runs([{"name": "flat"}, {"name": "treepo", **tree},
                        {"name": "latr", **LATR}])
