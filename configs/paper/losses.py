"""Policy losses on the demo task: GRPO, Dr.GRPO, DAPO, GSPO, NSR (and its deterministic
decay ablation), FIPO, Δlog p reweighting and divergence-weighted advantages, each as
its authors set it (configs/variants.py, docs/algorithms.md).

    python -m launch.sweep --config=configs/paper/losses.py:tiny --workdir=runs/paper/losses
"""

from configs.paper import _study
from configs.paper._study import TARGET, get_config  # noqa: F401 - the sweep's config

# the mechanics beside accuracy (results.md's second table, curves.png's extra panels):
# entropy (Δlog p reweighting's claim), the clipped and NSR-band token fractions
# (GSPO's and NSR's), the share of tokens FIPO reweights, the mean advantage weight
# (Δlog p, divergence) and the response length
METRICS = ("learner/entropy", "learner/clip_frac_low", "learner/clip_frac_high",
           "learner/nsr_band_frac", "learner/nsr_rescued_frac",
           "learner/fipo_weight_changed_frac", "reweight/weight_mean", "response_length/mean")
ARMS = ("grpo", "dr_grpo", "dapo", "gspo", "nsr", "fipo", "logp_reweight",
        "divergence_weighted")

# :tiny turns DAPO's soft overlong penalty off in the arms built on DAPO (dapo, nsr,
# nsr_decay, fipo, logp_reweight). DAPO penalises the last fifth of the length budget (4,096 of
# 20,480 tokens), far beyond its natural answers; at the demo's 8-token budget that
# fifth is the 8th token, the length of about half the warm start's answers (53% of the
# first step's samples were penalised by -1). `dapo_overlong` keeps the penalty, as its
# authors set it, to show the effect.
TINY_OFF = {"rl.overlong.buffer": 0}


def get_sweep(arg: str | None = None):
    get_config(arg)  # checks the argument
    arms = []
    for name in ARMS:
        arm = {"name": name, **_study.variant(name)}
        if _study.schedule(arg)[0] == "tiny" and "rl.overlong.buffer" in arm:
            arm.update(TINY_OFF)
        arms.append(arm)
        if _study.schedule(arg)[0] == "tiny" and name == "dapo":
            arms.append({"name": "dapo_overlong", **_study.variant("dapo")})
        if name == "nsr":  # the paper's required ablation: the band's gradient × keep_prob
            arms.append({**arm, "name": "nsr_decay", "rl.loss.mode": "decay"})
    return _study.runs(arms)
