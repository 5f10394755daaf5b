"""Run logs: `metrics.jsonl`, TensorBoard event files, a console progress line, a PNG plot.

    log = RunLog(workdir, total_steps)
    log.start_over()                              # or log.rewind(N): resume after step N
    log.write(step, {"reward/mean": 0.4, ...})   # one JSON object per call
    log.event(step, "rollback", cause="...")      # a non-metric line (metrics.jsonl only)
    log.close()
    plot(workdir)                                 # workdir/progress.png

Keys under `time/` and `perf/` are wall-clock measurements; everything else
is a pure function of the config and seed (`TIMING_PREFIXES`), which the
determinism test relies on. TensorBoard files are written with
`tensorboard.summary.Writer`, which needs no TensorFlow.

With several processes (JAX's multi-controller runtime) only process 0
writes files and the console; the others keep their records in memory.

A workdir on object storage (gs://, s3://: models/paths.py) cannot be appended to:
the files are written in a local folder and uploaded whole after each write (two
objects per step: metrics.jsonl and the event file, each as long as the run so far).

Resuming (`rewind(step)`): metrics.jsonl keeps its lines up to `step` (and
its event lines) and drops the rest; the TensorBoard directory is rewritten from those lines, so
TensorBoard never sees a step twice or out of order.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping

from models import extras, multihost, paths

TIMING_PREFIXES = ("time/", "perf/")
CONSOLE_KEYS = (("reward/mean", "reward"), ("accuracy", "acc"), ("heldout/accuracy", "heldout"),
                ("kl", "kl"), ("entropy", "ent"), ("response_length/mean", "len"),
                ("time/step", "s/step"))


def _number(value) -> float | int | None:
    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    value = float(value)
    return value if math.isfinite(value) else None


class RunLog:
    """Appends step metrics to DIR/metrics.jsonl and DIR/tensorboard, prints progress
    (in process 0; `primary` False keeps the records in memory and writes nothing)."""

    def __init__(self, workdir: str, total_steps: int, *, tensorboard: bool = True,
                 stream=None, name: str = "train", every: int = 1,
                 primary: bool | None = None):
        self.primary = multihost.is_primary() if primary is None else primary
        self.memory: list[dict] | None = None if self.primary else []
        if not self.primary:
            tensorboard = False
        paths.makedirs(workdir)
        self.summary = None
        if tensorboard:  # first, so a missing package fails before any file is opened
            self.summary = extras.require("tensorboard.summary", "tensorboard",
                                          "TensorBoard logging")
        self.tb_dir = paths.join(workdir, "tensorboard", name)
        self.path = paths.join(workdir, "metrics.jsonl" if name == "train"
                               else f"{name}_metrics.jsonl")
        # where the files are written: here, or (object storage) a local folder made by
        # rewind() and uploaded after each write
        self.remote, self.stage = self.primary and paths.is_remote(workdir), None
        self.local_path, self.local_tb = (None, None) if self.remote else (self.path,
                                                                           self.tb_dir)
        self.file = self.writer = None  # opened by rewind() (or the first write)
        self.total, self.name, self.every = total_steps, name, every
        self.stream = stream or sys.stdout
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.perf_counter()

    def rewind(self, step: int) -> None:
        """Reopens the logs for appending after step `step`: keeps the lines of steps
        <= `step` (the held-out eval before training is step 0) and every event line
        (rollbacks stay on record), and drops the rest; `rewind(-1)` (`start_over`)
        empties them for a fresh run."""
        self._close_files()
        kept = [r for r in self.records() if r["step"] <= step or "event" in r]
        if self.memory is not None:
            self.memory = kept
            return
        if self.remote and self.stage is None:
            self.stage = tempfile.mkdtemp(prefix="runlog.")
            self.local_path = os.path.join(self.stage, "metrics.jsonl")
            self.local_tb = os.path.join(self.stage, "tensorboard")
        with open(self.local_path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in kept)
        self.file = open(self.local_path, "a")  # noqa: SIM115 - open for the run
        if self.summary is not None:
            shutil.rmtree(self.local_tb, ignore_errors=True)
            if self.remote:
                paths.rmtree(self.tb_dir)  # the new writer starts a new event file
            self.writer = self.summary.Writer(self.local_tb)
            for record in kept:
                self._scalars(record)
            self.writer.flush()
        self._upload()

    def _upload(self) -> None:
        """On object storage: the local files replace the stored ones."""
        if not self.remote:
            return
        paths.copy_file(self.local_path, self.path)
        if self.writer is not None:
            paths.upload(self.local_tb, self.tb_dir)

    def start_over(self) -> None:
        self.rewind(-1)

    def records(self) -> list[dict]:
        """The lines of metrics.jsonl so far (metrics and events)."""
        if self.memory is not None:
            return list(self.memory)
        if self.local_path is not None and os.path.exists(self.local_path):
            return read(self.local_path)
        return read(self.path) if paths.exists(self.path) else []

    def record(self, step: int) -> dict:
        """The metrics logged for `step`, without the "step" key ({} when none)."""
        found = [r for r in metric_records(self.records()) if r["step"] == step]
        return {k: v for k, v in found[-1].items() if k != "step"} if found else {}

    def _scalars(self, record: Mapping[str, object]) -> None:
        if "event" in record:
            return
        for key, value in record.items():
            if key != "step" and value is not None:
                self.writer.add_scalar(key, value, step=int(record["step"]))

    def write(self, step: int, metrics: Mapping[str, object], *, console: bool = True) -> None:
        if self.file is None and self.memory is None:
            self.start_over()
        record = {"step": int(step)}
        for key, value in sorted(metrics.items()):
            record[key] = _number(value)
        if self.memory is not None:
            self.memory.append(record)
            return
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.writer is not None:
            self._scalars(record)
            self.writer.flush()
        self._upload()
        if console and (step % self.every == 0 or step == self.total):
            self.progress(step, record)

    def progress(self, step: int, record: Mapping[str, object]) -> None:
        done = step / max(self.total, 1)
        width = 20
        bar = "#" * int(done * width) + "." * (width - int(done * width))
        elapsed = time.perf_counter() - self.start
        eta = elapsed / max(step, 1) * (self.total - step)
        parts = [f"{self.name} {step}/{self.total} [{bar}]"]
        for key, short in CONSOLE_KEYS:
            if record.get(key) is not None:
                parts.append(f"{short} {record[key]:.3g}")
        parts.append(f"elapsed {elapsed:.0f}s eta {eta:.0f}s")
        line = "  ".join(parts)
        if self.tty:
            self.stream.write("\r" + line + ("\n" if step == self.total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def event(self, step: int, kind: str, **fields) -> None:
        """A non-metric line `{"step", "event": kind, ...}` in metrics.jsonl (not in
        TensorBoard, whose steps must only go forward)."""
        if self.file is None and self.memory is None:
            self.start_over()
        line = {"step": int(step), "event": kind, **fields}
        if self.memory is not None:
            self.memory.append(line)
            return
        self.file.write(json.dumps(line) + "\n")
        self.file.flush()
        self._upload()

    def _close_files(self) -> None:
        if self.file is not None:
            self.file.close()
        if self.writer is not None:
            self.writer.close()
        self.file = self.writer = None

    def close(self) -> None:
        self._close_files()
        if self.stage is not None:
            shutil.rmtree(self.stage, ignore_errors=True)
            self.stage = self.local_path = self.local_tb = None


def read(path: str) -> list[dict]:
    with paths.open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def strip_timing(records: list[dict]) -> list[dict]:
    """Records without the wall-clock keys (for comparing two runs)."""
    return [{k: v for k, v in r.items() if not k.startswith(TIMING_PREFIXES)} for r in records]


def metric_records(records: list[dict]) -> list[dict]:
    """The step metrics among metrics.jsonl lines (events, e.g. rollbacks, left out)."""
    return [r for r in records if "event" not in r]


def plot(workdir: str, out: str | None = None, *, title: str = "") -> str:
    """PNG of training reward and held-out accuracy per step from DIR/metrics.jsonl."""
    matplotlib = extras.require("matplotlib", "plots", "the progress plot (rl.train.logs.plot)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read(paths.join(workdir, "metrics.jsonl"))
    out = out or paths.join(workdir, "progress.png")
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    for key, label, style in (("reward/mean", "train reward (mean)", "-"),
                              ("heldout/accuracy", "held-out accuracy (greedy)", "o-")):
        points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
        if points:
            xs, ys = zip(*points)
            ax.plot(xs, ys, style, label=label)
    ax.set_xlabel("RL step")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    ax.set_title(title or paths.basename(paths.absolute(workdir)))
    fig.tight_layout()
    with tempfile.TemporaryDirectory() as tmp:  # savefig writes local files only
        local = out if not paths.is_remote(out) else os.path.join(tmp, "plot.png")
        fig.savefig(local)
        if local != out:
            paths.copy_file(local, out)
    plt.close(fig)
    return out
