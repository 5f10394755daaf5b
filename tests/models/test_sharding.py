"""Sharded forward on 8 host devices equals the single-device forward."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import models
from models import sharding
from tests.tolerances import fp32_atol

MESHES = [(8, 1, 1), (1, 8, 1), (2, 2, 2), (1, 2, 4)]


@pytest.fixture(scope="module")
def setup():
    assert jax.device_count() == 8, "conftest must set 8 host devices"
    config = models.get_preset("tiny").replace(num_layers=2)
    params = models.init(config, jax.random.key(0))
    tokens = jax.random.randint(jax.random.key(1), (8, 32), 0, config.vocab_size)
    single = jax.jit(models.apply, static_argnums=0)(config, params, tokens)
    return config, params, tokens, np.asarray(single)


@pytest.mark.parametrize("shape", MESHES, ids=lambda s: "x".join(map(str, s)))
def test_sharded_forward_matches_single_device(setup, shape):
    config, params, tokens, single = setup
    mesh = sharding.make_mesh(shape)
    rules = sharding.make_rules()
    placed = sharding.shard_params(params, config, mesh, rules)
    act = sharding.ActivationSharding(mesh, rules)
    batch = jax.device_put(tokens, act.batch_sharding(tokens.shape))
    fwd = jax.jit(functools.partial(models.apply, config, sharding=act))
    out = fwd(placed, batch)
    # sharded dots sum per shard, then across shards: another order; longest sum: mlp_dim
    np.testing.assert_allclose(np.asarray(out), single, atol=fp32_atol(single, config.mlp_dim),
                               rtol=0)
    # The layout is the declared one, not silently replicated.
    data, fsdp, tensor = shape
    q_spec = placed["layers"]["q"].sharding.spec
    assert q_spec == P(None, "fsdp" if fsdp > 1 else None, "tensor" if tensor > 1 else None,
                       None)
    batch_axes = tuple(a for a, n in (("data", data), ("fsdp", fsdp)) if n > 1)
    got = out.sharding.spec[0]
    assert (got if isinstance(got, tuple) else (got,)) == batch_axes
    if tensor > 1:
        assert out.sharding.spec[2] == "tensor"


def test_spec_rules():
    mesh = sharding.make_mesh((1, 2, 4))
    rules = sharding.make_rules()
    # kv_heads=2 is not divisible by tensor=4 -> replicated (and logged).
    assert sharding.logical_to_spec(("layers", "embed", "kv_heads", "head_dim"),
                                    (2, 256, 2, 64), mesh, rules) == P(None, "fsdp", None, None)
    # A mesh axis is used once: batch takes fsdp, so embed stays whole.
    assert sharding.logical_to_spec(("batch", "length", "embed"), (8, 16, 256), mesh,
                                    rules) == P("fsdp", None, None)
    mesh222 = sharding.make_mesh((2, 2, 2))
    assert sharding.logical_to_spec(("batch", "length"), (8, 4), mesh222, rules) == P(
        ("data", "fsdp"), None)
    # Partial divisibility drops axes from the right.
    assert sharding.logical_to_spec(("batch",), (2,), mesh222, rules) == P("data")
    custom = sharding.make_rules({"embed": "", "batch": "data", "mlp": "fsdp,tensor"})
    assert sharding.logical_to_spec(("embed", "mlp"), (256, 1024), mesh222, custom) == P(
        None, ("fsdp", "tensor"))


def test_rule_and_mesh_errors():
    with pytest.raises(KeyError, match="unknown logical axis 'embedding'"):
        sharding.make_rules({"embedding": "fsdp"})
    with pytest.raises(ValueError, match=r"unknown mesh axes \['model'\]"):
        sharding.make_rules({"embed": "model"})
    with pytest.raises(ValueError, match="needs 16 devices, 8 available"):
        sharding.make_mesh((2, 2, 4))
    with pytest.raises(ValueError, match="at most one -1"):
        sharding.make_mesh((-1, -1, 1))
    with pytest.raises(KeyError, match=r"unknown mesh axes \['pipeline'\]"):
        sharding.make_mesh({"data": 2, "pipeline": 4})
    assert dict(sharding.make_mesh({"data": -1, "tensor": 2}).shape) == {
        "data": 4, "fsdp": 1, "tensor": 2}


def test_init_sharded_equals_init():
    config = models.get_preset("tiny").replace(num_layers=2, family="qwen3",
                                               tie_embeddings=False)
    mesh = sharding.make_mesh((2, 2, 2))
    placed = sharding.init_sharded(config, jax.random.key(3), mesh)
    plain = models.init(config, jax.random.key(3))
    jax.tree.map(np.testing.assert_array_equal, placed, plain)
    assert placed["lm_head"].sharding.spec == P("fsdp", "tensor")


def test_load_pretrained_places_shards(tmp_path):
    config = models.get_preset("tiny").replace(num_layers=2)
    params = models.init(config, jax.random.key(0))
    models.save_pretrained(tmp_path, config, params)
    mesh = sharding.make_mesh((1, 4, 2))
    _, loaded = models.load_pretrained(tmp_path, jnp.float32, mesh=mesh)
    assert loaded["layers"]["gate"].sharding.spec == P(None, "fsdp", "tensor")
    assert len(loaded["embed"].sharding.device_set) == 8
    jax.tree.map(np.testing.assert_array_equal, loaded, params)


@pytest.mark.parametrize("shape", MESHES, ids=lambda s: "x".join(map(str, s)))
def test_no_involuntary_rematerialization(shape, capfd):
    """The declared layouts compile without GSPMD's replicate-then-repartition fallback."""
    config = models.get_preset("tiny").replace(num_layers=1, vocab_size=256 + len(shape))
    mesh = sharding.make_mesh(shape)
    act = sharding.ActivationSharding(mesh, sharding.make_rules())
    params = models.param_shapes(config)
    shardings = sharding.param_shardings(config, mesh)
    tokens = jax.ShapeDtypeStruct((8, 16), jnp.int32, sharding=act.batch_sharding((8, 16)))
    params = jax.tree.map(lambda p, s: jax.ShapeDtypeStruct(p.shape, p.dtype, sharding=s),
                          params, shardings)
    capfd.readouterr()
    jax.jit(functools.partial(models.apply, config, sharding=act)).lower(params, tokens).compile()
    err = capfd.readouterr().err
    assert "Involuntary full rematerialization" not in err, err[-2000:]
