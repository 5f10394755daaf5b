"""Flat sampling vs TreePO's tree at equal leaves: 8 samples per prompt, or a tree of 8
leaves (2 segments of 4 tokens, 4 first branches each split in 2) with the tree
advantage. The tree decodes shared prefixes once: compare held-out accuracy per
rollout token.

    python -m launch.sweep --config=configs/paper/sampling.py:tiny --workdir=runs/paper/sampling
"""

from configs import demo
from configs.paper import _study
from configs.paper._study import TARGET, get_config  # noqa: F401 - the sweep's config


def get_sweep(arg: str | None = None):
    get_config(arg)
    tree = _study.changes(demo.get_config(), demo.get_config("tree"))
    return _study.runs([{"name": "flat"}, {"name": "treepo", **tree}])
