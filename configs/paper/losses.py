"""Policy losses on the demo task: GRPO, Dr.GRPO, DAPO, GSPO, NSR, FIPO, Δlog p
reweighting and divergence-weighted advantages, each as its authors set it
(configs/variants.py, docs/algorithms.md).

    python -m launch.sweep --config=configs/paper/losses.py:tiny --workdir=runs/paper/losses
"""

from configs.paper import _study
from configs.paper._study import TARGET, get_config  # noqa: F401 - the sweep's config

# the mechanics beside accuracy (results.md's second table, curves.png's extra panels):
# entropy (Δlog p reweighting's claim), the clipped and NSR-band token fractions
# (GSPO's and NSR's), the mean advantage weight (FIPO, Δlog p, divergence) and length
METRICS = ("learner/entropy", "learner/clip_frac_low", "learner/clip_frac_high",
           "learner/nsr_band_frac", "learner/nsr_rescued_frac", "reweight/weight_mean",
           "response_length/mean")
ARMS = ("grpo", "dr_grpo", "dapo", "gspo", "nsr", "fipo", "logp_reweight",
        "divergence_weighted")


def get_sweep(arg: str | None = None):
    get_config(arg)  # checks the argument
    return _study.runs([{"name": name, **_study.variant(name)} for name in ARMS])
