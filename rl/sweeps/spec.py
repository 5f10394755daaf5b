"""A sweep file and its runs: loaded, checked, and turned into launch.train commands.

A sweep file is a config file (`get_config(arg)`) that also defines
`get_sweep(arg) -> list[dict]`: one dict per run, with

    "name"   a short unique name (letters, digits, `_ . -`): the run's directory;
    "group"  the arm it belongs to (default: its name); runs of one group are
             aggregated (mean ± std), e.g. the seeds of one method;
    any other key: a config override, "rl.loss.name": "ppo", "seed": 1, ...

`configs.with_seeds(arms, seeds)` expands arms into one run per seed (name
`<arm>-s<seed>`, group `<arm>`, override `seed`). It may also set `TARGET` (the
held-out accuracy the "to target" columns count to, 0.5 when unset) and `METRICS`, a
tuple of training-metric keys of metrics.jsonl (rl.sweeps.results).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import configs
from models import paths

NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
RESERVED = ("name", "group")


class SweepError(ValueError):
    """A sweep file or its runs are malformed (one-line message)."""


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A loaded sweep file: its runs (checked), its `TARGET` held-out accuracy (0.5
    when it sets none) and its `METRICS` (none when it sets none)."""
    path: str
    arg: str
    runs: list[dict]
    target: float
    metrics: tuple[str, ...] = ()


def load(spec: str) -> Sweep:
    """The sweep of `path.py[:arg]`: its `get_sweep(arg)`, TARGET and METRICS, checked."""
    path, _, arg = spec.partition(":")
    if not os.path.exists(path):
        raise SweepError(f"sweep file {path} does not exist")
    module = configs.import_file(path, "_sweep_config")
    if not hasattr(module, "get_sweep"):
        raise SweepError(f"{path} defines no get_sweep(arg): it is a config, not a sweep")
    runs = module.get_sweep(arg) if arg else module.get_sweep()
    metrics = getattr(module, "METRICS", ())
    if (isinstance(metrics, str) or not isinstance(metrics, Sequence)
            or not all(isinstance(m, str) and m for m in metrics)):
        raise SweepError(f"{path}: METRICS must be a tuple of metric names, got {metrics!r}")
    return Sweep(path, arg, check(runs, path), float(getattr(module, "TARGET", 0.5)),
                 tuple(metrics))


def check(runs: Any, where: str = "the sweep") -> list[dict]:
    """The runs, each with a name and a group; raises SweepError naming the first
    problem (no runs, a missing or repeated or unsafe name, a non-string key)."""
    if not isinstance(runs, list) or not runs:
        raise SweepError(f"{where}: get_sweep must return a non-empty list of dicts")
    seen: set[str] = set()
    out = []
    for i, run in enumerate(runs):
        if not isinstance(run, Mapping) or not isinstance(run.get("name"), str):
            raise SweepError(f"{where}: run {i} is not a dict with a string 'name'")
        name = run["name"]
        if not NAME.match(name):
            raise SweepError(f"{where}: run name {name!r} may only hold letters, digits, _ . -")
        if name in seen:
            raise SweepError(f"{where}: two runs are named {name!r}")
        seen.add(name)
        bad = [k for k in run if not isinstance(k, str) or not k]
        if bad:
            raise SweepError(f"{where}: run {name!r} has a key that is not a config path: {bad}")
        out.append({**run, "group": str(run.get("group", name))})
    return out


def check_keys(config, runs: list[dict]) -> None:
    """Raises SweepError naming the first run whose override names no config key."""
    for run in runs:
        for key in overrides(run):
            node = config
            for i, part in enumerate(key.split(".")):
                keys = list(node.keys()) if hasattr(node, "keys") else []
                if part not in keys:
                    where = ".".join(key.split(".")[:i]) or "the config"
                    raise SweepError(f"run {run['name']!r}: config key {key!r} does not exist "
                                     f"({where} has: {', '.join(sorted(keys)) or 'no keys'})")
                node = node[part]


def overrides(run: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in run.items() if k not in RESERVED}


# what every run of a sweep gets unless it overrides it (launch.sweep's docstring)
SHARED_WARM_STARTS = "warm_starts"
RUN_DEFAULTS = {"checkpoint.keep": 1}
# the keys only the learner reads: runs that differ in nothing else share one frozen base
# and one sampler batch under `launch.sweep --shared_base` (rl.train.arms)
ARM_KEYS = ("rl.", "optim.", "train.minibatches", "train.epochs", "train.dynamic_sampling",
            "train.dynamic_max_rounds", "train.old_logp")


def settings(workdir: str, run: Mapping[str, Any]) -> dict[str, Any]:
    """Every config override of `run` in sweep `workdir`: the sweep's defaults (a shared
    warm start, one kept checkpoint), then the run's own."""
    return {**RUN_DEFAULTS, "sft.shared_dir": paths.join(workdir, SHARED_WARM_STARTS),
            **overrides(run)}


def is_arm_key(key: str) -> bool:
    """Whether config key `key` is one only the learner reads (`ARM_KEYS`)."""
    return any(key == k or (k.endswith(".") and key.startswith(k)) for k in ARM_KEYS)


def shared_base_groups(runs: Sequence[Mapping[str, Any]]) -> list[list[dict]]:
    """The runs split into groups that differ only in `ARM_KEYS` (same model, seed, data,
    warm start, sampler: one frozen base), in the order their first runs come."""
    out: dict[tuple, list[dict]] = {}
    for run in runs:
        key = tuple(sorted((k, repr(v)) for k, v in overrides(run).items()
                           if not is_arm_key(k)))
        out.setdefault(key, []).append(dict(run))
    return list(out.values())


def flag_value(value: Any) -> str:
    """A config override's value as `--config.key=VALUE` text that ml_collections parses
    back to the same value."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def run_dir(workdir: str, run: Mapping[str, Any]) -> str:
    """DIR/runs/<name> (a folder, or a URI in a bucket: models.paths)."""
    return paths.join(workdir, "runs", run["name"])
