"""Base config: the `model` and `mesh` sections every entry point shares.

    python -m launch.<entry> --config=configs/base.py:small \
        --config.model.dtype=bfloat16 --config.mesh.fsdp=4

`get_config(arg)` follows big_vision: `arg` (after the colon) picks the model
preset. The returned ConfigDict is locked, so overriding a key that does not
exist fails with an error naming it.

model:
  preset        preset name (models.PRESETS), used when `hf_path` is empty.
  hf_path       local Hugging Face directory; its config.json gives the
                architecture (and load_pretrained the weights).
  dtype         compute dtype: float32 | bfloat16 | float16.
  param_dtype   parameter storage dtype.
  scan_layers   lax.scan over layers (compile time independent of depth).
  remat         none | full | dots (backward-pass rematerialisation).
  <architecture fields>  vocab_size, hidden_size, num_layers, num_heads,
                num_kv_heads, head_dim, mlp_dim, rope_theta, rms_norm_eps,
                tie_embeddings, max_position_embeddings: None keeps the
                preset's / checkpoint's value, anything else overrides it.
mesh:
  data, fsdp, tensor  mesh axis sizes; one may be -1 (= all remaining devices).
  rules.<logical axis>  comma-separated mesh axes for each logical axis
                (batch, length, embed, mlp, heads, kv_heads, head_dim, vocab,
                layers, norm); "" keeps that axis replicated.
"""

import ml_collections
from ml_collections import config_dict

ARCHITECTURE_FIELDS = {
    "vocab_size": int, "hidden_size": int, "num_layers": int, "num_heads": int,
    "num_kv_heads": int, "head_dim": int, "mlp_dim": int, "rope_theta": float,
    "rms_norm_eps": float, "tie_embeddings": bool, "max_position_embeddings": int,
}

DEFAULT_SHARDING_RULES = {
    "batch": "data,fsdp", "length": "", "embed": "fsdp", "mlp": "tensor",
    "heads": "tensor", "kv_heads": "tensor", "head_dim": "", "vocab": "tensor",
    "layers": "", "norm": "",
}


def model_section(preset: str = "tiny") -> ml_collections.ConfigDict:
    model = ml_collections.ConfigDict()
    model.preset = preset
    model.hf_path = ""
    model.dtype = "float32"
    model.param_dtype = "float32"
    model.scan_layers = True
    model.remat = "none"
    for name, kind in ARCHITECTURE_FIELDS.items():
        model[name] = config_dict.placeholder(kind)
    return model


def mesh_section() -> ml_collections.ConfigDict:
    mesh = ml_collections.ConfigDict()
    mesh.data = -1
    mesh.fsdp = 1
    mesh.tensor = 1
    mesh.rules = ml_collections.ConfigDict(dict(DEFAULT_SHARDING_RULES))
    return mesh


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Returns the locked base config; `arg` is an optional model preset name."""
    config = ml_collections.ConfigDict()
    config.model = model_section(arg or "tiny")
    config.mesh = mesh_section()
    config.seed = 0
    config.lock()
    return config
