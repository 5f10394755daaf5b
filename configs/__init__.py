"""ml_collections config files; `get_config(arg)` in each returns a ConfigDict, and a
sweep file's `get_sweep(arg)` the list of its runs (rl/sweeps).

Config files are data: they import ml_collections and each other, no project code."""

import importlib.util
from collections.abc import Iterable, Mapping, Sequence
from types import ModuleType
from typing import Any


def import_file(path: str, name: str = "_config_file") -> ModuleType:
    """The Python file at `path` imported as a module (config and sweep files are
    named by path, not by package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def with_seeds(arms: Iterable[Mapping[str, Any]], seeds: Sequence[int]) -> list[dict]:
    """A sweep's runs: one per (arm, seed), named `<arm>-s<seed>`, grouped by arm, with
    the override `seed` (an arm is {"name": ..., "<config key>": value, ...})."""
    return [{**arm, "name": f"{arm['name']}-s{seed}", "group": arm["name"], "seed": seed}
            for arm in arms for seed in seeds]
