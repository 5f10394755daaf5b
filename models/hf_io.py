"""Hugging Face safetensors import/export for qwen2, qwen3 and llama.

`load_pretrained` validates everything first: the config, the shard index,
every expected tensor name, every shape, and unexpected extras, and only then
reads data, so a bad directory raises one `CheckpointError` and nothing is
half-loaded. Per-layer Hugging Face tensors are transposed into this
project's layout (see `models.params`) and stacked along the `layers` axis.
With `mesh=` each stacked tensor goes straight to its shards.

`save_pretrained` writes `config.json`, `generation_config.json` and
`model.safetensors` (or numbered shards plus `model.safetensors.index.json`)
that `transformers.AutoModelForCausalLM.from_pretrained` loads.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from models import multihost, safetensors_io, sharding
from models import params as params_lib
from models.config import DTYPES, ModelConfig
from models.hf_config import config_from_hf, config_to_hf
from models.safetensors_io import CheckpointError

# our name -> (HF name, transform). Transforms: "same" (identical shape),
# "flat" (HF stores the flattened tensor), int n (HF linear weight [out, in]
# whose `in` is our first n dims).
_TOP = {"embed": ("model.embed_tokens.weight", "same"),
        "final_norm": ("model.norm.weight", "same"),
        "lm_head": ("lm_head.weight", 1)}
_LAYER = {"attn_norm": ("input_layernorm.weight", "same"),
          "mlp_norm": ("post_attention_layernorm.weight", "same"),
          "q": ("self_attn.q_proj.weight", 1), "k": ("self_attn.k_proj.weight", 1),
          "v": ("self_attn.v_proj.weight", 1), "o": ("self_attn.o_proj.weight", 2),
          "q_bias": ("self_attn.q_proj.bias", "flat"), "k_bias": ("self_attn.k_proj.bias", "flat"),
          "v_bias": ("self_attn.v_proj.bias", "flat"),
          "q_norm": ("self_attn.q_norm.weight", "same"),
          "k_norm": ("self_attn.k_norm.weight", "same"),
          "gate": ("mlp.gate_proj.weight", 1), "up": ("mlp.up_proj.weight", 1),
          "down": ("mlp.down_proj.weight", 1)}
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers some old exports contain


def _hf_shape(shape: tuple[int, ...], how) -> tuple[int, ...]:
    if how == "same":
        return shape
    if how == "flat":
        return (math.prod(shape),)
    return (math.prod(shape[how:]), math.prod(shape[:how]))


def _to_ours(x: np.ndarray, shape: tuple[int, ...], how) -> np.ndarray:
    return (x if how in ("same", "flat") else x.T).reshape(shape)


def _to_hf(x: np.ndarray, how) -> np.ndarray:
    if how == "same":
        return x
    if how == "flat":
        return x.reshape(-1)
    return x.reshape(math.prod(x.shape[:how]), -1).T


def tensor_plan(config: ModelConfig) -> list[tuple[tuple[str, ...], list[str], tuple, object]]:
    """[(our path, HF names, our shape of one HF tensor, transform)].

    Stacked per-layer params have one HF name per layer; the shape is then
    that of one layer's slice.
    """
    specs = params_lib.param_specs(config)
    plan = [((k,), [_TOP[k][0]], specs[k].shape, _TOP[k][1]) for k in specs if k != "layers"]
    for k, spec in specs["layers"].items():
        name, how = _LAYER[k]
        names = [f"model.layers.{i}.{name}" for i in range(config.num_layers)]
        plan.append((("layers", k), names, spec.shape[1:], how))
    return plan


def _open_weights(path: Path) -> dict[str, safetensors_io.SafetensorsFile]:
    """Maps each tensor name to the opened file holding it (headers validated)."""
    index = path / "model.safetensors.index.json"
    single = path / "model.safetensors"
    if index.exists():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise CheckpointError(f"{index}: malformed shard index ({e})") from None
        files = {}
        for fname in sorted(set(weight_map.values())):
            if not (path / fname).exists():
                raise CheckpointError(f"{index}: shard {fname} does not exist")
            files[fname] = safetensors_io.SafetensorsFile(path / fname)
        for name, fname in weight_map.items():
            if name not in files[fname].tensors:
                raise CheckpointError(f"{index}: tensor {name!r} is not in shard {fname}")
        return {name: files[fname] for name, fname in weight_map.items()}
    if single.exists():
        f = safetensors_io.SafetensorsFile(single)
        return {name: f for name in f.tensors}
    raise CheckpointError(f"{path}: no model.safetensors or model.safetensors.index.json")


def read_config(path: str | os.PathLike) -> ModelConfig:
    """The `ModelConfig` of a local Hugging Face directory (no weights read)."""
    cfg_path = Path(path) / "config.json"
    if not Path(path).is_dir():
        raise CheckpointError(f"{path}: not a directory")
    if not cfg_path.exists():
        raise CheckpointError(f"{path}: no config.json")
    try:
        hf = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{cfg_path}: invalid JSON ({e})") from None
    return config_from_hf(hf, str(cfg_path))


def load_pretrained(path: str | os.PathLike, dtype=jnp.float32, *, mesh=None, rules=None
                    ) -> tuple[ModelConfig, dict]:
    """Loads a local Hugging Face checkpoint directory.

    Args:
      path: directory with `config.json` and `model.safetensors` or a sharded
        `model.safetensors.index.json`.
      dtype: parameter and compute dtype of the returned model.
      mesh, rules: if given, parameters are placed sharded on `mesh`
        (`models.sharding` rules) as they are read.
    Returns:
      `(config, params)`.
    Raises:
      CheckpointError: unknown `model_type`, unsupported feature, missing,
        misshaped or unexpected tensors, malformed files. Raised before any
        tensor data is read.
    """
    path = Path(path)
    dtype_name = next((k for k, v in DTYPES.items() if jnp.dtype(v) == jnp.dtype(dtype)), None)
    if dtype_name is None:
        raise ValueError(f"dtype {dtype} is not one of {tuple(DTYPES)}")
    config = read_config(path).replace(dtype=dtype_name, param_dtype=dtype_name)
    weights = _open_weights(path)
    plan = tensor_plan(config)

    missing, bad_shape, expected = [], [], set()
    for _, names, shape, how in plan:
        want = _hf_shape(shape, how)
        for name in names:
            expected.add(name)
            if name not in weights:
                missing.append(name)
            elif weights[name].tensors[name][1] != want:
                bad_shape.append(f"{name}: file has {weights[name].tensors[name][1]}, "
                                 f"config needs {want} ({weights[name].path})")
    if missing:
        raise CheckpointError(f"{path}: {len(missing)} tensor(s) missing, e.g. {missing[:5]}")
    if bad_shape:
        raise CheckpointError(f"{path}: {len(bad_shape)} tensor(s) with the wrong shape: "
                              + "; ".join(bad_shape[:5]))
    allowed = {"lm_head.weight"} if config.tie_embeddings else set()
    unexpected = sorted(n for n in weights if n not in expected and n not in allowed
                        and not n.endswith(_IGNORED_SUFFIXES))
    if unexpected:
        raise CheckpointError(f"{path}: {len(unexpected)} unexpected tensor(s) for "
                              f"{config.family}, e.g. {unexpected[:5]}")

    shardings = None
    if mesh is not None:
        shardings = sharding.param_shardings(config, mesh, rules)
    np_dtype = np.dtype(jnp.dtype(dtype))
    out: dict = {"layers": {}}
    start, nbytes = time.perf_counter(), 0
    for i, (key, names, shape, how) in enumerate(plan):
        if key[0] == "layers":
            arr = np.stack([_to_ours(weights[n].get(n), shape, how) for n in names])
        else:
            arr = _to_ours(weights[names[0]].get(names[0]), shape, how)
        arr = arr.astype(np_dtype, copy=False)
        nbytes += arr.nbytes
        if shardings is None:
            value = jnp.asarray(arr)
        else:
            target = shardings[key[0]] if len(key) == 1 else shardings["layers"][key[1]]
            # Each process supplies only its own shards: correct on multi-host meshes.
            value = jax.make_array_from_callback(arr.shape, target, lambda idx, a=arr: a[idx])
        if key[0] == "layers":
            out["layers"][key[1]] = value
        else:
            out[key[0]] = value
        logging.log_every_n_seconds(
            logging.INFO, "load_pretrained %s: %d/%d tensors, %.2f GB, %.1fs", 10, path,
            i + 1, len(plan), nbytes / 1e9, time.perf_counter() - start)
    logging.info("load_pretrained %s: %s %.2f GB in %.1fs", path, config.family, nbytes / 1e9,
                 time.perf_counter() - start)
    return config, out


def save_pretrained(path: str | os.PathLike, config: ModelConfig, params: dict, *,
                    max_shard_bytes: int = 5 * 1024**3) -> None:
    """Writes a Hugging Face directory loadable by transformers and `load_pretrained`.

    Tensors are stored in `config.param_dtype`. Above `max_shard_bytes` the
    weights are split into `model-0000i-of-0000n.safetensors` files plus an
    index. On multi-host runs every process must call this; process 0 writes.
    """
    shapes = jax.tree.map(lambda x: tuple(x.shape), params)
    want = jax.tree.map(lambda s: tuple(s.shape), params_lib.param_shapes(config))
    if jax.tree.structure(shapes) != jax.tree.structure(want) or shapes != want:
        raise ValueError("params do not match config: structure or shapes differ "
                         f"(got {shapes}, config needs {want})")
    np_dtype = np.dtype(config.weight_dtype)
    tensors: dict[str, np.ndarray] = {}
    for key, names, _, how in tensor_plan(config):
        value = params[key[0]] if len(key) == 1 else params["layers"][key[1]]
        arr = multihost.to_host(value).astype(np_dtype)
        if key[0] == "layers":
            for i, name in enumerate(names):
                tensors[name] = _to_hf(arr[i], how)
        else:
            tensors[names[0]] = _to_hf(arr, how)
    if jax.process_index() != 0:
        return

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name, arr in tensors.items():
        if shards[-1] and size + arr.nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = arr
        size += arr.nbytes
    if len(shards) == 1:
        safetensors_io.write(path / "model.safetensors", shards[0])
    else:
        weight_map = {}
        for i, shard in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            safetensors_io.write(path / fname, shard)
            weight_map.update({name: fname for name in shard})
        total = sum(a.nbytes for a in tensors.values())
        (path / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    hf = config_to_hf(config)
    (path / "config.json").write_text(json.dumps(hf, indent=2))
    gen = {k: hf[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")
           if hf[k] is not None}
    (path / "generation_config.json").write_text(json.dumps(gen, indent=2))
