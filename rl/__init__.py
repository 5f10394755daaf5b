"""Learning: advantage estimators, policy losses, KL, rewards (learner and trainer to come).

  rl.advantages   estimators by name (`compute`), `gradient_mask`, `reweight`
  rl.losses       policy losses by name (`compute` -> (loss, metrics)), `aggregate`
  rl.kl           k1/k2/k3 estimators, reward penalty, full-vocab KL/JS/entropy
  rl.rewards      verifiers by name (`score`)
  rl.algorithm    the `config.rl` section, resolved and checked (`from_config`)

Formulas, options and sources: docs/algorithms.md.
"""
