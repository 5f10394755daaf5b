"""LoRA adapters as a PEFT directory, and back.

    save_adapter(path, config, lora, adapters, base_model="Qwen/Qwen2.5-7B")
    lora, adapters = load_adapter(path, config)

The directory is what `peft.PeftModel.from_pretrained(model, path)` loads onto the
`transformers` model of the base (`models.save_pretrained` writes one):

    adapter_config.json        peft_type LORA, r, lora_alpha, target_modules, ...
    adapter_model.safetensors  base_model.model.model.layers.{i}.{module}.lora_A.weight
                               [r, in] and .lora_B.weight [out, r], fp32

Our a [L, *in, r] and b [L, r, *out] flatten their input and output dims the way
`models.hf_io` flattens the weight they adapt (o's [H, Dh] input is HF's H·Dh), so
lora_A = a[i].reshape(in, r).T and lora_B = b[i].reshape(r, out).T. PEFT scales the
update by lora_alpha / r, as `models.lora` does; rsLoRA, DoRA and dropout are not used.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from models import multihost, safetensors_io
from models.config import ModelConfig
from models.lora import TARGETS, LoraConfig, adapter_specs
from models.safetensors_io import CheckpointError

# our weight -> the transformers module it adapts
MODULES = {"q": "self_attn.q_proj", "k": "self_attn.k_proj", "v": "self_attn.v_proj",
           "o": "self_attn.o_proj", "gate": "mlp.gate_proj", "up": "mlp.up_proj",
           "down": "mlp.down_proj"}
PREFIX = "base_model.model.model.layers"
CONFIG_FILE, WEIGHTS_FILE = "adapter_config.json", "adapter_model.safetensors"


def _names(name: str, layer: int) -> tuple[str, str]:
    stem = f"{PREFIX}.{layer}.{MODULES[name]}"
    return f"{stem}.lora_A.weight", f"{stem}.lora_B.weight"


def save_adapter(path: str | os.PathLike, config: ModelConfig, lora: LoraConfig,
                 adapters: dict, *, base_model: str = "") -> None:
    """Writes `adapters` as a PEFT LoRA directory (module doc). Every process of a
    multi-host run must call it (it gathers); process 0 writes."""
    tensors = {}
    for name, ab in adapters["layers"].items():
        a = np.asarray(multihost.to_host(ab["a"]), np.float32)
        b = np.asarray(multihost.to_host(ab["b"]), np.float32)
        for i in range(config.num_layers):
            name_a, name_b = _names(name, i)
            tensors[name_a] = np.ascontiguousarray(a[i].reshape(-1, lora.rank).T)
            tensors[name_b] = np.ascontiguousarray(b[i].reshape(lora.rank, -1).T)
    if not multihost.is_primary():
        return
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    safetensors_io.write(path / WEIGHTS_FILE, tensors)
    settings = {
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model,
        "r": lora.rank, "lora_alpha": lora.alpha, "lora_dropout": 0.0, "bias": "none",
        "target_modules": sorted(MODULES[t].split(".")[-1] for t in lora.targets),
        "fan_in_fan_out": False, "use_rslora": False, "use_dora": False,
        "init_lora_weights": True, "inference_mode": True, "modules_to_save": None,
        "layers_to_transform": None, "revision": None}
    (path / CONFIG_FILE).write_text(json.dumps(settings, indent=2))


def load_adapter(path: str | os.PathLike, config: ModelConfig) -> tuple[LoraConfig, dict]:
    """(LoraConfig, adapters) from a PEFT LoRA directory made for a model of `config`;
    CheckpointError (one line) for anything this project's adapters cannot hold."""
    path = Path(path)
    try:
        settings = json.loads((path / CONFIG_FILE).read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path / CONFIG_FILE}: {e}") from None
    if settings.get("peft_type") != "LORA":
        raise CheckpointError(f"{path}: peft_type {settings.get('peft_type')!r} is not LORA")
    for key in ("use_rslora", "use_dora", "fan_in_fan_out"):
        if settings.get(key):
            raise CheckpointError(f"{path}: {key} adapters are not supported")
    by_module = {v.split(".")[-1]: k for k, v in MODULES.items()}
    modules = settings.get("target_modules") or []
    unknown = [m for m in modules if m not in by_module]
    if isinstance(modules, str) or unknown:
        raise CheckpointError(f"{path}: target_modules {modules!r}: only "
                              f"{sorted(by_module)} can be adapted here")
    lora = LoraConfig(rank=int(settings["r"]), alpha=float(settings["lora_alpha"]),
                      targets=tuple(t for t in TARGETS if MODULES[t].split(".")[-1] in modules))
    specs = adapter_specs(config, lora)["layers"]
    file = safetensors_io.SafetensorsFile(path / WEIGHTS_FILE)
    out = {}
    for name, spec in specs.items():
        a, b = [], []
        for i in range(config.num_layers):
            name_a, name_b = _names(name, i)
            for key, want in ((name_a, (lora.rank, math.prod(spec["a"].shape[1:-1]))),
                              (name_b, (math.prod(spec["b"].shape[2:]), lora.rank))):
                got = file.tensors[key][1] if key in file.tensors else "missing"
                if got != want:
                    raise CheckpointError(f"{path}: {key} is {got}, expected {want}")
            a.append(file.get(name_a).astype(np.float32).T.reshape(spec["a"].shape[1:]))
            b.append(file.get(name_b).astype(np.float32).T.reshape(spec["b"].shape[1:]))
        out[name] = {"a": jnp.asarray(np.stack(a), jnp.float32),
                     "b": jnp.asarray(np.stack(b), jnp.float32)}
    return lora, {"layers": out}
