"""A 3-step run on a 2×2×2 mesh for the multi-process test (tests/launch/test_multiprocess.py).

    python -m launch.train --config=tests/launch/multiprocess_config.py:flat --workdir=DIR
    python -m launch.train --config=tests/launch/multiprocess_config.py:tree --workdir=DIR
    python -m launch.train --config=tests/launch/multiprocess_config.py:async --workdir=DIR

The suite's very small model (tests/rl/fault_config.py) with 4 prompts a step (so each
of 2 processes reads 2), a KL penalty (a reference model), a held-out eval at the end,
a checkpoint every 2 steps, and data × fsdp × tensor = 2 × 2 × 2: every sharding
strategy spans both processes.
"""

from configs import base
from tests.rl.fault_config import very_small


def get_config(arg: str = "flat"):
    cfg = very_small(base.build("tiny"))
    cfg.train.steps, cfg.train.eval_every, cfg.train.prompts_per_step = 3, 0, 4
    cfg.train.plot = False
    cfg.train.tensorboard = False
    cfg.rl.reward.name = "format"  # a digit anywhere: rewards vary within a group
    cfg.rl.reward.pattern = ".*[0-9].*"
    cfg.rl.kl.coef = 0.01  # a reference model, sharded like the policy
    cfg.eval.batch_prompts = 8
    # Adam moves a parameter by lr·g/(|g| + eps): where the true gradient is 0 (the key
    # bias: softmax ignores a shift shared by all keys) g is rounding noise, and with
    # eps = 1e-8 noise of 1e-10 moves it by ~lr. With eps = 1e-6 a rounding difference
    # δ between two layouts moves a parameter by at most lr·δ/eps per step.
    cfg.optim.eps = 1e-6
    cfg.checkpoint.every = 2
    cfg.mesh.data, cfg.mesh.fsdp, cfg.mesh.tensor = 2, 2, 2
    if arg == "tree":
        cfg.sampling.sampler = "tree"
        cfg.sampling.page_size = 4
        cfg.sampling.tree.segment_len = 4
        cfg.sampling.tree.max_depth = 2
        cfg.sampling.tree.leaves_per_prompt = 4
        cfg.sampling.tree.first_branching = "2"
        cfg.rl.advantage.name = "tree"
    elif arg == "async":
        # the sampler on 4 devices of its own (2 per process: data 2 × tensor 2), the
        # learner on the other 4 (fsdp 2 × tensor 2), both spanning the two processes;
        # the sampler one policy version ahead, unfinished samples carried (2 segments)
        cfg.mesh.data, cfg.mesh.rollout_devices = 1, 4
        cfg.rollout.mode, cfg.rollout.max_staleness = "async", 1
        cfg.sampling.page_size = cfg.sampling.segment_len = 4
    elif arg != "flat":
        raise ValueError(f"unknown argument {arg!r} (flat, tree, async)")
    cfg.lock()
    return cfg
