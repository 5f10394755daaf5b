"""The algorithm library: pure, jit-compatible functions chosen by name.

  rl.algorithms.advantages      estimators (`compute(name, rewards, group_ids)`),
                                `gradient_mask`; the TreePO tree estimator lives in
                                rl.algorithms.tree_advantage
  rl.algorithms.losses          policy losses (`compute(name, ...) -> (loss, metrics)`),
                                aggregation modes, KL and entropy terms
  rl.algorithms.off_policy      the off-policy correction against the behaviour policy
                                (TIS/MIS at token, sequence or geometric level) and the
                                interpolated proximal policy
  rl.algorithms.bapo            BAPO's adaptive clip-bound search (the `bapo` loss)
  rl.algorithms.kl              k1/k2/k3 estimators, the reward penalty, full-vocabulary
                                KL/JS/entropy
  rl.algorithms.reweighting     token reweighters (fipo, logp_reweight,
                                divergence_weighted, delta_logp_mask)
  rl.algorithms.overlong        DAPO's soft overlong penalty
  rl.algorithms.seeupo          SeeUPO's multi-turn numerics (the `seeupo` estimator, the
                                turns' sequence ratios and advantage factor, turn order)
  rl.algorithms.ops             masked means and group statistics they share
  rl.algorithms.algorithm       `Algorithm`: the `config.rl` section resolved and
                                checked (`from_config`)

Each estimator and loss has an independent NumPy reference test. Formulas and
sources: docs/algorithms.md.
"""

from rl.algorithms.algorithm import Algorithm, from_config

__all__ = ["Algorithm", "from_config"]
