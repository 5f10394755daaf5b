"""Sampling parameters: one frozen, hashable dataclass.

`SamplingParams` is passed to jitted sampling functions as a static argument,
so every field is a hashable Python scalar or tuple and changing a field
compiles a new program. Only the filters that are switched on are compiled in.
"""

from __future__ import annotations

import dataclasses
import math
import numbers


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How one batch of rows is sampled.

    Filters are applied in this order to the fp32 logits of each row, and the
    token is drawn from the renormalised result (see `sampling.processors`):

    Attributes:
      temperature: logits are divided by it. 0.0 means greedy (argmax of the raw
        logits; the other filters are then irrelevant). Must be finite, >= 0.
      top_k: keep only the k largest logits (ties at the k-th value are all
        kept). 0 switches it off; a value >= the vocab size is also a no-op.
      top_p: nucleus filter: keep the smallest set of highest-probability tokens
        whose cumulative probability reaches top_p (always at least the top
        token), on the temperature-scaled, top-k-filtered distribution. 1.0
        switches it off. Must satisfy 0 < top_p <= 1.
      min_p: keep tokens with p >= min_p * p_max on the distribution after the
        previous filters. 0.0 switches it off. Must satisfy 0 <= min_p < 1.
      max_new_tokens: the most tokens generated per row (>= 1).
      stop_token_ids: a row stops after it samples one of these. The engine adds
        the model's eos ids itself; these are extra ones. A list is converted
        to a tuple; ids must be non-negative ints.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    max_new_tokens: int = 64
    stop_token_ids: tuple[int, ...] = ()

    def __post_init__(self):
        t = self.temperature
        if not _is_real(t) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {t!r}")
        if not _is_int(self.top_k) or self.top_k < 0:
            raise ValueError(f"top_k must be an int >= 0 (0 = off), got {self.top_k!r}")
        p = self.top_p
        if not _is_real(p) or not math.isfinite(p) or not 0.0 < p <= 1.0:
            raise ValueError(f"top_p must satisfy 0 < top_p <= 1 (1.0 = off), got {p!r}")
        m = self.min_p
        if not _is_real(m) or not math.isfinite(m) or not 0.0 <= m < 1.0:
            raise ValueError(f"min_p must satisfy 0 <= min_p < 1 (0.0 = off), got {m!r}")
        n = self.max_new_tokens
        if not _is_int(n) or n < 1:
            raise ValueError(f"max_new_tokens must be an int >= 1, got {n!r}")
        stops = self.stop_token_ids
        if isinstance(stops, (str, bytes)) or not hasattr(stops, "__iter__"):
            raise ValueError(
                f"stop_token_ids must be a tuple or list of ints, got {stops!r}")
        stops = tuple(stops)
        for s in stops:
            if not _is_int(s) or s < 0:
                raise ValueError(f"stop_token_ids must be non-negative ints, got {s!r}")
        # Normalise to plain Python types so equal params hash equally.
        object.__setattr__(self, "temperature", float(t))
        object.__setattr__(self, "top_k", int(self.top_k))
        object.__setattr__(self, "top_p", float(p))
        object.__setattr__(self, "min_p", float(m))
        object.__setattr__(self, "max_new_tokens", int(n))
        object.__setattr__(self, "stop_token_ids", tuple(int(s) for s in stops))

    @property
    def greedy(self) -> bool:
        """True when temperature is 0: tokens are the argmax of the raw logits."""
        return self.temperature == 0.0
