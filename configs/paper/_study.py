"""What the paper sweeps share: the demo's task and model, the schedule, the seeds, and
arms written as the config keys they change.

Every study starts from `configs/demo.py` (the `tiny` policy after its supervised
warm start, two-number countdown, 16 prompts × 8 samples a step). The argument:
  tiny   100 RL steps, held-out eval every 20: minutes per run on a 2-core CPU
  (none) the demo's 300 steps, eval every 25
and, after a comma, `lora`: RL on rank-16 adapters over the frozen warm start, as
`configs/demo.py:lora` sets them, with the sampler applying them factored (the one
form `launch.sweep --shared_base` can batch, so both ways run the same arithmetic):
`losses.py:tiny,lora`.
An arm is a dict of config overrides (`variant(name)`: exactly the keys an algorithm
variant of configs/variants.py changes), so `launch.sweep --dry_run` prints complete
commands. Each arm runs once per seed in SEEDS.
"""

from __future__ import annotations

from typing import Any

import configs
from configs import demo, variants

SEEDS = (0, 1, 2)
SCHEDULES = {"tiny": {"train.steps": 100, "train.eval_every": 20},
             "": {"train.steps": 300, "train.eval_every": 25}}
# held-out greedy accuracy: the warm start reaches 0.22-0.45 depending on the seed, the
# demo's 300-step run 0.67
TARGET = 0.5


def schedule(arg: str | None) -> tuple[str, bool]:
    """(the schedule, LoRA or not) of a study's argument `tiny`, `tiny,lora`, `lora` or
    none; ValueError names a bad one."""
    tokens = [t for t in (arg or "").split(",") if t]
    lora = "lora" in tokens
    rest = [t for t in tokens if t != "lora"]
    name = rest[0] if len(rest) == 1 else ""
    if len(rest) > 1 or name not in SCHEDULES or tokens.count("lora") > 1:
        raise ValueError(f"unknown argument {arg!r}: use :tiny (CPU minutes per run) or "
                         "none, optionally with ,lora")
    return name, lora


def get_config(arg: str | None = None):
    """The demo config on the study's schedule (`tiny` or the demo's own), with LoRA
    after `,lora`."""
    name, lora = schedule(arg)
    cfg = demo.get_config("lora" if lora else None)
    if lora:
        cfg.lora.sampler = "factored"
    for key, value in SCHEDULES[name].items():
        section, name = key.split(".")
        cfg[section][name] = value
    cfg.train.plot = False  # the sweep plots every run's curves together
    cfg.train.tensorboard = False
    return cfg


def flat(config, prefix: str = "") -> dict[str, Any]:
    """{"a.b.c": value} for every leaf of a ConfigDict."""
    out = {}
    for key, value in config.items():
        if hasattr(value, "items"):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def changes(before, after) -> dict[str, Any]:
    """The keys whose values differ between two configs (as `after` has them)."""
    a, b = flat(before), flat(after)
    return {k: v for k, v in b.items() if a.get(k) != v}


def variant(name: str, base=None) -> dict[str, Any]:
    """The overrides that turn the demo config into algorithm variant `name`."""
    base = base if base is not None else demo.get_config()
    return changes(base, variants.apply(base.copy_and_resolve_references(), name))


def runs(arms: list[dict]) -> list[dict]:
    """Each arm once per seed (configs.with_seeds)."""
    return configs.with_seeds(arms, SEEDS)
