"""TPU slices by name, for compiling without them: `v5e-16`, `v5p-8`, `v4-32`, `v6e-64`, or
JAX's own `v5e:4x4` / `v5p:2x2x4`.

    slice_ = topology.parse("v5e-16")       # ValueError listing the known names
    topology.quiet_libtpu(slice_)           # before libtpu loads: no probe of a real TPU
    devices = topology.devices(slice_)      # jax devices of every host of the slice

Names follow Cloud TPU's accelerator types: the number counts chips for v5e and v6e and
TensorCores for v4 and v5p (two per chip, one device per chip: megacore), so v5p-8 is 4
chips (2x2x1) and v5e-16 is 16 (4x4). The devices come from
`jax.experimental.topologies` (libtpu, the `tpu` extra): nothing is allocated and no TPU
is needed; a slice of several hosts gives all of their devices.
"""

from __future__ import annotations

import dataclasses
import math
import os

from jax.experimental import topologies

# generation -> (memory_plan accelerator, accelerator-type prefix, TensorCores per named
# unit, libtpu chip config, chips -> JAX topology)
_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16",
       256: "16x16"}
_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8",
       256: "4x8x8", 512: "8x8x8"}
GENERATIONS = {
    "v4": ("tpu-v4", "v4", 2, "megacore", _3D),
    "v5e": ("tpu-v5e", "v5litepod", 1, "default", _2D),
    "v5p": ("tpu-v5p", "v5p", 2, "default", _3D),
    "v6e": ("tpu-v6e", "v6e", 1, "default", _2D),
}


@dataclasses.dataclass(frozen=True)
class Slice:
    name: str          # as given
    generation: str    # v4 | v5e | v5p | v6e
    shape: str         # JAX's topology, e.g. 4x4
    chips: int

    @property
    def accelerator(self) -> str:
        """The `rl.train.memory_plan` accelerator name of one chip."""
        return GENERATIONS[self.generation][0]

    @property
    def accelerator_type(self) -> str:
        """Cloud TPU's accelerator type, e.g. v5litepod-16, v5p-8."""
        _, prefix, cores, _, _ = GENERATIONS[self.generation]
        return f"{prefix}-{self.chips * cores}"


def known_names() -> list[str]:
    """Every `gen-N` name `parse` takes (besides `gen:AxB[xC]`)."""
    return [f"{g}-{chips * spec[2]}" for g, spec in GENERATIONS.items() for chips in spec[4]]


def parse(name: str) -> Slice:
    """The slice `name` names; ValueError (one line, the known names) otherwise."""
    gen, sep, rest = name.partition(":") if ":" in name else name.partition("-")
    spec = GENERATIONS.get(gen)
    if spec is not None and sep == ":":
        dims = rest.split("x")
        if all(d.isdigit() and int(d) > 0 for d in dims) and rest in spec[4].values():
            return Slice(name, gen, rest, math.prod(int(d) for d in dims))
    elif spec is not None and rest.isdigit() and int(rest) % spec[2] == 0:
        chips = int(rest) // spec[2]
        if chips in spec[4]:
            return Slice(name, gen, spec[4][chips], chips)
    raise ValueError(f"unknown TPU topology {name!r}; known: {', '.join(known_names())} "
                     f"(or generation:shape, e.g. v5e:4x4, v5p:2x2x4)")


def quiet_libtpu(slice_: Slice) -> None:
    """Tells libtpu which slice this process describes, so that loading it probes no
    metadata server and logs no 'could not determine TPU accelerator type / worker
    hostnames' errors, and lets several compile-only processes load it at once (values
    the user set are kept). Call before libtpu loads."""
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", slice_.accelerator_type)
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    # no TPU is opened: other compile-only processes (test workers) may load it too
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def devices(slice_: Slice) -> list:
    """The slice's devices (every host's), in the order jax.devices() lists them."""
    _, _, _, chip_config, _ = GENERATIONS[slice_.generation]
    dims = [int(d) for d in slice_.shape.split("x")]
    # a slice smaller than libtpu's default host (2x2x1 chips: v5e-1) is one host of it
    small = {"chips_per_host_bounds": dims + [1] * (3 - len(dims))} if math.prod(dims) < 4 else {}
    topo = topologies.get_topology_desc(platform="tpu",
                                        topology_name=f"{slice_.generation}:{slice_.shape}",
                                        chip_config_name=chip_config, num_slices=1, **small)
    return sorted(topo.devices, key=lambda d: d.id)
