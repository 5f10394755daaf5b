"""Advantage estimators against NumPy references written from the formulas."""

import collections

import jax
import numpy as np
import pytest

from rl.algorithms import advantages
from rl.registry import RegistryError


def _groups(group_ids, valid):
    members = collections.defaultdict(list)
    for i, (g, v) in enumerate(zip(group_ids, valid)):
        if v:
            members[int(g)].append(i)
    return members


def ref_grpo(r, g, valid, eps=1e-6, ddof=1, scale=True):
    out = np.zeros(len(r))
    for idx in _groups(g, valid).values():
        x = r[idx]
        std = np.std(x, ddof=ddof) if len(x) > ddof else 0.0
        out[idx] = (x - x.mean()) / (std + eps) if scale else x - x.mean()
    return out


def ref_rloo(r, g, valid):
    out = np.zeros(len(r))
    for idx in _groups(g, valid).values():
        for i in idx:
            others = [r[j] for j in idx if j != i]
            out[i] = r[i] - np.mean(others) if others else 0.0
    return out


def ref_whiten(x, sel, eps=1e-6):
    v = x[sel]
    out = np.zeros_like(x)
    out[sel] = (v - v.mean()) / (np.std(v) + eps)
    return out


def ref_mc_grpo(r, g, valid, scale="mad"):
    """The authors' (R - median) / (MAD + 1e-3), the lower median for an even group."""
    out, keep = np.zeros(len(r)), np.array(valid, bool)
    for idx in _groups(g, valid).values():
        order = sorted(idx, key=lambda i: (r[i], i))
        pivot = order[(len(order) - 1) // 2]
        median = r[pivot]
        mad = sorted(abs(r[i] - median) for i in idx)[(len(idx) - 1) // 2]
        std = np.std(r[idx], ddof=1) if len(idx) > 1 else 0.0
        for i in idx:
            out[i] = {"mad": (r[i] - median) / (mad + 1e-3),
                      "group": (r[i] - median) / (std + 1e-6), "none": r[i] - median}[scale]
        out[pivot], keep[pivot] = 0.0, False
    return out, keep


def random_batch(seed, groups=4, size=5, binary=True):
    rng = np.random.default_rng(seed)
    n = groups * size
    r = rng.integers(0, 2, n).astype(np.float64) if binary else rng.normal(size=n)
    g = rng.permutation(np.repeat(rng.choice(1000, groups, replace=False), size))
    valid = rng.random(n) > 0.15
    # a zero-variance group and a singleton group
    r[g == g[0]] = 1.0
    valid[np.flatnonzero(g == g[1])[1:]] = False
    return r, g, valid


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("binary", [True, False])
def test_group_estimators_match_reference(seed, binary):
    r, g, valid = random_batch(seed, binary=binary)
    got = lambda name, **kw: np.asarray(advantages.compute(name, r, g, valid=valid, **kw))
    np.testing.assert_allclose(got("grpo"), ref_grpo(r, g, valid), atol=1e-5)
    np.testing.assert_allclose(got("grpo", ddof=0, eps=1e-3),
                               ref_grpo(r, g, valid, eps=1e-3, ddof=0), atol=1e-5)
    np.testing.assert_allclose(got("dr_grpo"), ref_grpo(r, g, valid, scale=False), atol=1e-6)
    np.testing.assert_allclose(got("rloo"), ref_rloo(r, g, valid), atol=1e-6)
    np.testing.assert_allclose(got("reinforce_pp"), ref_whiten(r, valid), atol=1e-5)
    np.testing.assert_allclose(got("reinforce_pp_baseline"),
                               ref_whiten(ref_grpo(r, g, valid, scale=False), valid), atol=1e-5)
    mc, keep = ref_mc_grpo(r, g, valid)
    # fp32 quotient by MAD + 1e-3 >= 1e-3: relative error ~1e-7 of values up to ~1e3
    np.testing.assert_allclose(got("mc_grpo"), mc, rtol=1e-5, atol=1e-5)
    for scale in ("group", "none"):
        np.testing.assert_allclose(got("mc_grpo", scale=scale),
                                   ref_mc_grpo(r, g, valid, scale=scale)[0], atol=1e-5)
    np.testing.assert_array_equal(advantages.gradient_mask("mc_grpo", r, g, valid=valid), keep)
    np.testing.assert_array_equal(advantages.gradient_mask("grpo", r, g, valid=valid), valid)


def test_grpo_batch_std_scope():
    r, g, valid = random_batch(7, binary=False)
    got = advantages.compute("grpo", r, g, valid=valid, std_scope="batch")
    want = np.where(valid, ref_grpo(r, g, valid, scale=False) / (np.std(r[valid], ddof=1) + 1e-6), 0)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_zero_variance_and_singleton_groups_give_zero():
    r = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 5.0])
    g = np.array([0, 0, 0, 1, 1, 2])
    for name in ["grpo", "dr_grpo", "rloo", "mc_grpo"]:
        np.testing.assert_array_equal(advantages.compute(name, r, g), 0.0, err_msg=name)


def test_invalid_samples_do_not_change_valid_ones():
    r, g, valid = random_batch(3)
    for name in ["grpo", "rloo", "mc_grpo", "reinforce_pp_baseline"]:
        a = advantages.compute(name, r, g, valid=valid)
        r2 = np.where(valid, r, 123.0)  # garbage rewards on invalid samples
        b = advantages.compute(name, r2, g, valid=valid)
        np.testing.assert_allclose(a, b, atol=1e-6, err_msg=name)
        assert np.all(np.asarray(a)[~valid] == 0.0)


def test_mc_grpo_mad_of_a_binary_group():
    # 5 samples, 3 right: median 1, |R - 1| = (0, 0, 0, 1, 1), MAD 0: the wrong ones
    # get -1 / 1e-3 (the authors' eps bounds it); 2 right of 5: median 0, MAD 0
    r = np.array([1, 1, 1, 0, 0, 1, 1, 0, 0, 0], float)
    g = np.repeat([0, 1], 5)
    adv = np.asarray(advantages.compute("mc_grpo", r, g))
    np.testing.assert_allclose(adv, [0, 0, 0, -1e3, -1e3, 1e3, 1e3, 0, 0, 0], rtol=1e-6)


def test_mc_grpo_median_over_g_plus_one():
    # G = 4 gradient samples + 1 pivot per group; the median of 5 binary
    # rewards is the majority value and exactly one sample is the pivot.
    rng = np.random.default_rng(0)
    r = rng.integers(0, 2, 40).astype(float)
    g = np.repeat(np.arange(8), 5)
    keep = np.asarray(advantages.gradient_mask("mc_grpo", r, g))
    assert np.all(keep.reshape(8, 5).sum(1) == 4)
    adv = np.asarray(advantages.compute("mc_grpo", r, g, scale="none")).reshape(8, 5)
    for k in range(8):
        median = np.median(r[g == k])
        np.testing.assert_allclose(adv[k][keep.reshape(8, 5)[k]],
                                   (r[g == k] - median)[keep.reshape(8, 5)[k]])


def ref_reinforce_tokens(score, mask, token_rewards, gamma, eps=1e-6):
    n, t = mask.shape
    returns = np.zeros((n, t))
    for i in range(n):
        length = int(mask[i].sum())
        rew = np.where(mask[i], token_rewards[i], 0.0)
        if length:
            rew[length - 1] += score[i]
        for s in range(t):
            returns[i, s] = sum(gamma ** (k - s) * rew[k] for k in range(s, t))
    return ref_whiten(returns, mask.astype(bool), eps)


@pytest.mark.parametrize("baseline", [False, True])
def test_reinforce_pp_token_level(baseline):
    rng = np.random.default_rng(1)
    r, g, valid = random_batch(2)
    n, t = len(r), 7
    lengths = rng.integers(0, t + 1, n)
    lengths[0], lengths[1] = 1, 0  # a length-1 and an all-masked response
    mask = np.arange(t)[None] < lengths[:, None]
    kl_rewards = -0.05 * rng.random((n, t))
    got = advantages.compute("reinforce_pp", r, g, valid=valid, mask=mask,
                             token_rewards=kl_rewards, gamma=0.9, baseline=baseline)
    score = ref_grpo(r, g, valid, scale=False) if baseline else r
    want = ref_reinforce_tokens(score, mask & valid[:, None], kl_rewards, 0.9)
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.all(np.asarray(got)[~mask] == 0.0)


def ref_tree(r, g, paths, valid, weighting="average", skip_zero_std=False, whiten=True):
    """TreePO: per-depth prefix subgroups by string keys, like the authors' ids."""
    keys = ["#".join([str(int(g[i]))] + [str(b) for b in paths[i] if b >= 0])
            for i in range(len(r))]
    depth = [k.count("#") for k in keys]
    adv = np.zeros(len(r))
    for i in range(len(r)):
        if not valid[i]:
            continue
        terms, weights = [], []
        for d in range(paths.shape[1] + 1):
            if d > depth[i]:
                break
            prefix = "#".join(keys[i].split("#")[:d + 1])
            members = [j for j in range(len(r)) if valid[j] and depth[j] >= d
                       and "#".join(keys[j].split("#")[:d + 1]) == prefix]
            if d > 0 and len(members) < 2:
                continue
            if d > 0 and skip_zero_std and np.std(r[members]) == 0:
                continue
            terms.append(r[i] - np.mean(r[members]))
            weights.append(1.0 if weighting == "average" else len(members))
        adv[i] = np.dot(terms, weights) / np.sum(weights)
    return ref_whiten(adv, np.asarray(valid, bool)) if whiten else adv


def random_tree(seed, prompts=3, leaves=8, depth=3):
    rng = np.random.default_rng(seed)
    paths = np.full((prompts * leaves, depth), -1)
    for i in range(prompts * leaves):
        d = rng.integers(0, depth + 1)
        paths[i, :d] = rng.integers(0, 2, d)
    g = np.repeat(rng.choice(50, prompts, replace=False), leaves)
    r = rng.integers(0, 2, prompts * leaves).astype(float)
    valid = rng.random(prompts * leaves) > 0.1
    return r, g, paths, valid


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("weighting", ["average", "size"])
@pytest.mark.parametrize("skip", [False, True])
def test_tree_matches_reference(seed, weighting, skip):
    r, g, paths, valid = random_tree(seed)
    got = advantages.compute("tree", r, g, valid=valid, paths=paths,
                             depth_weighting=weighting, skip_zero_std=skip)
    want = ref_tree(r, g, paths, valid, weighting, skip)
    np.testing.assert_allclose(got, want, atol=1e-5)
    raw = advantages.compute("tree", r, g, valid=valid, paths=paths,
                             depth_weighting=weighting, skip_zero_std=skip, whiten=False)
    np.testing.assert_allclose(raw, ref_tree(r, g, paths, valid, weighting, skip, False),
                               atol=1e-6)


def test_tree_depth_zero_is_group_mean_baseline():
    r, g, _, valid = random_tree(11)
    flat = np.full((len(r), 4), -1)
    np.testing.assert_allclose(
        advantages.compute("tree", r, g, valid=valid, paths=flat, whiten=False),
        advantages.compute("dr_grpo", r, g, valid=valid), atol=1e-6)
    np.testing.assert_allclose(
        advantages.compute("tree", r, g, valid=valid, paths=flat),
        advantages.compute("reinforce_pp_baseline", r, g, valid=valid), atol=1e-6)


def test_tree_token_whitening_weighs_long_responses():
    r, g, paths, valid = random_tree(4)
    mask = np.arange(6)[None] < np.random.default_rng(0).integers(0, 7, len(r))[:, None]
    got = advantages.compute("tree", r, g, valid=valid, paths=paths, mask=mask)
    raw = ref_tree(r, g, paths, valid, whiten=False)
    sel = mask & valid[:, None]
    want = ref_whiten(np.broadcast_to(raw[:, None], mask.shape).copy(), sel)
    np.testing.assert_allclose(got, want, atol=1e-5)


def ref_tree_tokens(raw, mask, token_rewards, whiten=True):
    """raw [N] tree advantage -> [N, T]: raw_i + sum of token_rewards over masked k >= t."""
    out = np.zeros(mask.shape)
    for i, t in zip(*np.nonzero(mask)):
        out[i, t] = raw[i] + sum(token_rewards[i, k] for k in range(t, mask.shape[1])
                                 if mask[i, k])
    return ref_whiten(out, mask) if whiten else out


def tree_with_kl(seed, t=6):
    r, g, paths, valid = random_tree(seed)
    rng = np.random.default_rng(seed + 100)
    lengths = rng.integers(0, t + 1, len(r))
    lengths[:2] = 1, 0  # a length-1 and an all-masked response
    mask = np.arange(t)[None] < lengths[:, None]
    kl_rewards = -0.05 * rng.random((len(r), t))  # nonzero off the mask too: must be ignored
    return r, g, paths, valid, mask, kl_rewards


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("weighting", ["average", "size"])
@pytest.mark.parametrize("whiten", [True, False])
def test_tree_token_rewards_add_their_return_to_go(seed, weighting, whiten):
    r, g, paths, valid, mask, kl_rewards = tree_with_kl(seed)
    got = advantages.compute("tree", r, g, valid=valid, paths=paths, mask=mask,
                             token_rewards=kl_rewards, depth_weighting=weighting,
                             whiten=whiten)
    raw = ref_tree(r, g, paths, valid, weighting, whiten=False)
    want = ref_tree_tokens(raw, mask & valid[:, None], kl_rewards, whiten)
    assert got.shape == mask.shape
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.all(np.asarray(got)[~(mask & valid[:, None])] == 0.0)


def test_tree_token_rewards_without_branching_is_reinforce_pp_baseline():
    r, g, _, valid, mask, kl_rewards = tree_with_kl(5)
    flat = np.full((len(r), 3), -1)
    np.testing.assert_allclose(
        advantages.compute("tree", r, g, valid=valid, paths=flat, mask=mask,
                           token_rewards=kl_rewards),
        advantages.compute("reinforce_pp_baseline", r, g, valid=valid, mask=mask,
                           token_rewards=kl_rewards), atol=1e-5)


def test_tree_token_rewards_need_the_mask():
    r, g, paths, valid, _, kl_rewards = tree_with_kl(0)
    with pytest.raises(ValueError, match="tree: token_rewards needs the response mask"):
        advantages.compute("tree", r, g, valid=valid, paths=paths, token_rewards=kl_rewards)


@pytest.mark.parametrize("name,kwargs", [
    ("grpo", {}), ("dr_grpo", {}), ("rloo", {}), ("reinforce_pp", {}),
    ("reinforce_pp_baseline", {}), ("mc_grpo", {}), ("tree", {"paths": None}),
])
def test_jit_matches_eager(name, kwargs):
    r, g, paths, valid = random_tree(2)
    kwargs = {k: (paths if k == "paths" else v) for k, v in kwargs.items()}
    eager = advantages.compute(name, r, g, valid=valid, **kwargs)
    jitted = jax.jit(lambda r, g, v, kw: advantages.compute(name, r, g, valid=v, **kw))(
        r, g, valid, kwargs)
    np.testing.assert_allclose(eager, jitted, atol=1e-6)


def test_errors_name_the_problem():
    with pytest.raises(RegistryError, match="unknown advantage estimator 'grop'.*grpo"):
        advantages.compute("grop", [1.0], [0])
    with pytest.raises(RegistryError, match="'grpo' has no option 'epsilon'.*eps"):
        advantages.compute("grpo", [1.0], [0], epsilon=1.0)
    with pytest.raises(TypeError, match="group_ids must be integers"):
        advantages.compute("grpo", [1.0], [0.5])
    with pytest.raises(ValueError, match="std_scope"):
        advantages.compute("grpo", [1.0], [0], std_scope="prompt")
