"""Learning: the algorithm library, the learner, the RL loop and its pieces.

  rl.advantages   estimators by name (`compute`), `gradient_mask`, `reweight`
  rl.losses       policy losses by name (`compute` -> (loss, metrics)), `aggregate`
  rl.kl           k1/k2/k3 estimators, reward penalty, full-vocab KL/JS/entropy
  rl.rewards      verifiers by name (`score`)
  rl.algorithm    the `config.rl` section, resolved and checked (`from_config`)
  rl.build        a run's parts from a config, every value checked before compute
  rl.checks       the value checks `rl.build.resolve` runs
  rl.data         procedural tasks and prompt sources
  rl.learner      `TrainState` and the jitted, sharded policy update
  rl.trainer      the RL loop (rollouts, rewards, advantages, update, eval, logs)
  rl.groups       the completions a step keeps and their reward statistics
  rl.sft          the supervised warm start
  rl.evaluation   held-out greedy accuracy and pass@k
  rl.logs         metrics.jsonl, TensorBoard, console progress, progress.png

Formulas, options and sources: docs/algorithms.md.
"""
