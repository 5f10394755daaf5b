"""The architecture a config's `model` section names: a preset or a checkpoint's
config.json, with the section's overrides."""

from __future__ import annotations

import dataclasses
from typing import Any

from models import paths
from models.config import ModelConfig, as_dict, get_preset
from models.hf_io import read_config


def from_config_section(section: Any) -> ModelConfig:
    """`ModelConfig` from a `config.model` section (a ConfigDict or mapping).

    The preset (or, when `hf_path` is set, that checkpoint's config.json) gives
    the architecture; keys set to anything but None override it.
    """
    values = as_dict(section)
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = set(values) - {"preset", "hf_path"} - fields
    if unknown:
        raise KeyError(f"unknown key(s) in the model config section: {sorted(unknown)}")
    if values.get("hf_path"):
        base = read_config(paths.cached(values["hf_path"]))  # a bucket's: downloaded once
    else:
        base = get_preset(values.get("preset", "tiny"))
    overrides = {k: v for k, v in values.items()
                 if k not in ("preset", "hf_path") and v is not None}
    return base.replace(**overrides)
