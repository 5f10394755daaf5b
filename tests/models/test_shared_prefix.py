"""models.shared_prefix: packed prompt groups equal their unshared rows, forward and grad."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models import shared_prefix
from tests.tolerances import fp32_atol

CONFIG = models.get_preset("tiny", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4,
                           num_kv_heads=2, head_dim=8, mlp_dim=64)


def make_inputs(p=3, g=2, s=5, tp=6, seed=0):
    rng = np.random.RandomState(seed)
    lens = rng.randint(1, tp + 1, p).astype(np.int32)
    lens[0] = tp  # a full prompt slot and (usually) padded ones
    prompts = rng.randint(0, CONFIG.vocab_size, (p, tp)).astype(np.int32)
    cont = rng.randint(0, CONFIG.vocab_size, (p, g, s)).astype(np.int32)
    return prompts, lens, cont


def unshared(params, prompts, lens, cont):
    """Per (group, continuation): hidden states of prompt[:len] + continuation, one row each."""
    out = []
    for i in range(len(prompts)):
        for j in range(cont.shape[1]):
            row = np.concatenate([prompts[i, :lens[i]], cont[i, j]])[None]
            out.append(models.hidden_states(CONFIG, params, jnp.asarray(row))[0])
    return out


@pytest.mark.parametrize("g,s,scan", [(2, 5, True), (1, 3, True), (4, 1, False)])
def test_hidden_states_equal_unshared_rows(g, s, scan):
    config = CONFIG.replace(scan_layers=scan)
    params = models.init(config, jax.random.key(1))
    prompts, lens, cont = make_inputs(g=g, s=s)
    hp, hc = models.shared_prefix_hidden_states(config, params, prompts, lens, cont)
    assert hp.shape == (3, 6, 32) and hc.shape == (3, g, s, 32)
    rows = unshared(params, prompts, lens, cont)
    for i in range(3):
        for j in range(g):
            ref = rows[i * g + j]
            # packed vs per-row shapes sum in other orders; longest sum: the MLP's mlp_dim
            atol = fp32_atol(ref, config.mlp_dim)
            np.testing.assert_allclose(hp[i, :lens[i]], ref[:lens[i]], atol=atol, rtol=0)
            np.testing.assert_allclose(hc[i, j], ref[lens[i]:], atol=atol, rtol=0)


def test_gradient_equals_unshared_rows():
    params = models.init(CONFIG, jax.random.key(2))
    prompts, lens, cont = make_inputs(seed=3)
    w = jax.random.normal(jax.random.key(4), (3, 2, 5, 32))

    def shared(p):
        _, hc = models.shared_prefix_hidden_states(CONFIG, p, prompts, lens, cont)
        return jnp.sum(hc * w)

    def rows(p):
        out = unshared(p, prompts, lens, cont)
        return sum(jnp.sum(out[i * 2 + j][lens[i]:] * w[i, j]) for i in range(3) for j in range(2))

    ga, gb = jax.grad(shared)(params), jax.grad(rows)(params)
    # Weight gradients sum over the P·(Tp + G·S) = 48 token positions, in another
    # order per path; the longest sum is max(that, mlp_dim) terms of size <= max|grad|
    # (a fixed 1e-5 failed on a near-zero element of a leaf whose max is ~50).
    n = max(prompts.size + cont.size, CONFIG.mlp_dim)
    for a, b in zip(jax.tree.leaves(ga), jax.tree.leaves(gb)):
        np.testing.assert_allclose(a, b, atol=fp32_atol(b, n), rtol=0)


def test_bad_packing_is_an_error():
    q = jnp.zeros((1, 10, 4, 8))
    k = jnp.zeros((1, 10, 2, 8))
    with pytest.raises(ValueError, match="prompt_slots 4 \\+ groups 4"):
        shared_prefix.group_attention(q, k, k, jnp.ones(1, jnp.int32), 4, 4)
