"""Learning: everything about RL post-training, in wings that import downward only.

  rl.registry     the string-keyed registry every wing's components go through
  rl.rewards      verifiers by name (`score`, `RewardSpec`), scored in worker processes
  rl.algorithms   advantage estimators, policy losses, KL estimators, token
                  reweighting, DAPO's overlong penalty, and the `config.rl` section
                  resolved and checked (`rl.algorithms.from_config`)
  rl.data         prompt sources (procedural tasks, JSONL, Parquet, TFDS) and task
                  selectors (uniform, DARS, BOTS)
  rl.checkpoint   fault tolerance: Orbax checkpoints, in-memory snapshots, rollback,
                  preemption, fault injection, and the fault-tolerant step loop (`fit`)
  rl.train        a run from its config (`build`), the step's pieces (collect,
                  groups, batch, learner), the RL trainer, the SFT warm start,
                  evaluation, logs and the memory plan
  rl.analysis     token-level comparison of two policies (Δlog p, divergences,
                  cross-sampling, extrapolation) and its report
  rl.sweeps       ablation sweeps: sweep files, their runs, results tables and curves

The order above is the layering, bottom first: a wing imports only the wings above
it in this list (and `models`, `sampling`); tests/test_layout.py checks it.
Formulas, options and sources: docs/algorithms.md; the layout: docs/layout.md.
"""
