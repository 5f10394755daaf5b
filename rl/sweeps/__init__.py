"""Ablation sweeps: a sweep file's runs (rl.sweeps.spec) and their results tables and
curves (rl.sweeps.results); `launch.sweep` runs them."""

from rl.sweeps.results import (
    DETERMINISTIC,
    SWEEP_WALL_FILE,
    TIMING,
    WALL_FILE,
    add_wall,
    plot_curves,
    read_wall,
    run_numbers,
    summarize,
)
from rl.sweeps.spec import (
    ARM_KEYS,
    RUN_DEFAULTS,
    SHARED_WARM_STARTS,
    Sweep,
    SweepError,
    check,
    check_keys,
    flag_value,
    is_arm_key,
    load,
    overrides,
    run_dir,
    settings,
    shared_base_groups,
)

__all__ = ["ARM_KEYS", "DETERMINISTIC", "RUN_DEFAULTS", "SHARED_WARM_STARTS", "SWEEP_WALL_FILE", "Sweep", "SweepError", "TIMING", "WALL_FILE",
           "add_wall", "check", "check_keys", "flag_value", "is_arm_key", "load", "overrides", "plot_curves",
           "read_wall", "run_dir", "run_numbers", "settings", "shared_base_groups", "summarize"]
