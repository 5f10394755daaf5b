"""Base config: the `model`, `mesh` and `rl` sections every entry point shares.

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
rl:             the algorithm (docs/algorithms.md has every name and option).
  advantage.name   estimator (rl.advantages.names()); the other keys are its
                   options, None = the estimator's default. Setting an option
                   the chosen estimator does not take is an error.
  loss.name        policy loss (rl.losses.names()), plus `agg`, `norm_length`,
                   `tis_cap`, `tis_mode`, `entropy_coef` and the loss's options
                   (eps_low, eps_high, dual_clip, delta_*, keep_prob, mode).
  kl.kind, kl.coef, kl.clamp   KL to the reference (k1|k2|k3); coef 0 = none;
                   kl.in_reward puts it in the reward instead of the loss.
  reweight.name    "" or a token reweighter (fipo, logp_reweight,
                   divergence_weighted, delta_logp_mask) and its options.
  reward.name      verifier (rl.rewards.names()) and its options.
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


def _options(**types) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {name: config_dict.placeholder(kind) for name, kind in types.items()})


def rl_section() -> ml_collections.ConfigDict:
    """Algorithm choice by name; None-valued options keep each component's default."""
    rl = ml_collections.ConfigDict()
    rl.advantage = _options(eps=float, ddof=int, std_scope=str, baseline=bool, gamma=float,
                            scale=str, depth_weighting=str, skip_zero_std=bool, whiten=bool)
    rl.advantage.name = "grpo"
    rl.loss = _options(agg=str, norm_length=float, tis_cap=float, tis_mode=str,
                       eps_low=float, eps_high=float, dual_clip=float, delta_low=float,
                       delta_high=float, keep_prob=float, mode=str)
    rl.loss.name = "ppo"
    rl.loss.entropy_coef = 0.0
    rl.kl = ml_collections.ConfigDict(
        {"kind": "k3", "coef": 0.0, "clamp": config_dict.placeholder(float),
         "in_reward": False})
    rl.reweight = _options(c=float, form=str, gamma=float, clip_low=float, clip_high=float,
                           high_only=bool, neg_ratio_cap=float, alpha=float, fraction=float)
    rl.reweight.name = ""
    rl.reward = _options(require_all=bool, format_score=float, timeout_s=float,
                         use_sympy=bool, pattern=str, max_chars=int)
    rl.reward.name = "countdown"
    return rl


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Returns the locked base config; `arg` is an optional model preset name."""
    config = ml_collections.ConfigDict()
    config.model = model_section(arg or "tiny")
    config.mesh = mesh_section()
    config.rl = rl_section()
    config.seed = 0
    config.lock()
    return config
