"""Which prompts a step trains on: uniform (the data order), DAPO's dynamic sampling,
DARS (extra rollouts for hard prompts), DARS-B (with breadth) and BOTS (Thompson
selection from pass-rate posteriors), each as its authors set it (DARS on Dr.GRPO,
the others on GRPO with its KL). Compare held-out accuracy per rollout spent.

    python -m launch.sweep --config=configs/paper/selection.py:tiny --workdir=runs/paper/selection
"""

from configs.paper import _study
from configs.paper._study import TARGET, get_config  # noqa: F401 - the sweep's config

# the share of sampled groups whose rewards are all equal (no gradient: 1 - the
# "effective ratio" of BOTS), and entropy; results.md's second table
METRICS = ("frac_reward_zero_std", "learner/entropy")

# :tiny scales DARS to CPU: N_max 16 (2× sampling.n; the authors' 64 would pad every
# group to 64 rows) and DARS-B's breadth to 2× the prompts (the authors' 4×)
TINY = {"dars": {"data.selector.n_max": 16},
        "dars_b": {"data.selector.n_max": 16, "train.prompts_per_step": 32}}


def get_sweep(arg: str | None = None):
    get_config(arg)
    grpo = _study.variant("grpo")  # GRPO with its KL: what DAPO's filter and BOTS add to
    dynamic = {**grpo, "train.dynamic_sampling": True, "train.dynamic_max_rounds": 10}
    arms = [{"name": "uniform", **grpo}, {"name": "dynamic", **dynamic}]
    for name in ("dars", "dars_b", "bots"):
        arms.append({"name": name, **_study.variant(name),
                     **(TINY.get(name, {}) if _study.schedule(arg)[0] == "tiny" else {})})
    return _study.runs(arms)
