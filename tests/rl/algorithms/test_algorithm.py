"""config.rl -> Algorithm: every name and option checked before compute."""

import numpy as np
import pytest

from configs import base
from rl.algorithms import advantages, algorithm, losses, off_policy
from rl.registry import RegistryError


def rl_config(**overrides):
    cfg = base.get_config().rl
    cfg.reward.name = "countdown"
    for key, value in overrides.items():
        section, name = key.split("__")
        cfg[section][name] = value
    return cfg


def test_default_section_resolves_and_runs():
    algo = algorithm.from_config(rl_config())
    assert (algo.advantage, algo.loss, algo.kl_kind, algo.reweight) == ("grpo", "ppo", "k3", None)
    assert algo.advantage_options == {} and algo.loss_options == {"entropy_coef": 0.0}
    assert algo.off_policy == off_policy.Correction(None, "token", 2.0, None)
    assert algo.off_policy.kind == ""  # None: set later by the rollout mode
    r, g = np.array([1.0, 0.0, 1.0, 1.0]), np.array([0, 0, 1, 1])
    adv = advantages.compute(algo.advantage, r, g, **algo.advantage_options)
    logp = np.full((4, 3), -1.0)
    loss, _ = losses.compute(algo.loss, logp, logp, adv, np.ones((4, 3), bool),
                             **algo.loss_options)
    assert np.isfinite(loss)


@pytest.mark.parametrize("overrides", [
    {"loss__name": "nsr", "loss__delta_high": 0.05, "loss__mode": "decay"},
    {"loss__name": "gspo", "loss__agg": "seq_mean_token_mean", "loss__eps_high": 4e-4},
    {"loss__name": "ppo", "loss__eps_high": 0.28, "loss__dual_clip": 10.0},
    {"loss__name": "bapo", "loss__target": 0.5, "loss__order": "high_first",
     "loss__measure": "paper", "loss__dual_clip": 3.0},
    {"off_policy__correction": "mis", "off_policy__level": "geometric", "off_policy__cap": 3.0},
    {"off_policy__correction": "tis", "off_policy__floor": 0.5},
    {"advantage__name": "tree", "advantage__depth_weighting": "size"},
    {"advantage__name": "mc_grpo", "advantage__scale": "none"},
    {"reweight__name": "logp_reweight", "reweight__c": 0.2, "reweight__form": "focal"},
    {"reweight__name": "fipo", "reweight__high_only": True},
    {"reward__name": "math", "reward__timeout_s": 1.0},
])
def test_valid_combinations(overrides):
    algorithm.from_config(rl_config(**overrides))


@pytest.mark.parametrize("overrides,match", [
    ({"loss__name": "ppo", "loss__delta_high": 0.1}, "policy loss 'ppo' has no option 'delta_high'"),
    ({"loss__name": "pp0"}, "unknown policy loss 'pp0'"),
    ({"loss__agg": "mean"}, "unknown aggregation 'mean'"),
    ({"advantage__name": "grpo", "advantage__gamma": 0.9}, "'grpo' has no option 'gamma'"),
    ({"kl__kind": "k4"}, "unknown KL estimator 'k4'"),
    ({"reweight__c": 0.3}, "reweight.name is empty"),
    ({"reweight__name": "fipo", "reweight__c": 0.3}, "'fipo' has no option 'c'"),
    ({"reward__name": "sudoku"}, "unknown verifier 'sudoku'"),
    ({"reward__name": "countdown", "reward__pattern": "x"}, "'pattern' is not an option of "
     "countdown \\(options: format_score, require_all\\)"),
    ({"reward__name": "countdown", "reward__workers": -1}, "rl.reward.workers"),
    ({"loss__name": "ppo", "loss__target": 0.5}, "policy loss 'ppo' has no option 'target'"),
    ({"loss__name": "bapo", "loss__eps_high": 0.3}, "'bapo' has no option 'eps_high'"),
    ({"loss__name": "bapo", "loss__low_max": 1.2}, "low_max <= 1"),
    ({"loss__name": "bapo", "loss__order": "any"}, "rl.loss.order must be one of"),
    ({"off_policy__correction": "is"}, "rl.off_policy.correction must be"),
    ({"off_policy__level": "batch"}, "rl.off_policy.level must be one of"),
    ({"off_policy__correction": "mis", "off_policy__cap": 1.0}, "the default floor 1/cap"),
])
def test_errors_name_the_key(overrides, match):
    with pytest.raises((RegistryError, ValueError), match=match):
        algorithm.from_config(rl_config(**overrides))
