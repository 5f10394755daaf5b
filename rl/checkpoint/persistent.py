"""The persistent tier: a run's full state in Orbax checkpoints, resumed exactly.

    ckpts = Checkpoints(os.path.join(workdir, "checkpoints"), config=cfg, keep=3)
    ckpts.save(step, state, host)                 # asynchronous: returns after the copy
    found = ckpts.restore_latest(template)        # (step, state, host) or None
    ckpts.close()                                 # waits for the last write

A checkpoint is one Orbax step directory with these items:
  params  the policy's parameters (alone, so `launch.export` / `launch.evaluate`
          read only them);
  state   every other array of the job: optimizer state, update counter and
          every PRNG stream (typed keys are stored as their key data);
  host_arrays  the NumPy arrays of the host-side state (a task selector's
          per-task posteriors: two float64 per task of the train pool, 16 MB for a
          million tasks), as arrays, not JSON; absent when it has none;
  meta    JSON: the step, the config a resume must match (`config`: the run's,
          or the SFT warm start's fingerprint), the run's full config
          (`run_config`, for `launch.export`), the rest of the host-side state (the
          data iterator's position, dynamic-sampling counters, skipped batches;
          each host array replaced by {"__array__": key}) and a checksum of each
          array (`checksums`).
Orbax writes into a temporary directory and renames it when complete, so a
process killed mid-write leaves no step that looks complete. A step whose
files fail to load, or whose arrays do not match their checksums, is
damaged: `restore_latest` warns, names it and falls back to the one before
(deleting the damaged ones once a usable step is found: the resumed run
writes those steps again); with none usable it raises `CheckpointError` and
deletes nothing (never a silent fresh start).

`differences(stored, current)` names the config keys that forbid a resume:
everything but `RESUMABLE` (steps, logging, eval cadence, the mesh, the
checkpoint and fault sections).
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from models import paths
from rl.checkpoint.storage import (
    SPACE_MARGIN,
    CheckpointError,
    WriteError,
    free_bytes,
    one_line,
    quiet_orbax,
    size_text,
    storage_problem,
)
from rl.checkpoint.trees import (  # noqa: F401  (re-exported: the format's pieces)
    ARRAY_KEY,
    abstract,
    checksums,
    host_checksums,
    join_host,
    split_host,
    storable,
    unstorable,
)

FORMAT = 2  # 2: host arrays in their own item (format 1 had none)
# Orbax is not safe for several CheckpointManagers writing at once from threads of one
# process: concurrent saves (one per arm of `rl.train.arms`) collided on their temporary
# directories and timed out in its futures. Every manager call holds this lock, and in
# `serial_writes` mode every save also finishes before the lock is released.
_ORBAX = threading.RLock()
_SERIAL = {"on": False}


def serial_writes() -> None:
    """From now on, this process's checkpoints are written one at a time, each save
    complete on disk when it returns (the arms of one process, `rl.train.arms`)."""
    _SERIAL["on"] = True

READABLE_FORMATS = (1, 2)
TMP_MARKER = ".orbax-checkpoint-tmp"
COMMIT_MARKER = "commit_success.txt"  # a finished step on object storage (no renames there)
# Keys a resumed run may change. Everything else (model, algorithm, data, sampling,
# optimizer, seed, ...) must equal the checkpoint's.
RESUMABLE = ("train.steps", "train.log_every", "train.eval_every", "train.export_every",
             "train.tensorboard", "train.plot", "eval.batch_prompts", "sft.steps",
             "sft.eval_every", "sft.shared_dir", "mesh.", "checkpoint.", "fault.",
             "compilation_cache",
             "rl.reference.offload", "cpu_xla_flags")


# -- configs ----------------------------------------------------------------------------------
def config_dict(cfg) -> dict:
    """The JSON form of a config (as stored in a checkpoint's meta)."""
    raw = cfg.to_dict() if hasattr(cfg, "to_dict") else cfg
    return json.loads(json.dumps(raw, default=str))


def _flatten(tree: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def differences(stored: dict, current: dict) -> list[str]:
    """`key: stored -> current` for each non-resumable key whose value differs."""
    a, b = _flatten(stored), _flatten(current)
    out = []
    for key in sorted(set(a) | set(b)):
        if key.startswith(RESUMABLE) or key in RESUMABLE:
            continue
        if a.get(key, "<absent>") != b.get(key, "<absent>"):
            out.append(f"{key}: {a.get(key, '<absent>')!r} -> {b.get(key, '<absent>')!r}")
    return out


# -- the manager ------------------------------------------------------------------------------
class Checkpoints:
    """Orbax `CheckpointManager` over DIR with the items params / state / meta."""

    def __init__(self, directory: str, *, config=None, run_config=None, keep: int = 3,
                 asynchronous: bool = True, stream=None, read_only: bool = False):
        quiet_orbax()
        self.ocp, self.directory = ocp, paths.absolute(directory)
        self.config = config_dict(config) if config is not None else None
        self.run_config = config_dict(run_config) if run_config is not None else self.config
        self.stream = stream or sys.stderr
        self.incomplete = incomplete_steps(self.directory)  # before Orbax cleans them up
        with _ORBAX:
            self.manager = ocp.CheckpointManager(
                self.directory, item_names=("params", "state", "host_arrays", "meta"),
                options=ocp.CheckpointManagerOptions(
                    max_to_keep=keep,
                    enable_async_checkpointing=asynchronous and not _SERIAL["on"],
                    create=not read_only, read_only=read_only,
                    cleanup_tmp_directories=not read_only))
        self.last_save_blocking_s = 0.0

    def steps(self) -> list[int]:
        with _ORBAX:
            return sorted(self.manager.all_steps())

    def path(self, step: int) -> str:
        return paths.join(self.directory, str(step))

    def save(self, step: int, state: Any, host: dict, *, wait: bool = False) -> None:
        """Writes `state` (a pytree with a "params" entry) and `host` (JSON values and
        NumPy arrays) as step `step`; returns once the arrays are copied (the write goes
        on in the background) or, with `wait`, once it is on disk."""
        start = time.perf_counter()
        state = storable(state)
        rest = {k: v for k, v in state.items() if k != "params"}
        skeleton, arrays = split_host(host)
        self.check_space(step, state, arrays)
        meta = {"format": FORMAT, "step": int(step), "config": self.config,
                "run_config": self.run_config, "host": skeleton,
                "checksums": {"params": checksums(state["params"]), "state": checksums(rest),
                              "host_arrays": host_checksums(arrays)}}
        args = self.ocp.args
        items = {"params": args.StandardSave(state["params"]), "state": args.StandardSave(rest),
                 "meta": args.JsonSave(meta)}
        if arrays:  # Orbax refuses an empty item
            items["host_arrays"] = args.StandardSave(arrays)
        with self._writing(f"step {step}"), _ORBAX:
            self.manager.save(step, force=True, args=args.Composite(**items))
            if wait or _SERIAL["on"]:
                self.manager.wait_until_finished()
        self.last_save_blocking_s = time.perf_counter() - start

    def check_space(self, step: int, state: Any, arrays: dict[str, np.ndarray]) -> None:
        """WriteError before writing when the disk lacks room for this process's part of
        the checkpoint (a write that runs out of space fails in Orbax's background
        threads, later and less clearly). Storage whose free space is unknown passes."""
        need = sum(sum(s.data.nbytes for s in x.addressable_shards)
                   for x in jax.tree.leaves(state)) + sum(a.nbytes for a in arrays.values())
        need = int(need * SPACE_MARGIN[0]) + SPACE_MARGIN[1]
        free = free_bytes(self.directory)
        if free is not None and free < need:
            raise WriteError(
                f"cannot write checkpoint step {step} in {self.directory}: it needs about "
                f"{size_text(need)} and the disk has {size_text(free)} free (older checkpoints are "
                "deleted only once a new one is complete: checkpoint.keep counts them)")

    @contextlib.contextmanager
    def _writing(self, what: str):
        """Turns a failed write (here, or an asynchronous one that surfaces here) into a
        one-line `WriteError` naming the directory and the cause."""
        try:
            yield
        except CheckpointError:
            raise
        except Exception as e:  # noqa: BLE001 - Orbax and TensorStore raise many kinds
            cause = storage_problem(e) or one_line(e)
            free = free_bytes(self.directory)
            raise WriteError(f"cannot write checkpoint {what} in {self.directory}: {cause}"
                             + (f" ({size_text(free)} free)" if free is not None else "")) from e

    def meta(self, step: int) -> dict:
        with _ORBAX:
            return self.manager.restore(step, args=self.ocp.args.Composite(
                meta=self.ocp.args.JsonRestore()))["meta"]

    def latest_meta(self) -> dict | None:
        """The meta of the newest step whose meta reads (no arrays are loaded)."""
        for step in reversed(self.steps()):
            try:
                return self.meta(step)
            except Exception:  # noqa: BLE001 - a damaged step; restore_latest names it
                continue
        return None

    def restore(self, step: int, template: Any) -> tuple[Any, dict]:
        """(state, host) of step `step`, placed like `template` (a pytree with a
        "params" entry); raises when the files are damaged or fail their checksums."""
        meta = self.meta(step)
        if meta.get("format") not in READABLE_FORMATS:
            raise CheckpointError(f"unknown checkpoint format {meta.get('format')!r}")
        target = abstract(template)
        rest = {k: v for k, v in target.items() if k != "params"}
        args = self.ocp.args
        sums = meta["checksums"]
        items = {"params": args.StandardRestore(target["params"]),
                 "state": args.StandardRestore(rest)}
        if sums.get("host_arrays"):
            items["host_arrays"] = args.StandardRestore()
        with _ORBAX:
            out = self.manager.restore(step, args=args.Composite(**items))
        arrays = {k: np.asarray(v) for k, v in dict(out.get("host_arrays") or {}).items()}
        if (checksums(out["params"]) != sums["params"]
                or checksums(dict(out["state"])) != sums["state"]
                or host_checksums(arrays) != sums.get("host_arrays", {})):
            raise CheckpointError("arrays do not match their checksums")
        state = unstorable({"params": out["params"], **dict(out["state"])}, template)
        return state, join_host(meta["host"], arrays)

    def restore_latest(self, template: Any) -> tuple[int, Any, dict] | None:
        """The newest usable step as (step, state, host); None when there is no
        checkpoint. Damaged steps are skipped with a warning; CheckpointError when
        every step is damaged."""
        for name in self.incomplete:
            self.warn(f"checkpoint {name} is incomplete (the process stopped while writing "
                      "it): skipped")
        steps = self.steps()
        damaged = []
        for step in reversed(steps):
            try:
                state, host = self.restore(step, template)
            except Exception as e:  # noqa: BLE001 - any failure to read a step = damaged
                damaged.append(step)
                reason = one_line(e)
                older = [s for s in steps if s < step]
                self.warn(f"checkpoint {self.path(step)} is damaged ({reason}); "
                          + (f"trying step {older[-1]}" if older else "no older checkpoint"))
                continue
            for bad in damaged:  # the run will write these steps again
                with _ORBAX:
                    self.manager.delete(bad)
                self.warn(f"deleted the damaged checkpoint {self.path(bad)}")
            return step, state, host
        if damaged:
            raise CheckpointError(
                f"no usable checkpoint in {self.directory}: step(s) "
                f"{', '.join(map(str, sorted(damaged)))} are damaged. Pass --fresh to start "
                "over (this deletes them)")
        return None

    def warn(self, text: str) -> None:
        print(f"warning: {text}", file=self.stream, flush=True)

    def wait(self) -> None:
        with self._writing("(background write)"), _ORBAX:
            self.manager.wait_until_finished()

    def close(self) -> None:
        try:
            with self._writing("(background write)"), _ORBAX:
                self.manager.wait_until_finished()
        finally:
            with _ORBAX:
                self.manager.close()


def incomplete_steps(directory: str) -> list[str]:
    """Step directories Orbax left unfinished (a process killed mid-write): temporary
    ones, or on object storage steps without their commit marker."""
    if not paths.isdir(directory):
        return []
    names = paths.listdir(directory)
    if paths.is_remote(directory):
        return sorted(paths.join(directory, n) for n in names if n.isdigit()
                      and not paths.exists(paths.join(directory, n, COMMIT_MARKER)))
    return sorted(paths.join(directory, n) for n in names if TMP_MARKER in n)


def check_resume(directory: str, cfg) -> dict | None:
    """Before any compute: the newest readable checkpoint's meta in `directory`
    (None when there is none), after checking that `cfg` may resume it (raises
    CheckpointError naming every differing key)."""
    if not paths.isdir(directory):
        return None
    ckpts = Checkpoints(directory, config=cfg, asynchronous=False, read_only=True)
    try:
        if not ckpts.steps():
            return None
        meta = ckpts.latest_meta()
    finally:
        ckpts.manager.close()
    if meta is None:
        return {"step": None}  # every step is damaged: restore_latest reports it
    diff = differences(meta["config"], config_dict(cfg))
    if diff:
        raise CheckpointError(
            f"cannot resume from {directory} (step {meta['step']}): the config differs in "
            f"{'; '.join(diff)}. Use the checkpoint's config (DIR/config.json) or pass "
            "--fresh to start over")
    return meta


def stored_steps(directory: str) -> list[int]:
    """The steps of the checkpoints in `directory`, ascending (none are read)."""
    if not paths.isdir(directory):
        raise CheckpointError(f"checkpoint directory {directory} does not exist")
    ckpts = Checkpoints(directory, asynchronous=False, read_only=True)
    try:
        return ckpts.steps()
    finally:
        ckpts.manager.close()


def restore_params(directory: str, template: Any, step: int | None = None) -> tuple[int, Any]:
    """(step, params) from a checkpoint directory (the newest usable step when `step` is
    None), placed like `template` (the policy's params, or their ShapeDtypeStructs)."""
    if not paths.isdir(directory):
        raise CheckpointError(f"checkpoint directory {directory} does not exist")
    ckpts = Checkpoints(directory, asynchronous=False, read_only=True)
    try:
        steps = ckpts.steps()
        if not steps:
            raise CheckpointError(f"no checkpoint in {directory}")
        if step is not None and step not in steps:
            raise CheckpointError(f"no checkpoint of step {step} in {directory} (steps: "
                                  f"{', '.join(map(str, steps))})")
        target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                             sharding=x.sharding), template)
        args = ckpts.ocp.args
        for candidate in ([step] if step is not None else list(reversed(steps))):
            try:
                out = ckpts.manager.restore(candidate, args=args.Composite(
                    params=args.StandardRestore(target), meta=args.JsonRestore()))
                if checksums(out["params"]) != out["meta"]["checksums"]["params"]:
                    raise CheckpointError("arrays do not match their checksums")
                return candidate, out["params"]
            except Exception as e:  # noqa: BLE001
                if step is not None:
                    raise CheckpointError(f"checkpoint {ckpts.path(candidate)} is damaged "
                                          f"({type(e).__name__}: {e})") from None
                ckpts.warn(f"checkpoint {ckpts.path(candidate)} is damaged: skipped")
        raise CheckpointError(f"no usable checkpoint in {directory}")
    finally:
        ckpts.manager.close()


def stored_config(directory: str, step: int | None = None) -> dict:
    """The run's full config dict stored with a checkpoint (the newest readable one by
    default)."""
    if not paths.isdir(directory):
        raise CheckpointError(f"checkpoint directory {directory} does not exist")
    ckpts = Checkpoints(directory, asynchronous=False, read_only=True)
    try:
        meta = ckpts.meta(step) if step is not None else ckpts.latest_meta()
    finally:
        ckpts.manager.close()
    if meta is None:
        raise CheckpointError(f"no readable checkpoint in {directory}")
    return meta["run_config"]

