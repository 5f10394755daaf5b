"""The TreePO segment-level advantage (rl/algorithms/tree_advantage.py, level="segment") against
a NumPy re-derivation that follows the authors' string-keyed code
(verl/trainer/ppo/core_algos.py: tree_group_wise_reward, calculate_rewards_iterative,
calculate_segment_advantage, convert_advantages_to_scores)."""

from collections import defaultdict

import jax
import numpy as np
import pytest

from rl.algorithms import advantages


def random_forest(seed, prompts=3, depth=3, seg=4):
    """Real sampled-tree shapes: per prompt a random tree (1-3 children per node,
    leaves at any depth >= 1), plus a few invalid padding rows. Returns rewards,
    group ids, paths [N, depth], valid, mask [N, depth * seg]."""
    rng = np.random.default_rng(seed)
    rows = []
    for p in range(prompts):
        frontier = [()]
        while frontier:
            node = frontier.pop()
            for b in range(int(rng.integers(1, 4)) if node == () else int(rng.integers(1, 3))):
                child = node + (b,)
                if len(child) == depth or rng.random() < 0.35:
                    rows.append((p, child))
                else:
                    frontier.append(child)
    n = len(rows) + 2
    paths = np.full((n, depth), -1)
    g = np.full(n, 99)
    for i, (p, path) in enumerate(rows):
        paths[i, :len(path)] = path
        g[i] = 10 * p + 7
    lengths = np.zeros(n, int)
    for i, (_, path) in enumerate(rows):  # full segments, then a possibly short last one
        lengths[i] = (len(path) - 1) * seg + rng.integers(1, seg + 1)
    mask = np.arange(depth * seg)[None] < lengths[:, None]
    valid = np.arange(n) < len(rows)
    order = rng.permutation(n)
    r = rng.integers(0, 2, n).astype(float)
    return r[order], g[order], paths[order], valid[order], mask[order]


def ref_segment(r, g, paths, valid, mask, seg, weighting="size", token_rewards=None,
                whiten=True, eps=1e-6):
    keys = {i: "#".join([f"u{g[i]}"] + [str(b) for b in paths[i] if b >= 0])
            for i in range(len(r)) if valid[i]}
    # tree_group_wise_reward: every predecessor of the leaf, the prompt and itself included
    below = defaultdict(list)
    for i, key in keys.items():
        parts = key.split("#")
        for k in range(1, len(parts) + 1):
            below["#".join(parts[:k])].append(r[i])
    score = {}
    for i, key in keys.items():
        parts = key.split("#")
        total = weight = 0.0
        for k in range(1, len(parts) + 1):
            members = below["#".join(parts[:k])]
            w = len(members) if weighting == "size" else 1.0
            total += w * (r[i] - np.mean(members))
            weight += w
        score[key] = total / weight
    # calculate_rewards_iterative: a parent is the mean of its children, bottom-up
    value = dict(score)
    for d in range(max(k.count("#") for k in value), 1, -1):
        children = defaultdict(list)
        for key, v in value.items():
            if key.count("#") == d:
                children[key.rsplit("#", 1)[0]].append(v)
        for parent, vs in children.items():
            value[parent] = np.mean(vs)
    for key in keys.values():
        value[key.split("#")[0]] = 0.0  # the prompt
    out = np.zeros(mask.shape)
    sel = mask & valid[:, None]
    for i, key in keys.items():
        parts = key.split("#")
        seg_adv = [value["#".join(parts[:k + 1])] - value["#".join(parts[:k])]
                   for k in range(1, len(parts))]
        tokens = np.repeat(seg_adv, seg)[:mask.shape[1]]
        out[i, :len(tokens)] = tokens
        if token_rewards is not None:  # undiscounted return-to-go over the mask
            rt = np.where(sel[i], token_rewards[i], 0.0)
            out[i] += np.cumsum(rt[::-1])[::-1]
    out = np.where(sel, out, 0.0)
    if whiten:
        x = out[sel]
        out = np.where(sel, (out - x.mean()) / (x.std() + eps), 0.0)
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("weighting", ["size", "average"])
@pytest.mark.parametrize("whiten", [True, False])
def test_segment_level_matches_the_authors_derivation(seed, weighting, whiten):
    seg = 4
    r, g, paths, valid, mask = random_forest(seed, seg=seg)
    got = advantages.compute("tree", r, g, valid=valid, paths=paths, mask=mask,
                             level="segment", segment_len=seg, depth_weighting=weighting,
                             whiten=whiten)
    want = ref_segment(r, g, paths, valid, mask, seg, weighting, whiten=whiten)
    assert got.shape == mask.shape
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_segment_level_default_is_size_weighting_and_adds_token_rewards():
    seg = 3
    r, g, paths, valid, mask = random_forest(7, depth=4, seg=seg)
    kl = -0.05 * np.random.default_rng(1).random(mask.shape)
    got = advantages.compute("tree", r, g, valid=valid, paths=paths, mask=mask,
                             token_rewards=kl, level="segment", segment_len=seg)
    want = ref_segment(r, g, paths, valid, mask, seg, "size", token_rewards=kl)
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_segment_level_jits_and_shared_segments_agree():
    """Jitted as the trainer does; leaves sharing a segment give its tokens one
    advantage (the node's progress), unlike the per-leaf sequence level."""
    seg = 4
    r, g, paths, valid, mask = random_forest(3, seg=seg)
    fn = jax.jit(lambda r, g, v, p, m: advantages.compute(
        "tree", r, g, valid=v, paths=p, mask=m, level="segment", segment_len=seg,
        whiten=False))
    adv = np.asarray(fn(r, g, valid, paths, mask))
    np.testing.assert_allclose(adv, ref_segment(r, g, paths, valid, mask, seg, whiten=False),
                               atol=1e-5)
    for a in np.flatnonzero(valid):
        for b in np.flatnonzero(valid):
            if g[a] == g[b] and paths[a, 0] == paths[b, 0] and a != b:
                # first segment: same node, same advantage on its full-length tokens
                both = mask[a, :seg] & mask[b, :seg]
                np.testing.assert_allclose(adv[a, :seg][both], adv[b, :seg][both], atol=1e-6)


def test_segment_level_options_are_checked():
    r, g, paths, valid, mask = random_forest(0)
    with pytest.raises(ValueError, match="needs the response mask"):
        advantages.compute("tree", r, g, paths=paths, level="segment", segment_len=4)
    with pytest.raises(ValueError, match="segment_len"):
        advantages.compute("tree", r, g, paths=paths, mask=mask, level="segment")
    with pytest.raises(ValueError, match="skip_zero_std"):
        advantages.compute("tree", r, g, paths=paths, mask=mask, level="segment",
                           segment_len=4, skip_zero_std=True)
    with pytest.raises(ValueError, match="level"):
        advantages.compute("tree", r, g, paths=paths, level="token")
    with pytest.raises(ValueError, match="segment_len applies"):
        advantages.compute("tree", r, g, paths=paths, segment_len=4)
