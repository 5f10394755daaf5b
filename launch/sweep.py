r"""Ablation sweeps: `python -m launch.sweep --config=configs/paper/<x>.py[:arg] --workdir=DIR`.

    python -m launch.sweep --config=configs/paper/losses.py:tiny --workdir=runs/losses
    python -m launch.sweep --config=configs/paper/losses.py:tiny --workdir=runs/losses --parallel=2
    python -m launch.sweep --config=configs/paper/losses.py:tiny --workdir=runs/losses --dry_run

The config file's `get_sweep(arg)` lists the runs (rl/sweeps.py: a name, a
group, config overrides; seeds are one more axis). Each run is
`python -m launch.train --config=FILE[:arg] --workdir=DIR/runs/<name>
--config.<key>=<value> ...` in its own process, its output in
DIR/runs/<name>/train.log; `--parallel N` runs N at a time. A finished run
(DIR/runs/<name>/DONE) is skipped, an interrupted one resumes from its
checkpoints, so rerunning the same command after a crash or Ctrl-C reruns
only what is unfinished. At the end (and after each finished run) the
summary is rewritten: DIR/results.md (mean ± std over each group's runs),
DIR/results.csv, DIR/timing.md and DIR/curves.png (rl/sweeps.py).
`--dry_run` prints one launch command per unfinished run, for a cluster
scheduler, and runs nothing. Exit status: 0 when every run finished, 1 when
some failed (their logs are named), 2 for a bad flag or sweep file.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

from absl import app, flags

from launch.common import load_config_file
from models import extras
from rl import sweeps
from rl.train import logs

_CONFIG = flags.DEFINE_string("config", None, "Sweep file `path.py[:arg]` defining "
                              "get_config(arg) and get_sweep(arg).", required=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep directory (created): runs/<name>/ "
                               "per run, results.md/.csv, timing.md, curves.png.",
                               required=True)
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at a time.", lower_bound=1)
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Print one launch command per unfinished run "
                             "and run nothing.")
_TARGET = flags.DEFINE_float("target", None, "Held-out accuracy target for the 'steps / "
                             "tokens / wall time to target' columns (default: the sweep "
                             "file's TARGET, else 0.5).")
_STATUS_EVERY = 30.0  # seconds between progress lines while runs are going


def command(path: str, arg: str, workdir: str, run: dict) -> list[str]:
    """The launch.train command line of one run."""
    spec = f"{path}:{arg}" if arg else path
    return [sys.executable, "-m", "launch.train", f"--config={spec}",
            f"--workdir={sweeps.run_dir(workdir, run)}",
            *[f"--config.{k}={sweeps.flag_value(v)}" for k, v in sweeps.overrides(run).items()]]


def done(workdir: str, run: dict) -> bool:
    return os.path.exists(os.path.join(sweeps.run_dir(workdir, run), "DONE"))


def progress(workdir: str, run: dict) -> str:
    """`name step k` from the run's metrics.jsonl (its last logged step)."""
    path = os.path.join(sweeps.run_dir(workdir, run), "metrics.jsonl")
    try:
        steps = [r["step"] for r in logs.metric_records(logs.read(path))]
    except (OSError, ValueError, KeyError):
        steps = []
    return f"{run['name']} step {steps[-1] if steps else 0}"


class Pool:
    """Up to `size` launch.train processes; SIGINT / SIGTERM stop them (each checkpoints)."""

    def __init__(self, size: int):
        self.size, self.running = size, {}  # name -> (Popen, run, log file, start)

    def start(self, cmd: list[str], run: dict, log_path: str) -> None:
        log = open(log_path, "a")  # noqa: SIM115 - closed when the process ends
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.running[run["name"]] = (proc, run, log, time.perf_counter())

    def finished(self) -> list[tuple[dict, int, float]]:
        out = []
        for name, (proc, run, log, start) in list(self.running.items()):
            if proc.poll() is not None:
                log.close()
                del self.running[name]
                out.append((run, proc.returncode, time.perf_counter() - start))
        return out

    def stop(self, signum: int) -> None:
        for proc, *_ in self.running.values():
            if proc.poll() is None:
                proc.send_signal(signum)
        for proc, _, log, _ in self.running.values():
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()


def main(argv):
    del argv

    try:
        sweep = sweeps.load(_CONFIG.value)
        path, arg, runs = sweep.path, sweep.arg, sweep.runs
        sweeps.check_keys(load_config_file(_CONFIG.value), runs)
        if not _DRY_RUN.value:
            extras.require("matplotlib", "plots", "the sweep's curves.png")
    except Exception as e:  # noqa: BLE001 - any failure of the user's sweep file
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(2)
    workdir = _WORKDIR.value
    target = sweep.target if _TARGET.value is None else _TARGET.value
    todo = [run for run in runs if not done(workdir, run)]
    if _DRY_RUN.value:
        for run in todo:
            print(shlex.join(command(path, arg, workdir, run)))
        return
    os.makedirs(os.path.join(workdir, "runs"), exist_ok=True)
    print(f"sweep {_CONFIG.value}: {len(runs)} runs, {len(runs) - len(todo)} finished "
          f"(skipped), {len(todo)} to run, {_PARALLEL.value} at a time; logs in "
          f"{os.path.join(workdir, 'runs', '<name>', 'train.log')}", flush=True)
    pool, failed, queue, finished = Pool(_PARALLEL.value), [], list(todo), 0

    def summarize() -> list[str]:
        return sweeps.summarize(workdir, runs, target=target, title=_CONFIG.value,
                                metrics=sweep.metrics)
    last_status = time.perf_counter()

    def stop(signum, frame):
        del frame
        print(f"\nstopping: {signal.Signals(signum).name}; the running runs checkpoint "
              "(rerun the same command to resume)", file=sys.stderr, flush=True)
        pool.stop(signal.SIGTERM)
        sys.exit(130 if signum == signal.SIGINT else 143)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while queue or pool.running:
        while queue and len(pool.running) < pool.size:
            run = queue.pop(0)
            directory = sweeps.run_dir(workdir, run)
            os.makedirs(directory, exist_ok=True)
            pool.start(command(path, arg, workdir, run), run,
                       os.path.join(directory, "train.log"))
            print(f"[{finished + len(pool.running)}/{len(todo)}] {run['name']}: started",
                  flush=True)
        for run, code, seconds in pool.finished():
            finished += 1
            log = os.path.join(sweeps.run_dir(workdir, run), "train.log")
            if code == 0:
                open(os.path.join(sweeps.run_dir(workdir, run), "DONE"), "w").close()
                print(f"[{finished}/{len(todo)}] {run['name']}: done in {seconds:.0f}s",
                      flush=True)
                summarize()
            else:
                failed.append(run["name"])
                print(f"[{finished}/{len(todo)}] {run['name']}: FAILED (exit {code}); see "
                      f"{log}", flush=True)
        if pool.running and time.perf_counter() - last_status >= _STATUS_EVERY:
            last_status = time.perf_counter()
            print("  running: " + ", ".join(progress(workdir, r) for _, r, *_ in
                                            pool.running.values()), flush=True)
        time.sleep(0.2)
    written = summarize()
    print(f"wrote {', '.join(written)}")
    if failed:
        print(f"error: {len(failed)} run(s) failed: {', '.join(failed)} (logs: "
              f"{os.path.join(workdir, 'runs', '<name>', 'train.log')}); rerun to retry them",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
