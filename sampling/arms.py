"""Several LoRA adapters in one sampler call (`sampling.generate(..., arms=)`): which
adapter each batch row runs, and which random numbers each arm's samples draw.

An arm's samples draw the numbers a call of its own would draw: sample j of an arm
takes draw j (`local_ids`), of the arm's own key when the call has keys [K]
(`processors.sample`), so batching arms changes no arm's tokens.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

from models import lora
from sampling import processors
from sampling import shards as shards_lib


def rows_of(params: dict, arms: np.ndarray | None) -> dict:
    """`params` whose stacked LoRA adapters run `arms[i]` on batch row i (`arms` given)."""
    return params if arms is None else lora.select(params, arms)


def check(arms, num_prompts: int) -> np.ndarray:
    """`arms` as int32 [num_prompts]; ValueError in one line unless ints >= 0."""
    arms = np.asarray(arms)
    if arms.shape != (num_prompts,) or not np.issubdtype(arms.dtype, np.integer) or (
            arms.size and arms.min() < 0):
        raise ValueError(f"arms must be [{num_prompts}] ints >= 0 (one per prompt), got "
                         f"shape {arms.shape} {arms.dtype}")
    return arms.astype(np.int32)


def keyed(rng, arms) -> bool:
    """Whether `rng` is keys [K], one per arm (then every arm must be < K: ValueError)."""
    if not processors.stacked(rng):
        return False
    if arms is None or np.max(arms, initial=0) >= rng.shape[0]:
        raise ValueError(f"rng of shape {rng.shape} (keys, one per arm) needs arms in "
                         f"[0, {rng.shape[0]}): one key per adapter")
    return True


def local_ids(sample_arm: np.ndarray) -> np.ndarray:
    """[samples] each sample's index among its arm's samples (the draw it makes alone)."""
    local = np.zeros(len(sample_arm), np.int32)
    for arm in np.unique(sample_arm):
        which = np.flatnonzero(sample_arm == arm)
        local[which] = np.arange(len(which))
    return local


def with_arms(prefill: Callable, decode: Callable, rows: shards_lib.Placement, layout,
              sample_source: np.ndarray, sample_arm: np.ndarray, keyed: bool = False):
    """`prefill` and `decode` given each prefill row's and each device row's arm, and
    `rows` drawing each sample's number among its arm's (`run_groups`' `arms`); `keyed`
    (keys [K], one per arm): `processors.sample`'s ids count arm · rows + that number."""
    prefill_arm = np.zeros(len(layout.tables), np.int32)
    prefill_arm[layout.rows[sample_source]] = sample_arm
    row_arm = np.zeros(rows.rows, np.int32)
    row_arm[rows.place] = sample_arm
    return (functools.partial(prefill, arms=prefill_arm), functools.partial(decode, arms=row_arm),
            dataclasses.replace(rows, local=local_ids(sample_arm)
                                + (sample_arm * rows.rows if keyed else 0)))
