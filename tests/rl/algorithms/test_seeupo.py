"""SeeUPO's numerics against NumPy references written from the formulas (the authors'
code: modelscope/AgentEvolver, branch seeupo)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rl.algorithms import advantages, seeupo


def ref_advantage(rewards, groups, valid, clip=3.0, floor=1e-6):
    rewards, groups, valid = map(np.asarray, (rewards, groups, valid))
    centred = np.zeros(len(rewards))
    for i in np.flatnonzero(valid):
        members = np.flatnonzero(valid & (groups == groups[i]))
        centred[i] = rewards[i] - (rewards[members].mean() if len(members) > 1 else 0.0)
    x = centred[valid]
    std = x.std(ddof=1) if len(x) > 1 else 0.0
    scaled = (x - x.mean()) / std if std > floor else x - x.mean()
    out = np.zeros(len(rewards))
    out[valid] = np.clip(scaled, -clip, clip)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_advantage_matches_reference(seed):
    rng = np.random.default_rng(seed)
    groups = np.repeat(np.arange(5), 4)[: 18]  # a group of 2 at the end
    groups = np.concatenate([groups, [9]])       # and a group of one
    rewards = rng.choice([0.0, 0.5, 1.0, 1.5, -1.0], len(groups))
    valid = rng.random(len(groups)) > 0.15
    got = advantages.compute("seeupo", rewards, groups, valid=valid)
    np.testing.assert_allclose(got, ref_advantage(rewards, groups, valid), atol=1e-5)


def test_equal_groups_give_zero_mean_unit_variance_before_the_clip():
    rewards = np.array([1, 0, 0, 0, 1, 1, 0, 1, 0, 0, 0, 1.0])
    got = np.asarray(advantages.compute("seeupo", rewards, np.repeat(np.arange(3), 4),
                                        clip=100.0))
    assert abs(got.mean()) < 1e-6 and abs(got.std(ddof=1) - 1) < 1e-5


def test_uniform_rewards_are_zero_and_the_clip_bounds():
    assert np.all(np.asarray(advantages.compute("seeupo", np.ones(8), np.repeat([0, 1], 4)))
                  == 0)
    outlier = np.zeros(40)
    outlier[0] = 1.0  # one success in 40: a standardised value of ~6.2
    got = np.asarray(advantages.compute("seeupo", outlier, np.arange(40)))
    assert got[0] == 3.0


def test_sequence_log_ratio_and_factor_match_reference():
    rng = np.random.default_rng(0)
    new, old = rng.normal(size=(2, 5, 7))
    mask = rng.random((5, 7)) > 0.4
    mask[3] = False  # a row with no token in this turn
    new[1] += 30.0   # a ratio past the ±10 bound
    got = np.asarray(seeupo.sequence_log_ratio(jnp.asarray(new), jnp.asarray(old),
                                               jnp.asarray(mask)))
    want = np.array([np.clip((new[i] - old[i])[mask[i]].mean(), -10, 10) if mask[i].any()
                     else 0.0 for i in range(5)])
    np.testing.assert_allclose(got, want, atol=1e-5)
    factor = np.array([1.0, 0.9, 1.15, 1.1, 0.8])
    present = mask.any(axis=1)
    updated = np.asarray(seeupo.update_factor(jnp.asarray(factor), jnp.asarray(got),
                                              jnp.asarray(present)))
    rho = np.clip(np.exp(want), 0.8, 1.2)
    np.testing.assert_allclose(updated, np.where(present, np.clip(factor * rho, 0.8, 1.2),
                                                 factor), atol=1e-6)
    assert np.all((updated >= 0.8 - 1e-7) & (updated <= 1.2 + 1e-7))


def test_the_factor_is_detached():
    grad = jax.grad(lambda l: seeupo.update_factor(jnp.ones(3), l, jnp.ones(3, bool)).sum())(
        jnp.array([0.01, -0.02, 0.0]))
    assert np.all(np.asarray(grad) == 0)


def test_turn_order_and_masks():
    assert seeupo.turn_order(3) == [2, 1, 0]
    assert seeupo.turn_order(3, "sequential") == [0, 1, 2]
    with pytest.raises(ValueError, match="rl.multiturn.order must be one of reverse"):
        seeupo.turn_order(3, "random")
    with pytest.raises(ValueError, match="turns must be >= 1"):
        seeupo.turn_order(0)
    ids = jnp.array([[0, 0, -1, 1, 1, 2], [0, -1, 1, 1, 1, 1]])
    mask = jnp.array([[1, 1, 0, 1, 1, 0], [1, 0, 1, 1, 0, 0]], bool)
    np.testing.assert_array_equal(seeupo.turn_mask(ids, mask, 1),
                                  [[0, 0, 0, 1, 1, 0], [0, 0, 1, 1, 0, 0]])
