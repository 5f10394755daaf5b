"""Synchronous vs asynchronous rollouts, with and without the off-policy correction.

    python -m launch.sweep --config=configs/paper/async.py:tiny --workdir=runs/paper/async

Arms (every one GRPO without KL, the demo's; `rollout.*` and `rl.off_policy.*` in
docs/training.md, "Asynchronous rollouts"):
  sync              each step samples with the learner's current policy
  one_step_off      the batch of step n is sampled by version n - 2 (one behind)
  async_eta{1,2,4}  the sampler η versions behind, 2× the groups in flight, unfinished
                    samples carried into the next call under the newer version;
                    decoupled PPO with the truncated behaviour weight (tis, cap 2)
  async_eta4_no_correction  η = 4, the behaviour weight off (π_prox recomputed, no weight)
  async_eta4_bapo   η = 4, BAPO's adaptive clipping against the behaviour policy
                    (train.old_logp=sampler: its ratio is π_θ / π_behav), no weight

Every arm decodes in segments of 4 tokens (page_size 4), so the demo's answers of up to
8 tokens take 2 segments and a call can stop between them.
"""

from configs.paper import _study
from configs.paper._study import TARGET  # noqa: F401 - the sweep's held-out target

# the mechanics beside accuracy (results.md's second table, curves.png's extra panels)
METRICS = ("staleness/mean", "learner/is_weight_mean", "learner/corrected_frac",
           "learner/kl_behavior_current", "learner/bapo_c_high", "learner/entropy",
           "april/carry_partial_rows")


def get_config(arg: str | None = None):
    cfg = _study.get_config(arg)
    cfg.sampling.page_size = cfg.sampling.segment_len = 4
    return cfg


def async_arm(name: str, eta: int, **extra) -> dict:
    return {"name": name, "rollout.mode": "async", "rollout.max_staleness": eta, **extra}


def get_sweep(arg: str | None = None):
    get_config(arg)  # checks the argument
    return _study.runs([
        {"name": "sync"},
        {"name": "one_step_off", "rollout.mode": "one_step_off"},
        async_arm("async_eta1", 1),
        async_arm("async_eta2", 2),
        async_arm("async_eta4", 4),
        async_arm("async_eta4_no_correction", 4, **{"rl.off_policy.correction": ""}),
        async_arm("async_eta4_bapo", 4, **{"rl.loss.name": "bapo", "train.old_logp": "sampler",
                                           "rl.off_policy.correction": ""}),
    ])
