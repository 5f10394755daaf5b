"""PEFT export: `peft` loads our adapter directory onto the transformers model of the
base and its logits equal ours; the merged export loads as a plain transformers model
with the same logits; the directory reads back exactly."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import models
from models import lora, peft_io
from models.safetensors_io import CheckpointError
from tests.models.hf_helpers import hf_logits, random_hf_model

_fwd = jax.jit(models.apply, static_argnums=0)


def adapted(config, rank=3, targets=tuple(lora.TARGETS), seed=0):
    """Trained-looking adapters (b != 0) with alpha != rank, so the scale matters."""
    cfg = lora.LoraConfig(rank=rank, alpha=7.0, targets=targets)
    ad = lora.init(config, cfg, jax.random.key(seed))
    return cfg, jax.tree.map(
        lambda x: x + 0.3 * jax.random.normal(jax.random.key(seed + 1), x.shape), ad)


@pytest.mark.parametrize("family,targets", [
    ("qwen2", tuple(lora.TARGETS)),   # q/k/v biases, tied head; every linear layer
    ("llama", ("q", "v", "o", "down")),  # GQA, llama3 rope; a subset
    ("qwen3", ("k", "o", "gate", "up")),  # q/k norms, untied head; another subset
])
def test_peft_loads_our_adapter_onto_transformers_with_our_logits(family, targets, tmp_path):
    import peft
    hf = random_hf_model(family)
    hf.save_pretrained(tmp_path / "base")
    config, params = models.load_pretrained(tmp_path / "base")
    cfg, ad = adapted(config, targets=targets)
    peft_io.save_adapter(tmp_path / "adapter", config, cfg, ad, base_model="random")
    with_adapter = peft.PeftModel.from_pretrained(hf, str(tmp_path / "adapter")).eval()
    tokens = np.random.RandomState(0).randint(0, config.vocab_size, (2, 24))
    ours = np.asarray(_fwd(config, lora.attach(params, ad, cfg), jnp.asarray(tokens)))
    base = np.asarray(_fwd(config, params, jnp.asarray(tokens)))
    assert np.abs(ours - base).max() > 0.1  # the adapter changes the logits
    # fp32 both sides, the parity tests' tolerance
    np.testing.assert_allclose(hf_logits(with_adapter, tokens), ours, atol=1e-4, rtol=0)
    saved = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert saved["r"] == 3 and saved["lora_alpha"] == 7.0

    # the merged export is a plain Hugging Face directory with the same model
    import transformers
    models.save_pretrained(tmp_path / "merged", config, lora.merge(config, params, ad, cfg))
    merged = transformers.AutoModelForCausalLM.from_pretrained(
        tmp_path / "merged", attn_implementation="eager").float().eval()
    np.testing.assert_allclose(hf_logits(merged, tokens), ours, atol=1e-4, rtol=0)


def test_the_adapter_reads_back_exactly_and_bad_directories_fail_with_one_line(tmp_path):
    config = models.get_preset("tiny")
    cfg, ad = adapted(config, rank=2, targets=("k", "o", "gate"))
    peft_io.save_adapter(tmp_path, config, cfg, ad)
    got_cfg, got = peft_io.load_adapter(tmp_path, config)
    assert got_cfg == cfg
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(ad)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    other = models.get_preset("tiny").replace(hidden_size=128)
    with pytest.raises(CheckpointError, match="lora_A.weight is \\(2, 256\\), expected"):
        peft_io.load_adapter(tmp_path, other)
    settings = json.loads((tmp_path / "adapter_config.json").read_text())
    (tmp_path / "adapter_config.json").write_text(json.dumps(settings | {"use_dora": True}))
    with pytest.raises(CheckpointError, match="use_dora adapters are not supported"):
        peft_io.load_adapter(tmp_path, config)
