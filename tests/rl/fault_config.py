"""A 12-step run of a very small model for the fault-tolerance tests (real processes).

    python -m launch.train --config=tests/rl/fault_config.py[:dynamic] --workdir=DIR

`dynamic`: DAPO-style dynamic sampling that refills batches (several rounds per step).
`async`: asynchronous rollouts (rollout.mode=async) on a sampler device of their own.
`tools`: 2-turn episodes with the calculator after a short tool-use warm start, SeeUPO's
turn-by-turn update and Fission-GRPO's buffer (checkpointed) and extra updates.
"""

from configs import base


def set_keys(cfg, overrides: dict):
    """Sets dotted config keys ("rl.kl.coef": 0.1) on `cfg` (unlocked or locked); returns it."""
    for key, value in overrides.items():
        node = cfg
        *path, last = key.split(".")
        for part in path:
            node = node[part]
        node[last] = value
    return cfg


def very_small(cfg):
    """The unlocked `cfg` shrunk to the suite's very small run: a 1-layer model of width
    64, one-digit arithmetic, 2 prompts x 4 samples x 8 tokens, lr 1e-3, a 6-prompt
    held-out eval (tests/rl/train/test_trainer.py builds on it too)."""
    cfg.model.num_layers, cfg.model.hidden_size, cfg.model.mlp_dim = 1, 64, 128
    cfg.model.num_heads, cfg.model.num_kv_heads, cfg.model.head_dim = 2, 1, 32
    cfg.data.task.name = "arithmetic"
    cfg.data.task.digits = 1
    cfg.data.heldout_size = 6
    cfg.sampling.n = 4
    cfg.sampling.max_new_tokens = 8
    cfg.sampling.segment_len = 16
    cfg.train.prompts_per_step = 2
    cfg.optim.lr = 1e-3
    cfg.eval.size, cfg.eval.n, cfg.eval.k = 6, 2, "1,2"
    return cfg


def get_config(arg: str | None = None):
    cfg = very_small(base.build("tiny"))
    cfg.train.steps, cfg.train.eval_every = 12, 4
    cfg.train.plot = False
    # rewards that vary within a group from the first step (a digit anywhere: ~15% of
    # random 8-token completions), so every step's update moves the policy
    cfg.rl.reward.name = "format"
    cfg.rl.reward.pattern = ".*[0-9].*"
    cfg.eval.batch_prompts = 8
    cfg.checkpoint.every = 3
    cfg.checkpoint.snapshot_every = 1  # a rollback restores the step before the failure
    if arg == "dynamic":
        cfg.train.dynamic_sampling = True
        cfg.train.dynamic_max_rounds = 4
    elif arg == "async":
        # the sampler on its own device, 2 policy versions ahead, 2 segments per answer
        # and 2× the groups in flight, so samples are carried from call to call
        cfg.rollout.mode, cfg.rollout.max_staleness = "async", 2
        cfg.mesh.rollout_devices = 1
        cfg.sampling.page_size = cfg.sampling.segment_len = 4
    elif arg == "tools":
        cfg.rollout.max_turns, cfg.rollout.max_turn_tokens = 2, 40
        cfg.sampling.max_new_tokens = 128  # room for an error reply and a second turn
        cfg.env.parser = "pythonic"
        cfg.rl.multiturn["update"] = "seeupo"
        cfg.rl.multiturn.fission, cfg.rl.multiturn.fission_capacity = True, 8
        cfg.rl.reward.name = "arithmetic"  # the task's: a wrong call rarely scores
        cfg.rl.reward.pattern = None
        # a warm start short enough that some calls still fail (fission's prompts)
        cfg.train.warm_start = "sft"
        cfg.sft.steps, cfg.sft.batch_size, cfg.sft.lr, cfg.sft.eval_every = 12, 16, 1e-2, 0
    elif arg:
        raise ValueError(f"unknown argument {arg!r} (dynamic, async, tools)")
    cfg.lock()
    return cfg
