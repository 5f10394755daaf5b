"""The group baseline: GRPO's mean vs MC-GRPO's median (over G + 1 samples, the pivot
out of the gradient) at G = 2, 4 and 8 samples per prompt.

    python -m launch.sweep --config=configs/paper/baseline.py:tiny --workdir=runs/paper/baseline
"""

from configs.paper import _study
from configs.paper._study import TARGET, get_config  # noqa: F401 - the sweep's config

GROUPS = (2, 4, 8)


def get_sweep(arg: str | None = None):
    get_config(arg)
    mean, median = _study.variant("grpo"), _study.variant("mc_grpo")  # both with GRPO's KL
    arms = []
    for g in GROUPS:
        arms.append({"name": f"mean-G{g}", **mean, "sampling.n": g})
        arms.append({"name": f"median-G{g}", **median, "sampling.n": g})
    return _study.runs(arms)
