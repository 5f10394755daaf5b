"""Speculative decoding's acceptance rule and n-gram drafter (`sampling.speculative`)."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from sampling.speculative import ngram_draft, verify

V = 4  # tokens of the test chain: every 3-token sequence is a cell of the joint test
N = 40_000  # rows drawn per distribution test


def chain(seed):
    """A Markov chain over V tokens: P[a, b] = p(next b | last a), no zero entries."""
    p = np.random.default_rng(seed).dirichlet(np.ones(V), size=V)
    return np.log(p)


def speculate(target, key, length, draft_of):
    """Each of N rows emits `length` tokens from context token 0 by speculative steps of
    k = 2 drafts: `draft_of(last [N], key) -> (draft [N, 2], draft_logp or None)`.
    Returns [N, length] tokens and the mean tokens emitted per verify."""
    rows = [[] for _ in range(N)]
    last = np.zeros(N, np.int64)
    calls = 0
    while min(map(len, rows)) < length:
        key, k1, k2 = jax.random.split(key, 3)
        draft, draft_logp = draft_of(last, k1)
        prefix = np.concatenate([last[:, None], np.asarray(draft)], axis=1)  # [N, 3]
        logp = jnp.asarray(target[prefix])                                    # p_j | prefix
        accepted, tokens = map(np.asarray, verify(logp, jnp.asarray(draft),
                                                  jnp.full(N, 2, jnp.int32), k2, draft_logp))
        for r in range(N):
            rows[r].extend(tokens[r, :accepted[r] + 1].tolist())
        last = np.array([row[-1] for row in rows])
        calls += 1
    return np.array([row[:length] for row in rows]), calls


def assert_joint(samples, target):
    """The empirical joint of 3-token sequences matches the chain's exactly: every cell
    within 5 binomial standard errors (a false alarm in 1e-4 of seeds, and the seeds
    are fixed)."""
    p = np.exp(target)
    for seq in itertools.product(range(V), repeat=3):
        want = p[0, seq[0]] * p[seq[0], seq[1]] * p[seq[1], seq[2]]
        got = np.mean(np.all(samples == seq, axis=1))
        assert abs(got - want) <= 5 * np.sqrt(want * (1 - want) / N), (seq, got, want)


@pytest.mark.slow
def test_a_fixed_drafter_keeps_the_policys_distribution():
    target = chain(0)
    # an adversarial drafter: always proposes 1 then 2, right only sometimes
    samples, calls = speculate(target, jax.random.key(0), 3, lambda last, key: (
        np.tile([1, 2], (N, 1)), None))
    assert_joint(samples, target)
    assert calls >= 2  # some drafts were rejected


@pytest.mark.slow
def test_a_sampling_drafter_keeps_the_policys_distribution():
    target, proposal = chain(1), chain(2)

    def draft_of(last, key):
        k1, k2 = jax.random.split(key)
        x0 = np.asarray(jax.random.categorical(k1, jnp.asarray(proposal[last])))
        x1 = np.asarray(jax.random.categorical(k2, jnp.asarray(proposal[x0])))
        return np.stack([x0, x1], 1), jnp.asarray(proposal[np.stack([last, x0], 1)])

    samples, _ = speculate(target, jax.random.key(1), 3, draft_of)
    assert_joint(samples, target)


def test_greedy_targets_emit_greedy_tokens():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((64, 4, 11))
    greedy = np.where(np.arange(11) == logits.argmax(-1)[..., None], 0.0, -np.inf)
    best = logits.argmax(-1)                                               # [64, 4]
    draft = np.where(rng.random((64, 3)) < 0.7, best[:, :3], (best[:, :3] + 1) % 11)
    proposed = rng.integers(0, 4, 64)
    accepted, tokens = map(np.asarray, verify(jnp.asarray(greedy), jnp.asarray(draft),
                                              jnp.asarray(proposed, jnp.int32),
                                              jax.random.key(0)))
    for r in range(64):
        a = 0
        while a < proposed[r] and draft[r, a] == best[r, a]:
            a += 1
        assert accepted[r] == a
        np.testing.assert_array_equal(tokens[r, :a + 1], best[r, :a + 1])
        assert np.all(tokens[r, a + 1:] == 0)


def ngram_reference(history, lengths, members, n_max, k, n_min=1):
    draft = np.zeros((len(lengths), k), np.int64)
    proposed = np.zeros(len(lengths), np.int64)
    for r, length in enumerate(lengths):
        for n in range(n_max, n_min - 1, -1):
            if length < n:
                continue
            tail = list(history[r, length - n:length])
            hit = None
            for s in members[r]:
                if s < 0:
                    continue
                text = list(history[s, :lengths[s]])
                ends = [e for e in range(n, len(text)) if text[e - n:e] == tail]
                if ends:
                    hit = (text, max(ends), s == r)
                    break
            if hit is not None:
                text, end, own = hit
                got = text[end:end + k]
                if own:  # the row's own text: what follows the match repeats
                    period = text[end:]
                    got = [period[j % len(period)] for j in range(k)]
                draft[r, :len(got)], proposed[r] = got, len(got)
                break
    return draft, proposed


@pytest.mark.parametrize("seed", range(3))
def test_ngram_draft_matches_a_plain_search(seed):
    rng = np.random.default_rng(seed)
    b, t = 12, 24
    history = rng.integers(0, 3, (b, t))  # 3 symbols: many repeats
    lengths = rng.integers(0, t + 1, b)
    group = np.arange(b) // 4
    members = np.full((b, 4), -1)
    for r in range(b):
        mates = [r] + [s for s in range(b) if group[s] == group[r] and s != r]
        members[r, :len(mates)] = mates if seed != 2 else mates[:1] + [-1] * (len(mates) - 1)
    draft, proposed = ngram_draft(jnp.asarray(history), jnp.asarray(lengths),
                                  jnp.asarray(members), n_max=3, k=4)
    want_draft, want_proposed = ngram_reference(history, lengths, members, 3, 4)
    np.testing.assert_array_equal(np.asarray(proposed), want_proposed)
    np.testing.assert_array_equal(np.asarray(draft), want_draft)
