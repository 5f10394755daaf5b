"""Model configuration: one frozen dataclass and named presets.

`ModelConfig` describes the decoder-only families this project supports. The
family (`qwen2`, `qwen3`, `llama`) fixes the per-family architectural quirks,
so an impossible combination cannot be written down:

| family | q/k/v bias | per-head q/k RMSNorm |
| ------ | ---------- | -------------------- |
| qwen2  | yes        | no                   |
| qwen3  | no         | yes                  |
| llama  | no         | no                   |

Everything else (sizes, RoPE, tied embeddings, dtypes) is a field. The config
is hashable, so it is passed to jitted functions as a static argument.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

FAMILIES = ("qwen2", "qwen3", "llama")
DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
ROPE_TYPES = ("default", "linear", "llama3")
REMAT_POLICIES = ("none", "full", "dots")


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """RoPE frequency scaling (Hugging Face `rope_parameters` minus the theta).

    `rope_type="linear"` divides every frequency by `factor`; `"llama3"` is the
    Llama 3.1 piecewise scaling that keeps high frequencies, divides low ones by
    `factor` and interpolates in between.
    """

    rope_type: str = "default"
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192

    def __post_init__(self):
        if self.rope_type not in ROPE_TYPES:
            raise ValueError(
                f"rope_type {self.rope_type!r} is not supported; supported: {ROPE_TYPES}"
            )
        if self.factor <= 0:
            raise ValueError(f"rope factor must be > 0, got {self.factor}")
        if self.rope_type == "llama3" and self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(
                "llama3 rope scaling needs high_freq_factor > low_freq_factor, got "
                f"{self.high_freq_factor} <= {self.low_freq_factor}"
            )


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture and numerics of a decoder-only transformer.

    Attributes:
      family: `qwen2`, `qwen3` or `llama`; also the Hugging Face `model_type`.
      vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, head_dim,
        mlp_dim: sizes. `num_heads % num_kv_heads == 0` (grouped-query attention).
      rope_theta: RoPE base. rope_scaling: optional frequency scaling.
      rms_norm_eps: epsilon of every RMSNorm.
      tie_embeddings: the output projection is the transposed input embedding.
      max_position_embeddings: recorded for export; not enforced by `apply`.
      dtype: compute dtype of activations and matmuls. param_dtype: storage
        dtype of parameters (cast to `dtype` at use). Logits are always fp32.
      scan_layers: run the layer stack as `lax.scan` (compile time independent
        of depth) instead of an unrolled Python loop.
      remat: rematerialisation of each layer in the backward pass:
        `none`, `full` (recompute everything) or `dots` (save matmul outputs).
      bos_token_id, eos_token_ids, pad_token_id: token ids carried through
        Hugging Face import/export; the model itself does not use them.
    """

    family: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    mlp_dim: int
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling | None = None
    rms_norm_eps: float = 1e-6
    tie_embeddings: bool = False
    max_position_embeddings: int = 32768
    dtype: str = "float32"
    param_dtype: str = "float32"
    scan_layers: bool = True
    remat: str = "none"
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None

    def __post_init__(self):
        if self.family not in FAMILIES:
            raise ValueError(f"family {self.family!r} is not supported; supported: {FAMILIES}")
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim", "mlp_dim", "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"{name} {getattr(self, name)!r} is not one of {tuple(DTYPES)}")
        if self.remat not in REMAT_POLICIES:
            raise ValueError(f"remat {self.remat!r} is not one of {REMAT_POLICIES}")
        if self.rope_theta <= 0 or self.rms_norm_eps <= 0:
            raise ValueError("rope_theta and rms_norm_eps must be > 0")
        if not isinstance(self.eos_token_ids, tuple):
            object.__setattr__(self, "eos_token_ids", tuple(self.eos_token_ids))

    @property
    def qkv_bias(self) -> bool:
        return self.family == "qwen2"

    @property
    def qk_norm(self) -> bool:
        return self.family == "qwen3"

    @property
    def compute_dtype(self):
        return DTYPES[self.dtype]

    @property
    def weight_dtype(self):
        return DTYPES[self.param_dtype]

    def replace(self, **changes: Any) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    def num_params(self) -> int:
        """Exact parameter count (embeddings included)."""
        d, v, f, h, k, hd = (self.hidden_size, self.vocab_size, self.mlp_dim,
                             self.num_heads, self.num_kv_heads, self.head_dim)
        per_layer = 2 * d + d * (h + 2 * k) * hd + h * hd * d + 3 * d * f
        if self.qkv_bias:
            per_layer += (h + 2 * k) * hd
        if self.qk_norm:
            per_layer += 2 * hd
        head = 0 if self.tie_embeddings else d * v
        return v * d + self.num_layers * per_layer + d + head


_LLAMA31_ROPE = RopeScaling("llama3", 8.0, 1.0, 4.0, 8192)
_LLAMA32_ROPE = RopeScaling("llama3", 32.0, 1.0, 4.0, 8192)

PRESETS: dict[str, ModelConfig] = {
    # Qwen2-shaped, 4.07M params: tests, the embedded demo, workload W1.
    "tiny": ModelConfig("qwen2", 512, 256, 4, 4, 2, 64, 1024, tie_embeddings=True,
                        max_position_embeddings=2048),
    # Qwen2-shaped, ~31.7M params: benchmarks.
    "small": ModelConfig("qwen2", 512, 512, 8, 8, 4, 64, 2048, tie_embeddings=True,
                         max_position_embeddings=4096),
    "qwen2.5-0.5b": ModelConfig("qwen2", 151936, 896, 24, 14, 2, 64, 4864, rope_theta=1e6,
                                tie_embeddings=True),
    "qwen2.5-1.5b": ModelConfig("qwen2", 151936, 1536, 28, 12, 2, 128, 8960, rope_theta=1e6,
                                tie_embeddings=True),
    "qwen2.5-7b": ModelConfig("qwen2", 152064, 3584, 28, 28, 4, 128, 18944, rope_theta=1e6,
                              max_position_embeddings=131072),
    "qwen3-0.6b": ModelConfig("qwen3", 151936, 1024, 28, 16, 8, 128, 3072, rope_theta=1e6,
                              tie_embeddings=True, max_position_embeddings=40960),
    "qwen3-8b": ModelConfig("qwen3", 151936, 4096, 36, 32, 8, 128, 12288, rope_theta=1e6,
                            max_position_embeddings=40960),
    "llama3.2-1b": ModelConfig("llama", 128256, 2048, 16, 32, 8, 64, 8192, rope_theta=5e5,
                               rope_scaling=_LLAMA32_ROPE, rms_norm_eps=1e-5,
                               tie_embeddings=True, max_position_embeddings=131072),
    "llama3.1-8b": ModelConfig("llama", 128256, 4096, 32, 32, 8, 128, 14336, rope_theta=5e5,
                               rope_scaling=_LLAMA31_ROPE, rms_norm_eps=1e-5,
                               max_position_embeddings=131072),
}


def get_preset(name: str, **overrides: Any) -> ModelConfig:
    """Returns the preset `name` with `overrides` applied (validated)."""
    if name not in PRESETS:
        raise KeyError(f"unknown model preset {name!r}; presets: {sorted(PRESETS)}")
    unknown = set(overrides) - {f.name for f in dataclasses.fields(ModelConfig)}
    if unknown:
        raise KeyError(f"unknown ModelConfig field(s) {sorted(unknown)}")
    return PRESETS[name].replace(**overrides)


def as_dict(section: Any) -> dict:
    """A config section (ConfigDict or any mapping) as a plain dict (one level)."""
    return dict(section.items()) if hasattr(section, "items") else dict(section)
