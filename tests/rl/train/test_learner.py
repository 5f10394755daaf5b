"""rl.train.learner: chunked token log-probs, the update against a hand-written step,
epochs/minibatches, donation, schedules, and mesh (2×2×2) == one device."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import models
from configs import base
from models import sharding
from rl.algorithms import algorithm as algorithm_lib
from rl.algorithms import losses, off_policy
from rl.train import learner as learner_lib
from tests.tolerances import fp32_atol

CONFIG = models.get_preset("tiny", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4,
                           num_kv_heads=2, head_dim=8, mlp_dim=64)


def make_batch(n=8, prompt=5, c=8, seed=0, group=2):
    """n completion rows in n // group prompt groups (right-padded prompts)."""
    rng = np.random.RandomState(seed)
    p = n // group
    prompt_lens = rng.randint(2, prompt + 1, p).astype(np.int32)
    prompts = np.zeros((p, prompt), np.int32)
    for i in range(p):
        prompts[i, :prompt_lens[i]] = rng.randint(0, CONFIG.vocab_size, prompt_lens[i])
    lengths = rng.randint(1, c + 1, n)
    completion = rng.randint(0, CONFIG.vocab_size, (n, c)).astype(np.int32)
    mask = np.arange(c)[None] < lengths[:, None]
    completion = np.where(mask, completion, 0)
    return {
        "prompts": prompts, "prompt_lens": prompt_lens, "completion": completion, "mask": mask,
        "advantages": np.repeat(rng.randn(n, 1), c, 1).astype(np.float32) * mask,
        "old_logp": (-rng.rand(n, c) * 3 - 1).astype(np.float32),
        "ref_logp": (-rng.rand(n, c) * 3 - 1).astype(np.float32),
    }


def make_algorithm(**overrides):
    rl = base.rl_section()
    rl.kl.coef = 0.04
    rl.reward.name = "countdown"
    for key, value in overrides.items():
        section, _, field = key.partition(".")
        rl[section][field] = value
    return algorithm_lib.from_config(rl)


def padded_rows(batch):
    """Each row's own prompt + completion, right-padded to one width [N, W], and the
    positions that predict its completion tokens [N, C]."""
    n, c = batch["completion"].shape
    g = n // len(batch["prompts"])
    rows = np.zeros((n, batch["prompts"].shape[1] + c), np.int32)
    starts = np.zeros(n, np.int32)
    for r in range(n):
        p = batch["prompt_lens"][r // g]
        rows[r, :p + c] = np.concatenate([batch["prompts"][r // g, :p], batch["completion"][r]])
        starts[r] = p - 1
    return rows, starts[:, None] + np.arange(c)[None]


def reference_logprobs(params, batch, temperature):
    """Unshared reference: every row through `models.apply` on its own tokens (causal:
    the padding after a row changes none of them). [N, C] log-probs of the completion
    tokens and entropies."""
    rows, at = padded_rows(batch)
    logits = _apply(CONFIG, params, jnp.asarray(rows)) / temperature
    lp = jnp.take_along_axis(jax.nn.log_softmax(logits, -1), jnp.asarray(at)[..., None], 1)
    logp = jnp.take_along_axis(lp, jnp.asarray(batch["completion"])[..., None], -1)[..., 0]
    return logp, -jnp.sum(jnp.exp(lp) * lp, -1)


_apply = jax.jit(models.apply, static_argnums=0)
_token_logprobs = jax.jit(learner_lib.token_logprobs, static_argnums=0,
                          static_argnames=("temperature", "logits_chunk"))


@pytest.mark.parametrize("chunk,group", [(8, 2), (4, 1), (2, 4), (8, 8)])
def test_token_logprobs_match_full_softmax(chunk, group):
    params = models.init(CONFIG, jax.random.key(0))
    batch = make_batch(group=group)
    logp, entropy = _token_logprobs(
        CONFIG, params, jnp.asarray(batch["prompts"]), jnp.asarray(batch["prompt_lens"]),
        jnp.asarray(batch["completion"]), temperature=0.7, logits_chunk=chunk)
    ref_logp, ref_entropy = reference_logprobs(params, batch, 0.7)
    # shared-prefix packing and chunks vs per-row forwards: other summation orders;
    # the longest sums are the MLP's and the softmax's, mlp_dim and vocab_size terms
    n = max(CONFIG.mlp_dim, CONFIG.vocab_size)
    np.testing.assert_allclose(logp, ref_logp, atol=fp32_atol(ref_logp, n), rtol=0)
    np.testing.assert_allclose(entropy, ref_entropy, atol=fp32_atol(ref_entropy, n), rtol=0)


@pytest.mark.parametrize("chunk", [8, 3])
def test_token_js_matches_full_vocabulary_reference(chunk):
    params_a = models.init(CONFIG, jax.random.key(0))
    params_b = models.init(CONFIG, jax.random.key(1))
    batch = make_batch(group=2)
    js = learner_lib.token_js(
        CONFIG, params_a, params_b, jnp.asarray(batch["prompts"]),
        jnp.asarray(batch["prompt_lens"]), jnp.asarray(batch["completion"]),
        temperature=0.7, logits_chunk=chunk)
    rows, at = padded_rows(batch)  # each row on its own through models.apply
    pa, pb = (np.take_along_axis(np.asarray(jax.nn.softmax(
        _apply(CONFIG, w, jnp.asarray(rows)) / 0.7, -1), np.float64), at[..., None], 1)
        for w in (params_a, params_b))
    m = (pa + pb) / 2  # JS in float64 NumPy
    want = 0.5 * (pa * np.log(pa / m)).sum(-1) + 0.5 * (pb * np.log(pb / m)).sum(-1)
    assert want.max() > 1e-3  # two different random models: a real divergence to match
    # the logits come out of another summation order (~1e-6 relative, fp32) and JS moves
    # by at most the probability change per unit logit change: rtol 1e-4 bounds it with
    # room; the float64 reference itself is exact to ~1e-15
    np.testing.assert_allclose(js, want, atol=fp32_atol(want, CONFIG.vocab_size), rtol=1e-4)
    same = learner_lib.token_js(CONFIG, params_a, params_a, jnp.asarray(batch["prompts"]),
                                jnp.asarray(batch["prompt_lens"]),
                                jnp.asarray(batch["completion"]), logits_chunk=chunk)
    np.testing.assert_allclose(same, 0.0, atol=1e-6)


def test_chunked_gradient_equals_unchunked():
    params = models.init(CONFIG, jax.random.key(1))
    batch = {k: jnp.asarray(v) for k, v in make_batch().items()}

    def total(p, chunk):
        logp, ent = _token_logprobs(CONFIG, p, batch["prompts"], batch["prompt_lens"],
                                    batch["completion"], logits_chunk=chunk)
        return jnp.sum(jnp.where(batch["mask"], logp + 0.1 * ent, 0.0))

    grad = jax.jit(jax.grad(total), static_argnums=1)
    g8, g2 = grad(params, 8), grad(params, 2)
    # chunking reorders sums; longest: mlp_dim, vocab_size, or the tokens a grad sums over
    n = max(CONFIG.mlp_dim, CONFIG.vocab_size, batch["prompts"].size + batch["completion"].size)
    for a, b in zip(jax.tree.leaves(g8), jax.tree.leaves(g2)):
        np.testing.assert_allclose(a, b, atol=fp32_atol(b, n), rtol=0)


def test_chunk_layout_covers_any_length():
    for c, chunk in [(300, 256), (8, 8), (8, 3), (7, 2), (1, 4), (512, 256), (257, 256)]:
        k, size = learner_lib.chunk_layout(c, chunk)
        assert size <= chunk and k * size >= c > (k - 1) * size and k * size - c < k
    assert learner_lib.chunk_layout(300, 256) == (2, 150)
    with pytest.raises(ValueError, match="logits_chunk must be >= 1"):
        learner_lib.chunk_layout(8, 0)


@pytest.mark.parametrize("c,chunk", [(7, 2), (7, 3), (5, 4), (9, 2)])
def test_padded_chunks_equal_one_chunk(c, chunk):
    """C not a multiple of the block: values and gradients equal one unchunked block."""
    k, size = learner_lib.chunk_layout(c, chunk)
    assert k > 1 and k * size > c  # the padded path
    params = models.init(CONFIG, jax.random.key(4))
    batch = {key: jnp.asarray(v) for key, v in make_batch(c=c, seed=c).items()}

    def stats(p, chunk):
        return _token_logprobs(CONFIG, p, batch["prompts"], batch["prompt_lens"],
                               batch["completion"], temperature=0.8, logits_chunk=chunk)

    def total(p, chunk):
        logp, ent = stats(p, chunk)
        return jnp.sum(jnp.where(batch["mask"], logp + 0.1 * ent, 0.0))

    logp, ent = stats(params, chunk)
    one_logp, one_ent = stats(params, c)
    assert logp.shape == ent.shape == (8, c)
    # summation order only; longest sums: mlp_dim, vocab_size (+ the tokens a grad sums over)
    n = max(CONFIG.mlp_dim, CONFIG.vocab_size)
    np.testing.assert_allclose(logp, one_logp, atol=fp32_atol(one_logp, n), rtol=0)
    np.testing.assert_allclose(ent, one_ent, atol=fp32_atol(one_ent, n), rtol=0)
    n = max(n, batch["prompts"].size + batch["completion"].size)
    grad = jax.jit(jax.grad(total), static_argnums=1)
    grads, one = grad(params, chunk), grad(params, c)
    for a, b in zip(jax.tree.leaves(grads), jax.tree.leaves(one)):
        assert np.all(np.isfinite(a))
        np.testing.assert_allclose(a, b, atol=fp32_atol(b, n), rtol=0)


def test_train_step_equals_hand_written_update():
    alg = make_algorithm(**{"loss.eps_high": 0.28})
    opt = learner_lib.make_optimizer(1e-3, total_steps=10, grad_clip=1.0, weight_decay=0.1)
    learner = learner_lib.Learner(CONFIG, alg, opt, temperature=0.9)
    params = models.init(CONFIG, jax.random.key(2))
    batch = make_batch()
    state = learner.init_state(jax.tree.map(jnp.copy, params), jax.random.key(3))
    state, metrics = learner.train_step(state, learner.place(batch))

    def loss_fn(p):
        logp, _ = reference_logprobs(p, batch, 0.9)
        return losses.compute("ppo", logp, batch["old_logp"], batch["advantages"],
                              batch["mask"], eps_high=0.28, ref_logp=batch["ref_logp"],
                              kl_coef=0.04, kl_kind="k3")[0]

    loss, grads = jax.jit(jax.value_and_grad(loss_fn))(params)
    expected_opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(
        1e-3, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim >= 2, p)))
    updates, _ = expected_opt.update(grads, expected_opt.init(params), params)
    expected = optax.apply_updates(params, updates)
    # shared-prefix vs per-row forward: other orders; longest: mlp, vocab or the batch's tokens
    n = max(CONFIG.mlp_dim, CONFIG.vocab_size, batch["prompts"].size + batch["completion"].size)
    np.testing.assert_allclose(metrics["loss"], loss, atol=fp32_atol(loss, n), rtol=0)
    np.testing.assert_allclose(metrics["grad_norm"], optax.tree.norm(grads), rtol=1e-5)
    assert int(state.step) == 1
    for a, b in zip(jax.tree.leaves(state.params), jax.tree.leaves(expected)):
        # Adam normalises each grad element, so a rounding-level grad difference
        # (shared-prefix vs per-row forward) can move a param by ~1e-3 of lr
        np.testing.assert_allclose(a, b, atol=3e-6)


@pytest.mark.parametrize("proximal", ["given", "interpolate"])
def test_off_policy_batch_equals_hand_written_loss(proximal):
    # behaviour log-probs and token versions reach the loss with the learner's version
    # (TrainState.step before the update: 3 here, so tokens 0..3 versions old get
    # α = 3/4 .. 0); with "interpolate" batch["old_logp"] is not read
    alg = make_algorithm(**{"off_policy.correction": "tis", "off_policy.level": "geometric"})
    learner = learner_lib.Learner(CONFIG, alg, learner_lib.make_optimizer(
        1e-3, total_steps=10), temperature=0.9, proximal=proximal)
    params = models.init(CONFIG, jax.random.key(7))
    batch = make_batch(seed=8)
    rng = np.random.RandomState(9)
    batch["behavior_logp"] = (batch["old_logp"] + rng.randn(*batch["mask"].shape) * 0.3
                              ).astype(np.float32)
    batch["versions"] = np.where(batch["mask"], rng.randint(0, 4, batch["mask"].shape),
                                 -1).astype(np.int32)
    state = learner.init_state(jax.tree.map(jnp.copy, params), jax.random.key(3))
    state = dataclasses.replace(state, step=state.step + 3)
    _, metrics = learner.train_step(state, learner.place(batch))

    def loss_fn(p):
        logp, _ = reference_logprobs(p, batch, 0.9)
        old = (batch["old_logp"] if proximal == "given" else off_policy.interpolate_proximal(
            batch["behavior_logp"], logp, batch["versions"], jnp.int32(3)))
        return losses.compute("ppo", logp, old, batch["advantages"], batch["mask"],
                              behavior_logp=batch["behavior_logp"], off_policy=alg.off_policy,
                              ref_logp=batch["ref_logp"], kl_coef=0.04, kl_kind="k3")

    want_loss, want = jax.jit(loss_fn)(params)
    # shared-prefix vs per-row forward: other orders; longest: mlp, vocab or the batch's tokens
    n = max(CONFIG.mlp_dim, CONFIG.vocab_size, batch["prompts"].size + batch["completion"].size)
    for key in ("loss", "is_weight_mean", "kl_behavior_current", "ratio_mean"):
        np.testing.assert_allclose(metrics[key], want[key], atol=fp32_atol(want[key], n),
                                   rtol=0, err_msg=key)
    assert float(metrics["corrected_frac"]) == float(want["corrected_frac"])


def test_interpolate_needs_behaviour_and_versions():
    with pytest.raises(ValueError, match="proximal must be 'given' or 'interpolate'"):
        learner_lib.Learner(CONFIG, make_algorithm(), optax.sgd(0.1), proximal="recompute")
    learner = learner_lib.Learner(CONFIG, make_algorithm(), optax.sgd(0.1),
                                  proximal="interpolate")
    state = learner.init_state(models.init(CONFIG, jax.random.key(0)), jax.random.key(1))
    batch = make_batch()
    batch["behavior_logp"] = batch["old_logp"]
    with pytest.raises(ValueError, match="needs batch keys \\['versions'\\]"):
        learner.train_step(state, learner.place(batch))
    batch["versions"] = np.zeros((3, 3), np.int32)
    with pytest.raises(ValueError, match="batch\\['versions'\\] has shape"):
        learner.place(batch)


def test_state_is_donated_and_epochs_times_minibatches_steps():
    alg = make_algorithm()
    opt = learner_lib.make_optimizer(1e-3, total_steps=100)
    learner = learner_lib.Learner(CONFIG, alg, opt, epochs=3, minibatches=2)
    state = learner.init_state(models.init(CONFIG, jax.random.key(0)), jax.random.key(1))
    old = state.params["embed"]
    state, metrics = learner.train_step(state, learner.place(make_batch()))
    assert old.is_deleted()
    counts = [x for x in jax.tree.leaves(state.opt_state) if x.dtype == jnp.int32]
    assert counts and all(int(x) == 6 for x in counts)
    # later epochs see moved params: ratios leave 1
    assert float(metrics["ratio_max"]) > 1.0 or float(metrics["ratio_min"]) < 1.0


def test_policy_moves_toward_positive_advantage():
    alg = make_algorithm(**{"kl.coef": 0.0})
    learner = learner_lib.Learner(CONFIG, alg, learner_lib.make_optimizer(3e-3, total_steps=20))
    params = models.init(CONFIG, jax.random.key(4))
    batch = make_batch(n=4)
    batch["advantages"] = np.where(batch["mask"], np.array([1, -1, 1, -1])[:, None],
                                   0).astype(np.float32)
    before, _ = learner.score(params, learner.place(batch))
    state = learner.init_state(jax.tree.map(jnp.copy, params), jax.random.key(0))
    for _ in range(5):
        batch["old_logp"] = np.asarray(learner.score(state.params, learner.place(batch))[0])
        state, _ = learner.train_step(state, learner.place(batch))
    after, _ = learner.score(state.params, learner.place(batch))
    delta = np.asarray(jnp.sum(jnp.where(batch["mask"], after - before, 0), 1))
    assert delta[0] > 0 and delta[2] > 0 and delta[1] < 0 and delta[3] < 0


_ONE_DEVICE: list = []


def _train_on_mesh(shape):
    """(params, metrics) after one train step (2 epochs × 2 minibatches) on `shape`."""
    alg = make_algorithm(**{"loss.eps_high": 0.28})
    params = models.init(CONFIG, jax.random.key(5))
    mesh = sharding.make_mesh(shape, devices=jax.devices()[:int(np.prod(shape))])
    act = sharding.ActivationSharding(mesh, sharding.make_rules())
    opt = learner_lib.make_optimizer(1e-3, total_steps=10, grad_clip=1.0)
    learner = learner_lib.Learner(CONFIG, alg, opt, act, minibatches=2, epochs=2)
    placed = sharding.shard_params(params, CONFIG, mesh)
    state = learner.init_state(placed, jax.random.key(6))
    state, metrics = learner.train_step(state, learner.place(make_batch(n=16, seed=3)))
    return jax.device_get(state.params), jax.device_get(metrics)


# data parallel, FSDP, tensor parallel and all three
@pytest.mark.parametrize("shape", [(8, 1, 1), (1, 8, 1), (1, 1, 2), (2, 2, 2)],
                         ids=lambda s: "x".join(map(str, s)))
def test_sharded_train_step_matches_one_device(shape):
    if not _ONE_DEVICE:
        _ONE_DEVICE.append(_train_on_mesh((1, 1, 1)))
    (p1, m1), (p8, m8) = _ONE_DEVICE[0], _train_on_mesh(shape)
    batch = make_batch(n=16, seed=3)
    # sharded sums run in another order; longest: mlp, vocab or the batch's tokens
    n = max(CONFIG.mlp_dim, CONFIG.vocab_size, batch["prompts"].size + batch["completion"].size)
    np.testing.assert_allclose(m8["loss"], m1["loss"], atol=fp32_atol(m1["loss"], n), rtol=0)
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p8)):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_schedules_and_bad_options():
    opt = learner_lib.make_optimizer(1.0, total_steps=10, warmup_steps=2, schedule="cosine")
    params = {"w": jnp.ones((2, 2))}
    state = opt.init(params)
    lrs = []
    for _ in range(10):
        updates, state = opt.update({"w": jnp.ones((2, 2))}, state, params)
        lrs.append(-float(updates["w"][0, 0]))   # adam's first step size is ~lr
    assert lrs[0] == pytest.approx(0.0, abs=1e-6) and lrs[2] == pytest.approx(1.0, rel=1e-3)
    assert lrs[-1] < 0.1
    with pytest.raises(ValueError, match="schedule"):
        learner_lib.make_optimizer(1.0, total_steps=10, schedule="step")
    learner = learner_lib.Learner(CONFIG, make_algorithm(), opt)
    bad = make_batch()
    del bad["ref_logp"]
    with pytest.raises(ValueError, match="missing \\['ref_logp'\\]"):
        learner.place(bad)
    bad = make_batch()
    bad["old_logp"] = bad["old_logp"][:, :3]
    with pytest.raises(ValueError, match="old_logp"):
        learner.place(bad)


@pytest.fixture
def no_persistent_cache():
    """Off the persistent compilation cache (tests/conftest.py) for one test: a program
    loaded from it is not compiled, so a recompile that hit it would not be counted."""
    before = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    yield
    jax.config.update("jax_enable_compilation_cache", before)


def test_second_train_step_reuses_the_first_compile(no_persistent_cache):
    mesh = sharding.make_mesh((1, 1, 1), devices=jax.devices()[:1])
    act = sharding.ActivationSharding(mesh, sharding.make_rules())
    learner = learner_lib.Learner(CONFIG, make_algorithm(),
                                  learner_lib.make_optimizer(1e-3, total_steps=10), act)
    params = sharding.shard_params(models.init(CONFIG, jax.random.key(0)), CONFIG, mesh)
    state = learner.init_state(params, jax.random.key(1))
    compiles = []
    jax.monitoring.register_event_duration_secs_listener(
        lambda event, _, **kw: compiles.append(kw.get("fun_name"))
        if event == "/jax/core/compile/backend_compile_duration" else None)
    for _ in range(3):
        state, _ = learner.train_step(state, learner.place(make_batch()))
    assert compiles.count("jit(_train_step)") == 1


def test_optimizer_state_starts_in_the_params_shards():
    """mu/nu are written into the params' shards at init, not whole on every device (the
    first step would need 2 × params more per device, and step 2 would recompile)."""
    mesh = sharding.make_mesh((2, 2, 2))
    act = sharding.ActivationSharding(mesh, sharding.make_rules())
    params = sharding.init_sharded(CONFIG, jax.random.key(0), mesh)
    opt = learner_lib.make_optimizer(1e-3, total_steps=10, grad_clip=1.0)
    state = learner_lib.Learner(CONFIG, make_algorithm(), opt, act).init_state(
        params, jax.random.key(1))
    adam = state.opt_state[1][0]
    for moments in (adam.mu, adam.nu):
        for m, p in zip(jax.tree.leaves(moments), jax.tree.leaves(params), strict=True):
            assert m.sharding == p.sharding
    assert adam.count.sharding.is_fully_replicated
