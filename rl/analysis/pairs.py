"""Policies to compare, and teacher-forced scoring of sampled rows under a pair.

    base = load_policy("/ckpt/Qwen2.5-0.5B")            # a Hugging Face directory
    rl = load_policy("runs/demo", step=300)              # a training workdir's checkpoint
    scored = score_rows(base, rl, prompts, rollouts)     # Scored: [R, W] stats + masks
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import models
from models import paths
from models.config import ModelConfig
from rl.analysis.scoring import FIELDS, ScoreOptions, check_pair, score_pair
from rl.analysis.summary import completion_mask
from rl.train import build

WIDTH_MULTIPLE = 64  # packed rows are padded to a multiple of this (fewer compiles)


@dataclasses.dataclass
class Policy:
    """A model to compare: its name in reports, architecture, parameters and the
    directory its tokenizer is read from."""

    name: str
    config: ModelConfig
    params: Any
    tokenizer_dir: str
    step: int | None = None  # the checkpoint step, for a training workdir's checkpoint


def load_policy(path: str, step: int | None = None, *, name: str = "",
                dtype=None) -> Policy:
    """A policy from a Hugging Face directory, or a training workdir: its Orbax
    checkpoint (the newest usable, or `step`) when it has `checkpoints/`, else its
    `final/` export. Its config computes in fp32 (stored weights keep their dtype
    and are cast at use). `path` may be a gs:// / s3:// URI (models.paths): Orbax
    reads a checkpoint from the bucket, a Hugging Face directory is read through the
    local cache (`models.paths.cached`: one download per bucket listing, reused), where
    its tokenizer is read from. Raises FileNotFoundError / CheckpointError with one
    line."""

    dtype = dtype or jnp.float32
    if not paths.isdir(path):
        raise FileNotFoundError(f"{path} is not a directory")
    orbax = build.checkpoint_dir(path)
    if orbax:
        cfg = build.config_from_checkpoint(orbax, step)
        run = build.resolve(cfg, None)
        step, params = build.checkpoint_params(run, orbax, step)
        return Policy(name or f"{_short(path)}@{step}", _fp32(run.model_config), params,
                      run.tokenizer_dir, step)
    if step is not None:
        raise FileNotFoundError(f"a step was given but {path} has no checkpoints/")
    if paths.isdir(paths.join(path, "final")):
        path = paths.join(path, "final")
    if not paths.isfile(paths.join(path, "config.json")):
        raise FileNotFoundError(f"{path} has no config.json (expected a Hugging Face directory "
                                "or a training workdir with checkpoints/ or final/)")
    local = paths.cached(path)
    config, params = models.load_pretrained(local, dtype)
    return Policy(name or _short(path), _fp32(config), params, local)


def _fp32(config: ModelConfig) -> ModelConfig:
    """The architecture computing in fp32 whatever its run used: two models compared
    in different precisions would show rounding noise as Δlog p and JS."""
    return config.replace(dtype="float32")


def _short(path: str) -> str:
    """A report name for a directory: its last two path components (`demo/sft`)."""
    if paths.is_remote(path):
        return "/".join(path.rstrip("/").split("/")[-2:])
    parts = os.path.normpath(os.path.abspath(path)).split(os.sep)
    return "/".join(parts[-2:])


@dataclasses.dataclass
class Scored:
    """Teacher-forced statistics of R packed rows (prompt + completion, right-padded).

    stats: FIELDS -> fp32 [R, W] (entry t is about token t); tokens [R, W];
    prompt_lens, lengths [R]; mask [R, W] marks the completion tokens.
    """

    stats: dict[str, np.ndarray]
    tokens: np.ndarray
    prompt_lens: np.ndarray
    lengths: np.ndarray

    @property
    def mask(self) -> np.ndarray:
        return completion_mask(self.prompt_lens, self.lengths, self.tokens.shape[1])


def pack(prompts, completions) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rows prompt + completion, right-padded with 0 to a multiple of WIDTH_MULTIPLE:
    (tokens [R, W], segment_ids [R, W], prompt_lens [R], lengths [R])."""
    if len(prompts) != len(completions) or not prompts:
        raise ValueError(f"need as many prompts as completions (>0), got {len(prompts)} and "
                         f"{len(completions)}")
    rows = [list(p) + list(c) for p, c in zip(prompts, completions, strict=True)]
    width = WIDTH_MULTIPLE * -(-max(map(len, rows)) // WIDTH_MULTIPLE)
    tokens = np.zeros((len(rows), width), np.int32)
    for i, row in enumerate(rows):
        tokens[i, :len(row)] = row
    lens = np.array([len(r) for r in rows])
    segment_ids = (np.arange(width)[None] < lens[:, None]).astype(np.int32)
    return (tokens, segment_ids, np.array([len(p) for p in prompts], np.int32),
            np.array([len(c) for c in completions], np.int32))


def score_rows(base: Policy, other: Policy, prompts, completions, *,
               options: ScoreOptions = ScoreOptions(), batch_rows: int = 8) -> Scored:
    """`score_pair(base, other)` of each prompt + completion row, `batch_rows` rows
    per call (the last batch padded with empty rows, so one program serves all)."""
    check_pair(base.config, other.config)
    tokens, segs, prompt_lens, lengths = pack(prompts, completions)
    r = tokens.shape[0]
    batch = min(batch_rows, r)
    out = {name: [] for name in FIELDS}
    for start in range(0, r, batch):
        t = np.zeros((batch, tokens.shape[1]), np.int32)
        s = np.zeros_like(t)
        end = min(start + batch, r)
        t[:end - start], s[:end - start] = tokens[start:end], segs[start:end]
        s[end - start:, 0] = 1  # an empty row still attends to something (no NaN)
        stats = jax.device_get(score_pair(base.config, base.params, other.config,
                                          other.params, t, s, options))
        for name in FIELDS:
            out[name].append(np.asarray(stats[name])[:end - start])
    return Scored({k: np.concatenate(v) for k, v in out.items()}, tokens, prompt_lens, lengths)
