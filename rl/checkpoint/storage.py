"""What the persistent tier says when storage fails: its errors, the storage cause of a
failed write found in any exception chain, library errors on one line, the free space a
checkpoint needs, and Orbax's logging kept quiet (rl/checkpoint/persistent.py uses them;
launch/ maps `WriteError` and storage errors to one line and exit 1).
"""

from __future__ import annotations

import errno
import logging
import os
import shutil

from absl import flags

from models import paths


class CheckpointError(Exception):
    """No usable checkpoint where one was expected, or one this run cannot resume."""


class WriteError(CheckpointError):
    """A checkpoint could not be written (a full disk, a read-only or vanished directory):
    the run stops, with the cause on one line."""


# what a failed write's cause says when the storage is at fault
_STORAGE = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
            errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
            errno.EPERM: "operation not permitted", errno.ENOENT: "no such file or directory"}


def storage_problem(error: BaseException) -> str | None:
    """The storage cause anywhere in an exception's chain (an OSError's errno, or the text
    a C++ library such as TensorStore puts in its message), None when there is none."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in _STORAGE:
            return _STORAGE[error.errno]
        text = str(error).lower()
        for cause in _STORAGE.values():
            if cause in text:
                return cause
        error = error.__cause__ or error.__context__
    return None


def one_line(error: BaseException, limit: int = 160) -> str:
    """`Type: first line of the message`, cut at a word boundary to about `limit`
    characters (library errors span pages)."""
    lines = str(error).strip().splitlines()
    text = " ".join(lines[0].split()) if lines else ""
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " …"
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class _QuietOrbax(logging.Filter):
    """Drops Orbax's log records below CRITICAL: it logs every save and restore at INFO
    through absl, and a failed write at ERROR from each of its threads, with pages of
    tracebacks; a run prints its own lines, and a failed write surfaces as one
    `WriteError`. Other absl records pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.CRITICAL or "orbax" not in record.pathname


_FILTER = _QuietOrbax()
SPACE_MARGIN = 1.1, 1 << 18  # a checkpoint needs its arrays' bytes × 1.1 + 256 KiB free


def quiet_orbax() -> None:
    """Installs the filter above on absl's logger (once)."""
    logger = logging.getLogger("absl")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)


def free_bytes(directory: str) -> int | None:
    """Free bytes of the file system holding `directory` (None when unknown, and on
    object storage, which has no such limit to check: a bucket's quota is not free space)."""
    if paths.is_remote(directory):
        return None
    path = directory
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        return shutil.disk_usage(path or ".").free
    except OSError:
        return None


def size_text(n: int) -> str:
    """`n` bytes as MiB or GiB, for messages."""
    return f"{n / 2**20:.1f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"


def orbax_coordination_barriers() -> None:
    """Orbax's barriers through JAX's coordination service instead of a collective over
    every device. With two threads running programs on two sets of devices (asynchronous
    rollouts on a sampler mesh of their own), a checkpoint's all-device collective in one
    thread could meet the other thread's programs in another order in each process."""
    flags.FLAGS["experimental_orbax_use_distributed_barrier"].value = True
