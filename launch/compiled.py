r"""What XLA allocated for a step compiled for a TPU slice, kept on file for `launch.plan`.

    python -m launch.compile --config=... --topology=v5e-16 --save=gs://b/plans/7b.json
    python -m launch.plan --config=... --compiled=gs://b/plans/7b.json

`launch.compile --save=FILE` writes each program's figures (`Figures`) with the slice, the
prompt length compiled for and the config's settings that shape the programs (`SECTIONS`).
`launch.plan --compiled=FILE` reads them: the terms XLA decides by its own choices (which
buffers share memory, which live in the TensorCore's VMEM, how the KV pages are tiled)
come from the file (`phases`); the state (params, optimizer, reference), which the planner
computes within 1% of XLA's, stays planned. A file compiled from other settings is refused
in one line naming them (`check`). Files go through `models.paths` (local or gs://, s3://).
"""

from __future__ import annotations

import dataclasses
import json

from models import paths
from rl.train import memory_plan

# the config sections the compiled programs depend on; checkpoint, eval, fault, seed, sft
# and the caches change nothing XLA allocates
SECTIONS = ("data", "mesh", "model", "optim", "rl", "rollout", "sampling", "train")
VERSION = 1


@dataclasses.dataclass
class Figures:
    """One compiled program's figures per device (XLA's memory and cost analyses)."""

    arguments: int
    outputs: int
    aliased: int
    temps: int
    flops: float
    bytes_accessed: float

    @property
    def total(self) -> int:
        return self.arguments + self.outputs - self.aliased + self.temps

    @classmethod
    def of(cls, compiled) -> Figures:
        m, cost = compiled.memory_analysis(), compiled.cost_analysis() or {}
        return cls(m.argument_size_in_bytes, m.output_size_in_bytes, m.alias_size_in_bytes,
                   m.temp_size_in_bytes, float(cost.get("flops", 0.0)),
                   float(cost.get("bytes accessed", 0.0)))

    def bound(self, accelerator: str) -> float:
        """Seconds: max(FLOPs / peak, bytes / HBM bandwidth) of one chip."""
        peak, bandwidth = memory_plan.PEAKS[accelerator]
        return max(self.flops / peak, self.bytes_accessed / bandwidth)


@dataclasses.dataclass
class Saved:
    """A `launch.compile --save` file: the slice, its chip (`memory_plan` name), its
    devices, the prompt length compiled for, the settings and {program: Figures, or
    XLA's refusal (str)}."""

    slice: str
    accelerator: str
    devices: int
    prompt_len: int
    settings: dict[str, str]
    programs: dict


def settings(cfg) -> dict[str, str]:
    """{"model.dtype": '"bfloat16"', ...}: every value of `SECTIONS` (JSON text)."""
    out = {}

    def walk(prefix: str, node) -> None:
        for key, value in node.items():
            if hasattr(value, "items"):
                walk(f"{prefix}{key}.", value)
            else:
                out[prefix + key] = json.dumps(value, sort_keys=True, default=str)

    resolved = cfg.copy_and_resolve_references()
    for section in SECTIONS:
        walk(f"{section}.", resolved[section])
    return out


def save(path: str, cfg, slice_, devices: int, prompt_len: int, programs: dict) -> Saved:
    """Writes the `Saved` it returns as JSON to `path` (atomically: a reader never sees
    half of it), creating its folder."""
    if paths.dirname(path):
        paths.makedirs(paths.dirname(path))
    saved = Saved(slice_.name, slice_.accelerator, devices, prompt_len, settings(cfg),
                  dict(programs))
    body = dict(version=VERSION, **dataclasses.asdict(saved))  # Figures become dicts
    paths.write_text(path, json.dumps(body, indent=1), atomic=True)
    return saved


def load(path: str) -> Saved:
    """The `Saved` of a `launch.compile --save` file; ValueError (one line) when there is
    none or it is not one."""
    if not paths.isfile(path):
        raise ValueError(f"--compiled={path}: no such file (write one with launch.compile "
                         "--save)")
    try:
        body = json.loads(paths.read_text(path))
        if body.pop("version") != VERSION:
            raise ValueError("another version")
        body["programs"] = {k: v if isinstance(v, str) else Figures(**v)
                            for k, v in body["programs"].items()}
        return Saved(**body)
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"--compiled={path} is not a launch.compile --save file "
                         f"(version {VERSION}): {e}") from None


def check(saved: Saved, cfg, path: str) -> None:
    """ValueError naming the settings where `cfg` differs from what `saved` compiled."""
    mine = settings(cfg)
    keys = sorted(k for k in mine.keys() | saved.settings.keys()
                  if mine.get(k) != saved.settings.get(k))
    if keys:
        shown = ", ".join(f"{k}={mine.get(k, '(unset)')} (compiled: "
                          f"{saved.settings.get(k, '(unset)')})" for k in keys[:4])
        more = f" and {len(keys) - 4} more" if len(keys) > 4 else ""
        raise ValueError(f"--compiled={path} was compiled from other settings: {shown}{more}; "
                         "compile this config again with launch.compile --save")


def phases(saved: Saved, path: str) -> dict[str, int]:
    """{`memory_plan.COMPILED` term: bytes} from the programs' figures: the KV pool is the
    decode's donated pages (its aliased bytes), decode, prefill and learner their
    programs' temporaries (the update's for the learner). ValueError when XLA refused
    one of them."""
    refused = [k for k, v in saved.programs.items() if isinstance(v, str)]
    if refused:
        raise ValueError(f"--compiled={path}: XLA refused {', '.join(refused)} on "
                         f"{saved.slice}: {saved.programs[refused[0]]}")
    p = saved.programs
    return {"kv_pool": p["decode"].aliased, "decode": p["decode"].temps,
            "prefill": p["prefill"].temps, "learner": p["update"].temps}
