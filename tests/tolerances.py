"""Tolerances for tests that compare two fp32 computations of the same values.

Two fp32 programs that compute the same sums in different orders (another
shape or layout, fusion, sharding, chunking, packing, another CPU's vector
width or thread count) agree up to rounding only, and the rounding differs
from machine to machine. A sum of n fp32 terms of magnitude <= M is within
about n·eps·M of the exact value whatever the order (the standard
worst-case bound on recursive summation), so two orders differ by at most
2·n·eps·M. The tests take M = max|reference| (the terms of a logit, a hidden
state or a gradient element are of that size) and n = the longest
reduction the values pass through. The disagreement measured on x86 CPUs is
~10·eps·M; a real bug (a wrong mask, position, layout or missing shard) is
off by orders of magnitude more.
"""

from __future__ import annotations

import numpy as np

F32_EPS = float(np.finfo(np.float32).eps)


def fp32_atol(reference, n: int) -> float:
    """2·n·eps·max|reference|: the gap allowed between two summation orders of
    `reference` whose longest reduction adds `n` terms."""
    return 2 * n * F32_EPS * float(np.max(np.abs(np.asarray(reference, np.float64))))
