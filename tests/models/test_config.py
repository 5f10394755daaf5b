"""Presets, validation and Hugging Face config translation."""

import jax
import pytest

import models
from models import hf_config
from models import params as params_lib
from models.safetensors_io import CheckpointError

# Published parameter counts (model cards), embeddings included.
PUBLISHED = {"qwen2.5-0.5b": 0.49e9, "qwen2.5-1.5b": 1.54e9, "qwen2.5-7b": 7.61e9,
             "qwen3-0.6b": 0.6e9, "qwen3-8b": 8.2e9, "llama3.2-1b": 1.24e9,
             "llama3.1-8b": 8.03e9}


@pytest.mark.parametrize("name", sorted(models.PRESETS))
def test_preset_sizes(name):
    config = models.get_preset(name)
    shapes = params_lib.param_shapes(config)  # abstract: nothing is allocated
    assert params_lib.count(shapes) == config.num_params()
    if name in PUBLISHED:
        assert abs(config.num_params() / PUBLISHED[name] - 1) < 0.02, config.num_params()


def test_tiny_and_small_sizes():
    assert round(models.get_preset("tiny").num_params() / 1e6, 2) == 4.07  # workload W1
    assert 28e6 < models.get_preset("small").num_params() < 34e6


def test_logical_axes_cover_every_param():
    config = models.get_preset("qwen3-0.6b")
    axes = models.param_axes(config)
    shapes = models.param_shapes(config)
    jax.tree.map(lambda a, s: len(a) == len(s.shape) or pytest.fail(f"{a} vs {s}"), axes,
                 shapes, is_leaf=lambda x: isinstance(x, tuple))
    assert axes["layers"]["q_norm"] == ("layers", "head_dim")


@pytest.mark.parametrize("bad,pattern", [
    (dict(num_kv_heads=3), "multiple of num_kv_heads"),
    (dict(dtype="float64"), "dtype 'float64'"),
    (dict(family="gpt2"), "family 'gpt2'"),
    (dict(hidden_size=0), "hidden_size must be a positive int"),
    (dict(head_dim=63), "head_dim must be even"),
    (dict(remat="some"), "remat 'some'"),
])
def test_invalid_configs(bad, pattern):
    with pytest.raises(ValueError, match=pattern):
        models.get_preset("tiny", **bad)


def test_unknown_preset_and_field():
    with pytest.raises(KeyError, match="unknown model preset 'huge'"):
        models.get_preset("huge")
    with pytest.raises(KeyError, match=r"unknown ModelConfig field\(s\) \['layers'\]"):
        models.get_preset("tiny", layers=3)
    with pytest.raises(ValueError, match="rope_type 'yarn'"):
        models.RopeScaling("yarn")


@pytest.mark.parametrize("name", sorted(models.PRESETS))
def test_hf_config_round_trip(name):
    config = models.get_preset(name)
    assert hf_config.config_from_hf(hf_config.config_to_hf(config)) == config


def test_hf_config_legacy_and_v5_rope_forms():
    base = dict(model_type="llama", vocab_size=10, hidden_size=16, intermediate_size=32,
                num_hidden_layers=1, num_attention_heads=2)
    legacy = hf_config.config_from_hf(dict(base, rope_theta=5e5, rope_scaling=dict(
        type="llama3", factor=32.0, low_freq_factor=1.0, high_freq_factor=4.0,
        original_max_position_embeddings=8192)))
    v5 = hf_config.config_from_hf(dict(base, rope_parameters=dict(
        rope_type="llama3", rope_theta=5e5, factor=32.0, low_freq_factor=1.0,
        high_freq_factor=4.0, original_max_position_embeddings=8192)))
    assert legacy == v5
    assert v5.rope_theta == 5e5 and v5.rope_scaling.factor == 32.0
    assert v5.num_kv_heads == 2 and v5.head_dim == 8  # defaults derived like transformers
    linear = hf_config.config_from_hf(dict(base, rope_scaling=dict(type="linear", factor=2.0)))
    assert linear.rope_scaling.rope_type == "linear" and linear.rope_theta == 10000.0
    with pytest.raises(CheckpointError, match="needs key 'low_freq_factor'"):
        hf_config.config_from_hf(dict(base, rope_parameters=dict(rope_type="llama3", factor=2.)))
    with pytest.raises(CheckpointError, match=r"missing required key\(s\) \['vocab_size'\]"):
        hf_config.config_from_hf({k: v for k, v in base.items() if k != "vocab_size"})


def test_from_config_section(tmp_path):
    from configs import base

    cfg = base.get_config("small")
    cfg.model.num_layers = 2
    cfg.model.dtype = "bfloat16"
    model = models.from_config_section(cfg.model)
    assert (model.num_layers, model.hidden_size, model.dtype) == (2, 512, "bfloat16")
    tiny = models.get_preset("tiny").replace(num_layers=1, family="llama")
    models.save_pretrained(tmp_path, tiny, models.init(tiny, jax.random.key(0)))
    cfg = base.get_config()
    cfg.model.hf_path = str(tmp_path)
    assert models.from_config_section(cfg.model) == tiny
    with pytest.raises(KeyError, match=r"unknown key\(s\).*\['bogus'\]"):
        models.from_config_section(dict(cfg.model.items(), bogus=1))
