"""The workdir an entry point writes in: checked writable before any compute (local or
object storage), and emptied of a previous run's outputs for `--fresh`."""

from __future__ import annotations

import os
import socket

from models import extras, paths

# What a run writes in its workdir: `--fresh` deletes these (and nothing else).
RUN_OUTPUTS = ("checkpoints", "sft_checkpoints", "metrics.jsonl", "sft_metrics.jsonl",
               "tensorboard", "sft", "exports", "final", "progress.png")


def start_fresh(workdir: str) -> list[str]:
    """Deletes a previous run's outputs in `workdir` (`RUN_OUTPUTS`); returns them."""
    removed = []
    for name in RUN_OUTPUTS:
        path = paths.join(workdir, name)
        if paths.isdir(path):
            paths.rmtree(path)
        elif paths.exists(path):
            paths.remove(path)
        else:
            continue
        removed.append(name)
    return removed


def check_writable(workdir: str, flag: str = "--workdir") -> None:
    """ValueError (one line, naming `flag`) when `workdir` is not a directory this process
    can create and write files in: a local path, or a gs:// / s3:// URI (a missing bucket,
    no credentials or a missing client package fail here, before any compute)."""
    if paths.is_remote(workdir):
        _check_remote(workdir, flag)
        return
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise ValueError(f"{flag} {workdir} exists and is not a directory")
    probe = os.path.join(workdir, f".write_test.{os.getpid()}")
    try:
        os.makedirs(workdir, exist_ok=True)
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as e:
        raise ValueError(f"cannot write in {flag} {workdir}: {e.strerror or e}") from None


def _check_remote(workdir: str, flag: str) -> None:
    """`check_writable` of an object-storage URI: writes, reads back and deletes a probe."""
    if len(workdir.rstrip("/")) <= len("gs://") or paths.isfile(workdir):
        raise ValueError(f"{flag} {workdir} is not a folder in a bucket "
                         "(expected gs://BUCKET/PATH or s3://BUCKET/PATH)")
    probe = paths.join(workdir, f".write_test.{socket.gethostname()}.{os.getpid()}")
    try:
        paths.write_text(probe, "ok")
        if paths.read_text(probe) != "ok":
            raise OSError("what was written does not read back")
        paths.remove(probe)
    except extras.MissingExtra:
        raise
    except Exception as e:  # noqa: BLE001 - each client raises its own kinds
        cause = " ".join(str(e).split())[:200] or type(e).__name__
        raise ValueError(f"cannot write in {flag} {workdir}: {type(e).__name__}: "
                         f"{cause}") from None
