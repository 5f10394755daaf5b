"""A 2-run × 2-step sweep for tests/launch/test_sweep.py.

    python -m launch.sweep --config=tests/launch/sweep_config.py --workdir=DIR
    python -m launch.sweep --config=tests/launch/sweep_config.py:sft --workdir=DIR

`:sft`: each run starts from a 2-step supervised warm start, the same for both runs:
trained once in DIR/warm_starts (sft.shared_dir), loaded by the other run.
`:lora` (tests/launch/test_arms.py): rank-4 adapters over that warm start, three arms
that differ only in the learner's keys (one of them with dynamic sampling, which makes
extra sampler calls), one seed, asynchronous checkpoints every step.
"""

import configs
from configs import base
from tests.rl.fault_config import very_small

TARGET = 0.0  # every run reaches it at its first eval: the "to target" columns are filled
METRICS = ("learner/entropy", "frac_reward_zero_std")  # results.md's second table


def get_config(arg: str | None = None):
    cfg = very_small(base.build("tiny"))
    if arg in ("sft", "lora"):
        cfg.train.warm_start = "sft"
        cfg.sft.steps, cfg.sft.batch_size, cfg.sft.eval_every = 2, 8, 0
    cfg.train.steps, cfg.train.eval_every = 2, 1
    cfg.train.plot = cfg.train.tensorboard = False
    cfg.rl.reward.name = "format"  # a digit anywhere: rewards vary within a group
    cfg.rl.reward.pattern = ".*[0-9].*"
    cfg.eval.batch_prompts = 8
    cfg.checkpoint.every = 1
    cfg.checkpoint.asynchronous = False  # a checkpoint is on disk when its step is logged
    if arg == "lora":
        cfg.lora.rank, cfg.lora.sampler, cfg.optim.lr = 4, "factored", 3e-3
        cfg.train.steps = 3
        # the default: every arm checkpoints each step in the background, all at once
        cfg.checkpoint.asynchronous = True
    cfg.lock()
    return cfg


def get_sweep(arg: str | None = None):
    if arg == "lora":
        return configs.with_seeds([
            {"name": "grpo"},
            {"name": "dr_grpo", "rl.advantage.name": "dr_grpo", "optim.lr": 1e-3},
            {"name": "dynamic", "train.dynamic_sampling": True, "rl.loss.eps_high": 0.28,
             "train.minibatches": 2}],
            seeds=[7])
    return configs.with_seeds([{"name": "slow", "optim.lr": 1e-4},
                              {"name": "fast", "optim.lr": 3e-3}], seeds=[7])
