"""Policy losses on the demo task: GRPO, Dr.GRPO, DAPO, GSPO, NSR, FIPO, Δlog p
reweighting and divergence-weighted advantages, each as its authors set it
(configs/variants.py, docs/algorithms.md).

    python -m launch.sweep --config=configs/paper/losses.py:tiny --workdir=runs/paper/losses
"""

from configs.paper import _study
from configs.paper._study import TARGET, get_config  # noqa: F401 - the sweep's config

ARMS = ("grpo", "dr_grpo", "dapo", "gspo", "nsr", "fipo", "logp_reweight",
        "divergence_weighted")


def get_sweep(arg: str | None = None):
    get_config(arg)  # checks the argument
    return _study.runs([{"name": name, **_study.variant(name)} for name in ARMS])
