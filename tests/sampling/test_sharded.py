"""The samplers on the learner's mesh equal the one-device run; page attention
equals the dense-view decode it replaced."""

import jax
import numpy as np
import pytest

import models
from models import sharding
from sampling import SamplingParams, TreeConfig, engine, generate, kv_cache, tree_generate
from tests.tolerances import fp32_atol

SP = SamplingParams(temperature=1.0, max_new_tokens=16)
TREE = TreeConfig(segment_len=8, max_depth=2, leaves_per_prompt=4, first_branching=2,
                  page_size=4, repetition_ngram=0)


@pytest.fixture(scope="module")
def tiny():
    config = models.get_preset("tiny").replace(num_layers=2)
    return config, models.init(config, jax.random.key(0))


def _prompts(seed, lengths, vocab):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, n).tolist() for n in lengths]


def _same(a, b, config):
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.lengths, b.lengths)
    # another summation order (sharded contractions, another attention split);
    # a log-prob passes through the logits' d_model-long and the MLP's sums
    atol = fp32_atol(np.abs(b.raw_logprobs).max() + 1.0, config.mlp_dim)
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=atol, rtol=0)
    np.testing.assert_allclose(a.raw_logprobs, b.raw_logprobs, atol=atol, rtol=0)


# FSDP, tensor parallel (tiny's 4 heads and 2 kv heads split 2 ways; with tensor=4 the
# kv heads stay whole) and their combinations; data parallel alone (8×1×1) with flat
# sampling in test_kv_cache_per_device_shrinks_with_the_batch_shards
MESHES = [(1, 8, 1), (1, 1, 2), (2, 2, 2), (1, 2, 4)]


@pytest.mark.parametrize("shape", MESHES, ids=lambda s: "x".join(map(str, s)))
def test_sharded_samplers_equal_one_device(tiny, shape):
    assert jax.device_count() == 8, "conftest must set 8 host devices"
    config, params = tiny
    mesh = sharding.make_mesh(shape, devices=jax.devices()[:int(np.prod(shape))])
    act = sharding.ActivationSharding(mesh, sharding.make_rules())
    placed = sharding.shard_params(params, config, mesh, act.rules)
    prompts = _prompts(0, [5, 9, 3, 12], config.vocab_size)
    one = generate(config, params, prompts, 4, SP, jax.random.key(1), page_size=4,
                   segment_len=8)
    many = generate(config, placed, prompts, 4, SP, jax.random.key(1), page_size=4,
                    segment_len=8, sharding=act)
    _same(many, one, config)
    if shape == (2, 2, 2):  # 4 batch shards: one sample per prompt, no group of two
        # rows: the dense-view decode, whose prefix mask reads each row's prompt offset
        # (4 prompt lengths: 4 offsets) in its own shard's block of groups
        one = generate(config, params, prompts, 1, SP, jax.random.key(3), page_size=4,
                       segment_len=8)
        many = generate(config, placed, prompts, 1, SP, jax.random.key(3), page_size=4,
                        segment_len=8, sharding=act)
        _same(many, one, config)
    one = tree_generate(config, params, prompts[:2], TREE, SP, jax.random.key(2))
    many = tree_generate(config, placed, prompts[:2], TREE, SP, jax.random.key(2),
                         sharding=act)
    _same(many, one, config)
    np.testing.assert_array_equal(many.paths, one.paths)


def _axes(spec) -> tuple:
    """A PartitionSpec as a tuple without its trailing unsplit dims (P('x') == P('x', None))."""
    axes = list(spec)
    while axes and axes[-1] is None:
        axes.pop()
    return tuple(axes)


def _decode_programs(monkeypatch):
    """Records (output shapes, compiled program) of every `engine.decode` call: the same
    program compiled again from the same arguments, whose shardings can be read."""
    programs, run = [], engine._decode_program
    inspect = jax.jit(engine._decode, static_argnums=(0, 7, 8, 9, 10, 11))

    def recording(*args):
        lowered = inspect.lower(*args)
        programs.append((lowered.out_info, lowered.compile()))
        return run(*args)

    monkeypatch.setattr(engine, "_decode_program", recording)
    return programs


@pytest.mark.parametrize("shape", [(2, 2, 2), (1, 2, 4)], ids=lambda s: "x".join(map(str, s)))
def test_sharded_decode_runs_where_the_mesh_says(tiny, monkeypatch, shape):
    """Values alone passed while decode ignored its sharding; the compiled programs show
    the placement: rows (tokens, hidden states) and the page pool's pages over the batch
    axes, its kv heads over `tensor`, the weights as the learner placed them (data, fsdp
    and tensor as `param_shardings` says)."""
    config, params = tiny
    mesh = sharding.make_mesh(shape)
    act = sharding.ActivationSharding(mesh, sharding.make_rules())
    placed = sharding.shard_params(params, config, mesh, act.rules)
    programs = _decode_programs(monkeypatch)
    prompts = _prompts(0, [5, 9, 3, 12], config.vocab_size)
    generate(config, placed, prompts, 4, SP, jax.random.key(1), page_size=4, segment_len=8,
             sharding=act)
    tree_generate(config, placed, prompts[:2], TREE, SP, jax.random.key(2), sharding=act)
    assert len(programs) >= 3  # flat segments and tree rounds
    want_params = jax.tree.map(lambda s: _axes(s.spec),
                               sharding.param_shardings(config, mesh, act.rules))
    for (out_shape, hidden_shape, cache_shape), compiled in programs:
        out, hidden, cache = compiled.output_shardings
        params_in, cache_in = compiled.input_shardings[0][:2]
        rows = _axes(act.spec(("batch",), out_shape.tokens.shape[:1]))
        assert rows  # the rows are split at all
        assert _axes(out.tokens.spec)[:1] == _axes(hidden.spec)[:1] == rows, (out, hidden)
        kv = _axes(act.spec(("layers", "batch", "kv_heads", None, None), cache_shape.k.shape))
        assert kv[1:2] == rows  # pages with their rows (sampling/shards.py)
        assert _axes(cache.k.spec) == _axes(cache.v.spec) == _axes(cache_in.k.spec) == kv
        assert jax.tree.map(lambda s: _axes(s.spec), params_in) == want_params


def _prefill_programs(monkeypatch):
    """Records the compiled program of every `engine.prefill` call (compiled again from
    the same arguments: its output shardings and XLA's memory analysis)."""
    programs, run = [], engine.prefill

    def recording(*args, **kwargs):
        programs.append(run.lower(*args, **kwargs).compile())
        return run(*args, **kwargs)

    monkeypatch.setattr(engine, "prefill", recording)
    return programs


@pytest.mark.parametrize("shape", [(2, 2, 2), (8, 1, 1)], ids=lambda s: "x".join(map(str, s)))
def test_kv_cache_per_device_shrinks_with_the_batch_shards(tiny, monkeypatch, shape):
    """8 prompts × 4 samples: each of the D = data × fsdp shards holds its prompts' pages
    and their rows' pages, at most 1/D of the one-device pool plus one page per row of
    the shard (the bucket rounding), and `tensor` splits kv heads on top; shown by the
    cache's shard shape and by the prefill program's memory analysis (its outputs: the
    cache and the hidden states). Tokens and log-probs equal the one-device run's."""
    config, params = tiny
    mesh = sharding.make_mesh(shape)
    act = sharding.ActivationSharding(mesh, sharding.make_rules())
    placed = sharding.shard_params(params, config, mesh, act.rules)
    prompts = _prompts(7, [5, 9, 3, 12, 7, 4, 10, 6], config.vocab_size)
    one = generate(config, params, prompts, 4, SP, jax.random.key(1), page_size=4,
                   segment_len=8)
    programs = _prefill_programs(monkeypatch)
    many = generate(config, placed, prompts, 4, SP, jax.random.key(1), page_size=4,
                    segment_len=8, sharding=act)
    _same(many, one, config)

    d, t = shape[0] * shape[1], shape[2]
    rows_per_shard = 8 * 4 // d
    (compiled,) = programs
    hidden, cache = compiled.output_shardings
    pages = one.stats["kv_pages"]
    assert many.stats["kv_pages"] <= pages + d  # D pools, each with its null page
    page_bytes = kv_cache.cache_bytes(config, 1, 4)  # k and v of one page, every layer
    k_shape = (config.num_layers, many.stats["kv_pages"], config.num_kv_heads,
               config.head_dim, 4)
    local = cache.k.shard_shape(k_shape)
    assert local[1] * d == k_shape[1] and local[2] * t == k_shape[2], local
    device_bytes = 2 * int(np.prod(local)) * np.dtype(config.compute_dtype).itemsize
    bound = (pages / d + rows_per_shard) * page_bytes / t
    assert device_bytes <= bound, (device_bytes, bound)
    # XLA's own figure for the program's outputs: this cache shard, the hidden states
    # ([rows, hidden] fp32, at most whole on each device) and the outputs' tuple of
    # buffer pointers (8 bytes each; a few hundred bytes bound it)
    hidden_bytes = 8 * 4 * config.hidden_size * np.dtype(config.compute_dtype).itemsize
    out_bytes = compiled.memory_analysis().output_size_in_bytes
    assert device_bytes <= out_bytes <= device_bytes + hidden_bytes + 256, out_bytes


def test_page_attention_equals_the_dense_view_decode():
    # one family: the families differ before attention (biases, q/k norms, RoPE
    # scaling), and page attention and the dense view take the same q, k, v
    config = models.get_preset("tiny").replace(num_layers=2, family="qwen3")
    params = models.init(config, jax.random.key(3))
    prompts = _prompts(4, [7, 20, 7], config.vocab_size)  # two equal prompts share a group
    kwargs = dict(page_size=4, segment_len=8)
    shared = generate(config, params, prompts, 3, SP, jax.random.key(5), **kwargs)
    dense = generate(config, params, prompts, 3, SP, jax.random.key(5), attention="dense_view",
                     **kwargs)
    _same(shared, dense, config)
    tree_shared = tree_generate(config, params, prompts[:2], TREE, SP, jax.random.key(6))
    tree_dense = tree_generate(config, params, prompts[:2], TREE, SP, jax.random.key(6),
                               attention="dense_view")
    _same(tree_shared, tree_dense, config)


def test_unknown_attention_is_named(tiny):
    config, params = tiny
    with pytest.raises(ValueError, match="attention must be one of"):
        generate(config, params, [[1, 2]], 1, SP, jax.random.key(0), attention="dense")
