"""The trainer's LoRA side (`lora.rank` >= 1): the frozen base, the adapters' placement,
the sampler's copy and the check that it is the learner's.

    settings = from_config(cfg.lora, model_config)     # None with lora.rank = 0
    frozen = Frozen(settings, params, run.mesh, run.rules)   # quantizes the base
    adapters = frozen.init(rng)                         # the learner's TrainState.params
    params, mark = frozen.for_sampler(adapters)         # merged or factored, + checksum
    frozen.check_sync(mark, adapters)                   # raises SyncError if they differ

The reference policy is the base with the adapter off (`frozen.base`): no second copy.
The sampler runs either a merged copy, W + (alpha/r) A B made once per update
(`lora.sampler=merge`), or the base with the adapters attached, x W + (alpha/r)(x A) B
in every step (`factored`); `auto` merges a plain base and keeps a quantized one
factored (its dense copy would cost what quantizing saved). Every copy carries the
checksum of the adapters it was made from; the update compares it with the learner's,
so a sampler left on an old adapter fails the step instead of training on it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
from jax.sharding import NamedSharding

from models import lora as lora_lib
from models import multihost
from models import quant
from models import sharding as sharding_lib
from models.config import ModelConfig
from models.params import ParamSpec, param_shapes, param_specs
from rl.checkpoint import persistent as checkpoint

QUANTIZE = ("none",) + quant.KINDS
SAMPLER = ("auto", "merge", "factored")


class SyncError(RuntimeError):
    """The sampler's adapter is not the learner's (a weight sync did not happen)."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """The `lora` section resolved: the adapters, the base's storage, the sampler's mode."""

    lora: lora_lib.LoraConfig
    quantize: str
    block: int
    sampler: str  # merge | factored (auto resolved)


def from_config(section, config: ModelConfig) -> Settings | None:
    """`cfg.lora` checked against the model; None when `rank` is 0 (full fine-tuning)."""
    rank = int(section.rank)
    if rank == 0:
        return None
    if rank < 0:
        raise ValueError(f"lora.rank must be >= 0 (0 = no adapters), got {rank}")
    targets = tuple(t.strip() for t in str(section.targets).split(",") if t.strip())
    alpha = 2.0 * rank if section.alpha is None else float(section.alpha)
    lora = lora_lib.LoraConfig(rank=rank, alpha=alpha, targets=targets)
    if section.quantize not in QUANTIZE:
        raise ValueError(f"lora.quantize must be one of {QUANTIZE}, got {section.quantize!r}")
    if section.sampler not in SAMPLER:
        raise ValueError(f"lora.sampler must be one of {SAMPLER}, got {section.sampler!r}")
    block = int(section.block)
    if section.quantize != "none":
        specs = param_specs(config)["layers"]
        for name in lora_lib.TARGETS:
            shape = specs[name].shape
            try:
                quant.check_block(shape, lora_lib.quant_axis(name, len(shape)), block, name)
            except ValueError as e:
                raise ValueError(f"lora.block={block}: {e}") from None
    sampler = section.sampler
    if sampler == "auto":
        sampler = "merge" if section.quantize == "none" else "factored"
    return Settings(lora, section.quantize, block, sampler)


def _named(mesh, rules, spec: ParamSpec, shape, name: str) -> NamedSharding:
    return NamedSharding(mesh, sharding_lib.logical_to_spec(spec.axes, shape, mesh, rules, name))


def adapter_shardings(config: ModelConfig, lora: lora_lib.LoraConfig, mesh, rules) -> dict:
    """NamedShardings of the adapters: a and b follow their weight's logical axes, the
    rank dim whole."""
    specs = lora_lib.adapter_specs(config, lora)
    return jax.tree_util.tree_map_with_path(
        lambda path, s: _named(mesh, rules, s, s.shape, jax.tree_util.keystr(path)), specs,
        is_leaf=lambda x: isinstance(x, ParamSpec))


def base_shardings(config: ModelConfig, settings: Settings, mesh, rules) -> dict:
    """NamedShardings of the frozen base: a quantized weight's codes like the weight, its
    scales on the same logical axes (the blocked dim divided by the block)."""
    dense = sharding_lib.param_shardings(config, mesh, rules)
    if settings.quantize == "none":
        return dense
    abstract = abstract_base(config, settings)
    specs = param_specs(config)["layers"]
    layers = dict(dense["layers"])
    for name in lora_lib.TARGETS:
        q = abstract["layers"][name]
        layers[name] = quant.Quantized(
            layers[name], _named(mesh, rules, specs[name], q.scale.shape, f"{name}.scale"),
            q.kind, q.axis)
    return {**dense, "layers": layers}


def abstract_base(config: ModelConfig, settings: Settings) -> dict:
    """The frozen base's ShapeDtypeStructs (unplaced): quantized weights as `Quantized`."""
    params = param_shapes(config)
    if settings.quantize == "none":
        return params
    layers = dict(params["layers"])
    for name in lora_lib.TARGETS:
        shape = layers[name].shape
        layers[name] = quant.abstract(shape, settings.quantize, block=settings.block,
                                      axis=lora_lib.quant_axis(name, len(shape)))
    return {**params, "layers": layers}


def placed(shapes: Any, shardings: Any) -> Any:
    """ShapeDtypeStructs `shapes` with `shardings` (same structure)."""
    return jax.tree.map(lambda x, sh: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sh),
                        shapes, shardings)


def abstract_placed(settings: Settings, config: ModelConfig, mesh, rules) -> tuple[Any, Any]:
    """(the base, the adapters) as ShapeDtypeStructs placed on `mesh`, as `Frozen` and
    `Frozen.init` place them (no allocation: `launch.compile`, the memory plan)."""
    base = placed(abstract_base(config, settings), base_shardings(config, settings, mesh,
                                                                  rules))
    shapes = jax.eval_shape(functools.partial(lora_lib.init, config, settings.lora),
                            jax.random.key(0))
    return base, placed(shapes, adapter_shardings(config, settings.lora, mesh, rules))


def sampler_abstract(settings: Settings, config: ModelConfig, base: Any, adapters: Any,
                     mesh, rules) -> Any:
    """The sampler's params (`Frozen.for_sampler`) as placed ShapeDtypeStructs."""
    if settings.sampler == "factored":
        return lora_lib.attach(base, adapters, settings.lora)
    dense = jax.eval_shape(functools.partial(lora_lib.merge, config, lora=settings.lora),
                           base, adapters=adapters)
    return placed(dense, sharding_lib.param_shardings(config, mesh, rules))


class Frozen:
    """The frozen base on the mesh and what the trainer does with it (module doc)."""

    def __init__(self, settings: Settings, config: ModelConfig, params: Any, mesh, rules):
        self.settings, self.config, self.mesh, self.rules = settings, config, mesh, rules
        self.lora = settings.lora
        if settings.quantize == "none":
            self.base = params
        else:  # written straight into its shards; the dense params are freed by the caller
            self.base = jax.jit(
                functools.partial(lora_lib.quantize_base, config, kind=settings.quantize,
                                  block=settings.block),
                out_shardings=base_shardings(config, settings, mesh, rules))(params)
        # a resume rebuilds the base from the config: this checks it is the same one
        self.base_checksum = checkpoint.checksums(self.base)
        self.adapter_shardings = adapter_shardings(config, self.lora, mesh, rules)
        self._merges = {}  # mesh -> the jitted merge writing that mesh's dense params
        # one program for every checksum: the same adapters give the same bits
        self._checksum = jax.jit(lora_lib.checksum)

    def _merge(self, mesh):
        if mesh not in self._merges:
            self._merges[mesh] = jax.jit(
                functools.partial(lora_lib.merge, self.config, lora=self.lora),
                out_shardings=sharding_lib.param_shardings(self.config, mesh, self.rules))
        return self._merges[mesh]

    def on_mesh(self, mesh) -> tuple[Any, Any]:
        """(the base, the adapters' shardings) on another mesh (the asynchronous sampler's
        devices): the base copied there once by the caller, the adapters each version."""
        base = multihost.reshard(self.base, base_shardings(self.config, self.settings, mesh,
                                                           self.rules))
        return base, adapter_shardings(self.config, self.lora, mesh, self.rules)

    def init(self, rng: jax.Array) -> dict:
        """Fresh adapters (b = 0: the policy starts as the base), on the mesh."""
        return jax.jit(functools.partial(lora_lib.init, self.config, self.lora),
                       out_shardings=self.adapter_shardings)(rng)

    def policy(self, adapters: dict) -> dict:
        """The base with `adapters` attached (no copy)."""
        return lora_lib.attach(self.base, adapters, self.lora)

    def for_sampler(self, adapters: dict, base: Any = None,
                    mesh=None) -> tuple[dict, jax.Array]:
        """(the params the sampler runs, the checksum [] of the adapters they hold), from
        `adapters` over `base` (default the learner's) on `mesh` (default the learner's)."""
        base = self.base if base is None else base
        mark = self.mark(adapters)
        if self.settings.sampler == "merge":
            merge = self._merge(self.mesh if mesh is None else mesh)
            return merge(base, adapters=adapters), mark
        return lora_lib.attach(base, adapters, self.lora), mark

    def mark(self, adapters: dict) -> jax.Array:
        """`adapters`' checksum [] on the device (what a sampler copy is marked with)."""
        return self._checksum(adapters)

    def merged(self, adapters: dict) -> dict:
        """Plain params: the base dequantized plus every adapter (what an export holds)."""
        return self._merge(self.mesh)(self.base, adapters=adapters)

    def checksum(self, adapters: dict) -> float:
        """`adapters`' checksum (the one `for_sampler` marks its copies with)."""
        return float(self._checksum(adapters))

    def check_sync(self, sampler_mark, learner: float) -> dict[str, float]:
        """The sync check's metrics; SyncError unless the sampler's adapters (their
        `for_sampler` checksum) are the learner's of the same version (`learner`, their
        `checksum`), bit for bit."""
        theirs = float(sampler_mark)
        if learner != theirs:
            raise SyncError(f"the sampler ran an adapter with checksum {theirs!r}, the "
                            f"learner's is {learner!r}: its weights were not synced")
        return {"lora/adapter_checksum": learner, "lora/sampler_checksum": theirs}


class Copies:
    """The trainer's sampler copies (`Frozen.for_sampler`), each made once: one per
    TrainState for the synchronous sampler, one per published version for the
    asynchronous one (its own base and mesh), with the checksum of their adapters."""

    def __init__(self, frozen: Frozen):
        self.frozen = frozen
        self._sync = self._rollout = None  # (key, params, mark)
        self.sampled = None  # the mark of the synchronous sampler's last copy

    def sync(self, state: Any) -> Any:
        """The synchronous sampler's params for TrainState `state` (its adapters)."""
        if self._sync is None or self._sync[0] is not state:
            self._sync = (state,) + self.frozen.for_sampler(state.params)
        self.sampled = self._sync[2]
        return self._sync[1]

    def drop(self) -> None:
        """Frees the synchronous copy (a merged one is a whole model) before an update."""
        self._sync = None

    def rollout(self, adapters: Any, base: Any, mesh) -> tuple[Any, jax.Array]:
        """(params, mark) of a published version's `adapters` over the sampler's `base`."""
        if self._rollout is None or self._rollout[0] is not adapters:
            self._rollout = (adapters,) + self.frozen.for_sampler(adapters, base, mesh)
        return self._rollout[1:]

