"""Logit parity with transformers on random weights, and HF round trips."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from tests.models.hf_helpers import LLAMA3_ROPE, hf_logits, random_hf_model

FAMILIES = ["qwen2", "qwen3", "llama"]
_fwd = jax.jit(models.apply, static_argnums=0)


def _tokens(vocab: int, shape=(2, 48), seed=0) -> np.ndarray:
    return np.random.RandomState(seed).randint(0, vocab, shape)


@pytest.mark.parametrize("family", FAMILIES)
def test_logits_match_transformers(family, tmp_path):
    hf = random_hf_model(family)
    hf.save_pretrained(tmp_path)
    config, params = models.load_pretrained(tmp_path)
    assert config.family == family
    assert config.tie_embeddings == (family == "qwen2")
    tokens = _tokens(config.vocab_size)
    ref = hf_logits(hf, tokens)
    ours = np.asarray(_fwd(config, params, jnp.asarray(tokens)))
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    assert np.abs(ref).max() > 1.0  # the weights are not degenerate
    np.testing.assert_allclose(ours, ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_long_sequence_parity_exercises_blocked_attention(family, tmp_path):
    """T=300 > ATTENTION_BLOCK: the blocked causal path matches transformers too."""
    hf = random_hf_model(family, seed=2)
    hf.save_pretrained(tmp_path)
    config, params = models.load_pretrained(tmp_path)
    tokens = _tokens(config.vocab_size, shape=(1, 300), seed=5)
    ours = np.asarray(_fwd(config, params, jnp.asarray(tokens)))
    np.testing.assert_allclose(ours, hf_logits(hf, tokens), atol=1e-4, rtol=0)


def test_llama3_rope_scaling_is_exercised(tmp_path):
    """Dropping the llama3 scaling must change logits (else parity proves nothing)."""
    hf = random_hf_model("llama")
    hf.save_pretrained(tmp_path)
    config, params = models.load_pretrained(tmp_path)
    assert config.rope_scaling.rope_type == "llama3"
    assert config.rope_scaling.original_max_position_embeddings == 32
    tokens = jnp.asarray(_tokens(config.vocab_size))
    scaled = np.asarray(_fwd(config, params, tokens))
    plain = np.asarray(_fwd(config.replace(rope_scaling=None), params, tokens))
    assert np.abs(scaled - plain).max() > 1e-2


@pytest.mark.parametrize("family", FAMILIES)
def test_save_pretrained_round_trip_through_transformers(family, tmp_path):
    import transformers

    base = random_hf_model(family, seed=1)
    base.save_pretrained(tmp_path / "src")
    config, params = models.load_pretrained(tmp_path / "src")
    models.save_pretrained(tmp_path / "out", config, params)
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "out", attn_implementation="eager").float().eval()
    assert type(reloaded).__name__ == type(base).__name__
    tokens = _tokens(config.vocab_size, seed=3)
    ours = np.asarray(_fwd(config, params, jnp.asarray(tokens)))
    np.testing.assert_allclose(hf_logits(reloaded, tokens), ours, atol=1e-4, rtol=0)
    # And back into this project: bit-identical parameters and config.
    config2, params2 = models.load_pretrained(tmp_path / "out")
    assert config2 == config
    jax.tree.map(np.testing.assert_array_equal, params2, params)


@pytest.mark.parametrize("family", FAMILIES)
def test_init_export_matches_transformers(family, tmp_path):
    """A model born here (init, not loaded) exports to identical transformers logits."""
    import transformers

    config = models.get_preset("tiny").replace(
        family=family, num_layers=2, vocab_size=128, tie_embeddings=family != "llama",
        rope_scaling=models.RopeScaling("llama3", 8.0, 1.0, 4.0, 16) if family == "llama"
        else None)
    params = models.init(config, jax.random.key(0))
    models.save_pretrained(tmp_path, config, params)
    hf = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path, attn_implementation="eager").float().eval()
    tokens = _tokens(config.vocab_size, shape=(2, 40))
    ours = np.asarray(_fwd(config, params, jnp.asarray(tokens)))
    np.testing.assert_allclose(hf_logits(hf, tokens), ours, atol=1e-4, rtol=0)


def test_sharded_checkpoint_round_trip(tmp_path):
    import transformers

    config = models.get_preset("tiny").replace(num_layers=2)
    params = models.init(config, jax.random.key(1))
    models.save_pretrained(tmp_path, config, params, max_shard_bytes=600_000)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    assert not (tmp_path / "model.safetensors").exists()
    _, loaded = models.load_pretrained(tmp_path)
    jax.tree.map(np.testing.assert_array_equal, loaded, params)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).float().eval()
    tokens = _tokens(config.vocab_size, shape=(1, 16))
    np.testing.assert_allclose(hf_logits(hf, tokens),
                               np.asarray(_fwd(config, params, jnp.asarray(tokens))),
                               atol=1e-4, rtol=0)


def test_bf16_checkpoint_loads_exactly(tmp_path):
    import torch

    hf = random_hf_model("qwen3").to(torch.bfloat16)
    hf.save_pretrained(tmp_path)
    cfg_json = json.loads((tmp_path / "config.json").read_text())
    assert cfg_json["dtype"] == "bfloat16"
    config, params = models.load_pretrained(tmp_path, dtype=jnp.float32)
    q_hf = hf.model.layers[1].self_attn.q_proj.weight.detach().float().numpy()
    q_ours = np.asarray(params["layers"]["q"][1]).reshape(config.hidden_size, -1).T
    np.testing.assert_array_equal(q_ours, q_hf)
    config16, params16 = models.load_pretrained(tmp_path, dtype=jnp.bfloat16)
    assert config16.dtype == config16.param_dtype == "bfloat16"
    assert params16["embed"].dtype == jnp.bfloat16
    logits = _fwd(config16, params16, jnp.asarray(_tokens(config.vocab_size, (1, 8))))
    assert logits.dtype == jnp.float32 and bool(jnp.isfinite(logits).all())


def test_generation_config_and_token_ids_round_trip(tmp_path):
    hf = random_hf_model("llama", bos_token_id=1, eos_token_id=[2, 3], pad_token_id=0)
    hf.save_pretrained(tmp_path / "a")
    config, params = models.load_pretrained(tmp_path / "a")
    assert (config.bos_token_id, config.eos_token_ids, config.pad_token_id) == (1, (2, 3), 0)
    models.save_pretrained(tmp_path / "b", config, params)
    gen = json.loads((tmp_path / "b" / "generation_config.json").read_text())
    assert gen == {"bos_token_id": 1, "eos_token_id": [2, 3], "pad_token_id": 0}
    assert models.read_config(tmp_path / "b").rope_scaling == models.RopeScaling(
        "llama3", LLAMA3_ROPE["factor"], 1.0, 4.0, 32)
