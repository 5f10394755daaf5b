"""Builds small transformers models with random weights for parity tests."""

from __future__ import annotations

import numpy as np

LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32,
               "rope_theta": 500000.0}

# One config per family exercising its quirks.
FAMILY_KWARGS = {
    "qwen2": dict(tie_word_embeddings=True),                         # q/k/v bias, tied
    "qwen3": dict(head_dim=24, tie_word_embeddings=False),           # q/k norm, untied
    "llama": dict(rope_parameters=LLAMA3_ROPE, tie_word_embeddings=False),  # llama3 rope, GQA
}


def hf_config(model_type: str, **overrides):
    import transformers as tf
    cls = {"qwen2": tf.Qwen2Config, "qwen3": tf.Qwen3Config, "llama": tf.LlamaConfig}[model_type]
    kwargs = dict(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  rms_norm_eps=1e-6)
    kwargs.update(FAMILY_KWARGS[model_type])
    kwargs.update(overrides)
    return cls(**kwargs)


def random_hf_model(model_type: str, seed: int = 0, **overrides):
    """An fp32 eager-attention transformers model whose every weight is random.

    Norm scales are drawn around 1 and biases are non-zero, so a mistake in
    any tensor's layout changes the logits.
    """
    import torch
    import transformers as tf
    torch.manual_seed(seed)
    model = tf.AutoModelForCausalLM.from_config(hf_config(model_type, **overrides),
                                                attn_implementation="eager")
    model = model.float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) * (0.5 if p.ndim == 1 else p.shape[-1] ** -0.5))
    return model


def hf_logits(model, tokens: np.ndarray) -> np.ndarray:
    import torch
    with torch.no_grad():
        return model(torch.tensor(np.asarray(tokens), dtype=torch.long)).logits.float().numpy()
