"""Training: a run from its config, one RL step's pieces, the loops that drive them.

  rl.train.build        `resolve(cfg, workdir) -> Run` (every name, option and file
                        checked before compute), the initial policy, exports
  rl.train.checks       the value checks `resolve` runs
  rl.train.collect      a step's rollouts: prompts, samples, rewards, kept groups
  rl.train.april        APRIL's partial-rollout carry-over
  rl.train.scoring      rollout rows submitted to the reward workers
  rl.train.groups       the completions a step keeps and their reward statistics
  rl.train.credit       the step's advantages: KL in the reward, estimator, masks, reweighting
  rl.train.batch        groups -> the learner's padded arrays
  rl.train.learner      `TrainState` and the jitted, sharded, donated update
  rl.train.trainer      the RL loop's job (`Trainer`), run by rl.checkpoint.fit
  rl.train.sft          the supervised warm start
  rl.train.evaluation   held-out greedy accuracy and pass@k
  rl.train.logs         metrics.jsonl, TensorBoard, console progress, progress.png
  rl.train.memory_plan  per-device memory of one step, planned from the config

Design: docs/training.md.
"""
