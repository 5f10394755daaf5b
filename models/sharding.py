"""Declared sharding: a 3-axis mesh and a logical-axis rule table.

Mesh axes are `data`, `fsdp` and `tensor`. Parameters and activations carry
logical axis names (`batch`, `length`, `embed`, `mlp`, `heads`, `kv_heads`,
`head_dim`, `vocab`, `layers`, `norm`); `rules` maps each name to a tuple of
mesh axes (or none). Translating one array's logical axes to a
`PartitionSpec` follows two documented rules, so one table serves every
tensor and every mesh shape:

1. A mesh axis is used at most once per array: dimensions are resolved left
   to right and a mesh axis already taken is dropped (activations
   `(batch, length, embed)` put `fsdp` on `batch`, so `embed` stays whole).
2. A dimension is only split over mesh axes whose product divides it; mesh
   axes are dropped from the right of the rule until it does (e.g. 2 KV heads
   on a 4-way `tensor` axis stay replicated). Such drops are logged once per
   (name, shape), never silent.

GSPMD keeps every layout numerically equivalent to one device; the rules only
decide where memory and compute go.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from absl import logging
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from models import params as params_lib
from models.config import ModelConfig, as_dict

MESH_AXES = ("data", "fsdp", "tensor")

# logical axis -> mesh axes. Same form as `config.mesh.rules` (comma strings).
DEFAULT_RULES: dict[str, tuple[str, ...]] = {
    "batch": ("data", "fsdp"),
    "length": (),
    "embed": ("fsdp",),
    "mlp": ("tensor",),
    "heads": ("tensor",),
    "kv_heads": ("tensor",),
    "head_dim": (),
    "vocab": ("tensor",),
    "layers": (),
    "norm": (),
}

Rules = tuple[tuple[str, tuple[str, ...]], ...]
_warned: set = set()


def make_rules(overrides: Mapping[str, Any] | None = None) -> Rules:
    """Rule table as a hashable tuple; `overrides` maps logical name -> mesh axes.

    Values may be a comma-separated string (`"data,fsdp"`, `""` for none) or a
    sequence of mesh axis names. Unknown logical names or mesh axes are errors.
    """
    rules = dict(DEFAULT_RULES)
    for name, value in (overrides or {}).items():
        if name not in DEFAULT_RULES:
            raise KeyError(f"unknown logical axis {name!r} in sharding rules; "
                           f"known: {sorted(DEFAULT_RULES)}")
        axes = tuple(a.strip() for a in value.split(",") if a.strip()) if isinstance(
            value, str) else tuple(value)
        bad = [a for a in axes if a not in MESH_AXES]
        if bad:
            raise ValueError(f"sharding rule {name}={value!r}: unknown mesh axes {bad}; "
                             f"mesh axes are {MESH_AXES}")
        rules[name] = axes
    return tuple(sorted(rules.items()))


def make_mesh(shape: Sequence[int] | Mapping[str, int] = (-1, 1, 1),
              devices: Sequence[jax.Device] | None = None) -> Mesh:
    """Mesh with axes (data, fsdp, tensor).

    `shape` is `(data, fsdp, tensor)` or a mapping with those keys (e.g. the
    `config.mesh` section); at most one entry may be -1, meaning "all remaining
    devices". The product must equal the number of devices used.
    """
    if isinstance(shape, Mapping):
        unknown = set(shape) - set(MESH_AXES)
        if unknown:
            raise KeyError(f"unknown mesh axes {sorted(unknown)}; mesh axes are {MESH_AXES}")
        shape = tuple(int(shape.get(a, 1)) for a in MESH_AXES)
    shape = tuple(int(s) for s in shape)
    if len(shape) != 3:
        raise ValueError(f"mesh shape must have 3 entries (data, fsdp, tensor), got {shape}")
    devices = list(devices if devices is not None else jax.devices())
    if shape.count(-1) > 1 or any(s == 0 or s < -1 for s in shape):
        raise ValueError(f"invalid mesh shape {shape}: sizes must be >= 1, at most one -1")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if len(devices) % known:
            raise ValueError(f"mesh {shape} does not divide {len(devices)} devices")
        shape = tuple(len(devices) // known if s == -1 else s for s in shape)
    if math.prod(shape) != len(devices):
        raise ValueError(f"mesh {dict(zip(MESH_AXES, shape))} needs {math.prod(shape)} "
                         f"devices, {len(devices)} available")
    grid = np.asarray(devices).reshape(shape)
    return Mesh(grid, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 3)


def from_config_section(section: Any) -> tuple[Mesh, Rules]:
    """`(mesh, rules)` from a `config.mesh` section: data/fsdp/tensor sizes + `rules`, on
    the devices left to the learner (`split_devices`: all but `rollout_devices`)."""
    values = as_dict(section)
    rules = make_rules(as_dict(values.pop("rules", None) or {}))
    learner, _ = split_devices(int(values.pop("rollout_devices", 0) or 0))
    return make_mesh(values, learner), rules


def split_devices(rollout: int, devices: Sequence[jax.Device] | None = None
                  ) -> tuple[list[jax.Device], list[jax.Device]]:
    """(the learner's devices, the sampler's): the sampler takes `rollout` devices, the
    same number from each process (each process's last ones), so both meshes span every
    process; 0 = the sampler shares the learner's (an empty list)."""
    devices = list(devices if devices is not None else jax.devices())
    if rollout == 0:
        return devices, []
    processes = sorted({d.process_index for d in devices})
    if rollout < 0 or rollout >= len(devices) or rollout % len(processes):
        raise ValueError(f"mesh.rollout_devices={rollout} must leave the learner devices and "
                         f"split evenly over the {len(processes)} processes of the "
                         f"{len(devices)} devices")
    per = rollout // len(processes)
    sampler = [d for p in processes for d in [x for x in devices if x.process_index == p][-per:]]
    return [d for d in devices if d not in sampler], sampler


def rollout_mesh(section: Any) -> Mesh | None:
    """The sampler's own mesh of `mesh.rollout_devices` devices (None: it shares the
    learner's): data over them, tensor as the learner's (`mesh.tensor` must divide them),
    no fsdp (each sampler device holds its tensor shard of the whole policy)."""
    values = as_dict(section)
    rollout = int(values.get("rollout_devices", 0) or 0)
    if not rollout:
        return None
    tensor = int(values.get("tensor", 1))
    _, devices = split_devices(rollout)
    if tensor < 1 or rollout % tensor:
        raise ValueError(f"mesh.tensor={tensor} does not divide mesh.rollout_devices="
                         f"{rollout}: the sampler splits heads like the learner")
    return make_mesh((rollout // tensor, 1, tensor), devices)


def logical_to_spec(axes: Sequence[str | None], shape: Sequence[int], mesh: Mesh,
                    rules: Rules, name: str = "") -> PartitionSpec:
    """PartitionSpec for an array of `shape` whose dims carry logical `axes`."""
    table = dict(rules)
    used: set[str] = set()
    spec = []
    for logical, dim in zip(axes, shape):
        if logical is None:
            spec.append(None)
            continue
        if logical not in table:
            raise KeyError(f"logical axis {logical!r} has no sharding rule")
        wanted = [a for a in table[logical] if a not in used and mesh.shape[a] > 1]
        chosen = list(wanted)
        while chosen and dim % math.prod(mesh.shape[a] for a in chosen):
            chosen.pop()
        if chosen != wanted and (name, tuple(shape)) not in _warned:
            _warned.add((name, tuple(shape)))
            logging.warning("sharding %s %s: dim %s=%d is not divisible by mesh axes %s; "
                            "using %s", name or "array", tuple(shape), logical, dim, wanted,
                            chosen or "replication")
        used.update(chosen)
        spec.append(tuple(chosen) if len(chosen) > 1 else (chosen[0] if chosen else None))
    return PartitionSpec(*spec)


def axis_names(entry) -> tuple[str, ...]:
    """One PartitionSpec entry (None, a mesh axis name or a tuple of them) as a tuple."""
    return tuple(entry) if isinstance(entry, tuple) else (entry,) if entry else ()


def param_shardings(config: ModelConfig, mesh: Mesh, rules: Rules | None = None) -> Any:
    """Pytree of `NamedSharding` matching `models.init(config, ...)`."""
    rules = rules if rules is not None else make_rules()
    specs = params_lib.param_specs(config)
    return jax.tree_util.tree_map_with_path(
        lambda path, s: NamedSharding(
            mesh, logical_to_spec(s.axes, s.shape, mesh, rules, jax.tree_util.keystr(path))),
        specs, is_leaf=lambda x: isinstance(x, params_lib.ParamSpec))


def shard_params(params: Any, config: ModelConfig, mesh: Mesh, rules: Rules | None = None):
    """Places an existing parameter pytree on `mesh` according to the rules."""
    return jax.device_put(params, param_shardings(config, mesh, rules))


def init_sharded(config: ModelConfig, rng: jax.Array, mesh: Mesh, rules: Rules | None = None):
    """`models.init` compiled to write each parameter straight into its shards."""
    shardings = param_shardings(config, mesh, rules)
    return jax.jit(params_lib.init, static_argnums=0, out_shardings=shardings)(config, rng)


@dataclasses.dataclass(frozen=True)
class ActivationSharding:
    """Mesh + rules used to pin activation layouts inside `models.apply`.

    Hashable, so it can be a static argument of a jitted function.
    """

    mesh: Mesh
    rules: Rules = dataclasses.field(default_factory=make_rules)

    def spec(self, axes: Sequence[str], shape: Sequence[int]) -> PartitionSpec:
        return logical_to_spec(axes, shape, self.mesh, self.rules, "activation")

    def constrain(self, x: jax.Array, axes: Sequence[str]) -> jax.Array:
        return jax.lax.with_sharding_constraint(
            x, NamedSharding(self.mesh, self.spec(axes, x.shape)))

    def batch_sharding(self, shape: Sequence[int]) -> NamedSharding:
        """Sharding of a `[B, T]` token batch."""
        return NamedSharding(self.mesh, self.spec(("batch", "length"), shape))
