"""Hugging Face `config.json` <-> `ModelConfig`.

Reads both the transformers-5 form (`rope_parameters: {rope_type, rope_theta,
...}`) and the legacy form (`rope_theta` plus `rope_scaling` with `type` or
`rope_type`). Anything the decoder does not implement (sliding-window layers,
biases on o/MLP projections, non-SiLU activations, partial rotary, YaRN...)
is rejected with an error naming the key, never silently ignored.
"""

from __future__ import annotations

from typing import Any

from models.config import FAMILIES, ModelConfig, RopeScaling
from models.safetensors_io import CheckpointError

ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "llama": "LlamaForCausalLM"}
_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
             "num_attention_heads")


def _eos_tuple(value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else (int(value),)


def _rope(hf: dict, where: str) -> tuple[float, RopeScaling | None]:
    params = hf.get("rope_parameters")
    if params is None:
        params = dict(hf.get("rope_scaling") or {})
        if "rope_theta" in hf:
            params.setdefault("rope_theta", hf["rope_theta"])
    if not isinstance(params, dict):
        raise CheckpointError(f"{where}: rope_parameters must be an object, got {params!r}")
    if params and all(isinstance(v, dict) for v in params.values()):
        raise CheckpointError(f"{where}: per-layer-type rope_parameters are not supported")
    rope_type = params.get("rope_type", params.get("type", "default"))
    theta = float(params.get("rope_theta", 10000.0))
    if float(params.get("partial_rotary_factor", 1.0)) != 1.0:
        raise CheckpointError(f"{where}: partial_rotary_factor != 1 is not supported")
    if rope_type == "default":
        return theta, None
    try:
        if rope_type == "linear":
            return theta, RopeScaling("linear", float(params["factor"]))
        if rope_type == "llama3":
            return theta, RopeScaling(
                "llama3", float(params["factor"]), float(params["low_freq_factor"]),
                float(params["high_freq_factor"]),
                int(params["original_max_position_embeddings"]))
    except KeyError as e:
        raise CheckpointError(f"{where}: rope_type {rope_type!r} needs key {e.args[0]!r}") from None
    raise CheckpointError(f"{where}: rope_type {rope_type!r} is not supported "
                          "(supported: default, linear, llama3)")


def config_from_hf(hf: dict, where: str = "config.json") -> ModelConfig:
    """Builds a `ModelConfig` from a parsed Hugging Face `config.json`."""
    model_type = hf.get("model_type")
    if model_type not in FAMILIES:
        raise CheckpointError(f"{where}: unsupported model_type {model_type!r}; "
                              f"supported: {', '.join(FAMILIES)}")
    missing = [k for k in _REQUIRED if k not in hf]
    if missing:
        raise CheckpointError(f"{where}: missing required key(s) {missing}")
    if hf.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"{where}: hidden_act {hf['hidden_act']!r} is not supported (silu)")
    if hf.get("use_sliding_window"):
        raise CheckpointError(f"{where}: use_sliding_window=true is not supported")
    if model_type != "qwen2" and hf.get("attention_bias"):
        raise CheckpointError(f"{where}: attention_bias=true is not supported for {model_type}")
    if hf.get("mlp_bias"):
        raise CheckpointError(f"{where}: mlp_bias=true is not supported")
    theta, scaling = _rope(hf, where)
    heads = int(hf["num_attention_heads"])
    head_dim = hf.get("head_dim") or int(hf["hidden_size"]) // heads
    try:
        return ModelConfig(
            family=model_type,
            vocab_size=int(hf["vocab_size"]),
            hidden_size=int(hf["hidden_size"]),
            num_layers=int(hf["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(hf.get("num_key_value_heads") or heads),
            head_dim=int(head_dim),
            mlp_dim=int(hf["intermediate_size"]),
            rope_theta=theta,
            rope_scaling=scaling,
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
            max_position_embeddings=int(hf.get("max_position_embeddings", 32768)),
            bos_token_id=hf.get("bos_token_id"),
            eos_token_ids=_eos_tuple(hf.get("eos_token_id")),
            pad_token_id=hf.get("pad_token_id"),
        )
    except ValueError as e:
        raise CheckpointError(f"{where}: {e}") from None


def config_to_hf(config: ModelConfig) -> dict:
    """The `config.json` dict transformers reads back as the same architecture.

    RoPE is written in both forms: `rope_parameters` (transformers 5) and the legacy
    `rope_theta` + `rope_scaling` (transformers 4, vLLM and other readers of the 4.x
    format, which ignore `rope_parameters` and would take theta = 10000)."""
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": config.rope_theta}
    s = config.rope_scaling
    if s is not None and s.rope_type != "default":
        rope.update(rope_type=s.rope_type, factor=s.factor)
        if s.rope_type == "llama3":
            rope.update(low_freq_factor=s.low_freq_factor, high_freq_factor=s.high_freq_factor,
                        original_max_position_embeddings=s.original_max_position_embeddings)
    eos = list(config.eos_token_ids)
    hf = {
        "architectures": [ARCHITECTURES[config.family]],
        "model_type": config.family,
        "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.mlp_dim,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": config.rms_norm_eps,
        "rope_parameters": rope,
        "rope_theta": config.rope_theta,
        "rope_scaling": ({k: v for k, v in rope.items() if k != "rope_theta"}
                         if rope["rope_type"] != "default" else None),
        "tie_word_embeddings": config.tie_embeddings,
        "max_position_embeddings": config.max_position_embeddings,
        "attention_dropout": 0.0,
        "bos_token_id": config.bos_token_id,
        "eos_token_id": eos[0] if len(eos) == 1 else (eos or None),
        "pad_token_id": config.pad_token_id,
        "dtype": config.param_dtype,
        "use_cache": True,
    }
    if config.family != "qwen2":
        hf["attention_bias"] = False
    if config.family == "llama":
        hf["mlp_bias"] = False
    else:
        hf["use_sliding_window"] = False
    return hf
