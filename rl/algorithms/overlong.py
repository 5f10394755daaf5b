"""DAPO's overlong reward shaping: a soft length penalty and the truncation filter.

    penalty = overlong.penalty(lengths, max_len=L_max, buffer=L_cache, factor=1.0)

Soft overlong punishment (DAPO; verl's `DAPORewardManager`, `overlong_buffer`):
a completion longer than L_max - L_cache loses reward linearly over the last
L_cache tokens, reaching -factor at L_max:

    penalty(L) = min(-(L - (L_max - L_cache)) / L_cache · factor, 0)

It is added to the verifier's reward; correctness (accuracy, pass@k, the
dynamic-sampling filter) is unchanged. Overlong filtering (DAPO's ablation):
completions cut at the length limit are left out of the loss (their rows'
gradient mask is 0) but still count in their group's advantage statistics.
Config: `rl.overlong.buffer` (L_cache tokens, 0 = off), `.factor`, `.filter`.
"""

from __future__ import annotations

import numpy as np


def check(buffer: int, factor: float, max_len: int) -> None:
    """ValueError (one line) for settings that cannot work with completions of `max_len`."""
    if buffer < 0 or buffer >= max_len:
        raise ValueError(f"rl.overlong.buffer must be in [0, {max_len}) (the completion length "
                         f"limit), got {buffer}")
    if not factor >= 0:
        raise ValueError(f"rl.overlong.factor must be >= 0, got {factor}")


def penalty(lengths, *, max_len: int, buffer: int, factor: float = 1.0) -> np.ndarray:
    """[N] float32 penalty (<= 0) for completions of `lengths` [N] tokens."""
    lengths = np.asarray(lengths, np.float64)
    if buffer <= 0:
        return np.zeros(lengths.shape, np.float32)
    exceed = lengths - (max_len - buffer)
    return np.minimum(-exceed / buffer * factor, 0.0).astype(np.float32)
