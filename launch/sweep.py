r"""Ablation sweeps: `python -m launch.sweep --config=configs/paper/<x>.py[:arg] --workdir=DIR`.

    python -m launch.sweep --config=configs/paper/losses.py:tiny --workdir=runs/losses
    python -m launch.sweep --config=configs/paper/losses.py:tiny --workdir=runs/losses --parallel=2
    python -m launch.sweep --config=configs/paper/losses.py:tiny --workdir=runs/losses --dry_run
    python -m launch.sweep --config=configs/paper/losses.py:tiny,lora --workdir=runs/l --shared_base

The config file's `get_sweep(arg)` lists the runs (rl/sweeps/spec.py: a name, a
group, config overrides; seeds are one more axis). Each run is
`python -m launch.train --config=FILE[:arg] --workdir=DIR/runs/<name>
--config.<key>=<value> ...` in its own process, its output in
DIR/runs/<name>/train.log; `--parallel N` runs N at a time. A finished run
(DIR/runs/<name>/DONE) is skipped, an interrupted one resumes from its
checkpoints, so rerunning the same command after a crash or Ctrl-C reruns
only what is unfinished.

`--shared_base` (LoRA sweeps): the unfinished runs that differ only in what the learner
reads (`rl.sweeps.ARM_KEYS`: loss, advantage, optimizer, dynamic sampling, minibatches)
form a group, run as one `python -m launch.arms` process: N adapters over one frozen
base, every sampler call serving all of them in one batch, each run still in its own
DIR/runs/<name> with its own checkpoints (rl/train/arms.py; results equal the separate
runs' to floating-point tolerance). A group's own output is DIR/groups/<group>.log
(in --staging for a bucket); each run's wall time is its group's.

What a sweep costs: runs with the same supervised warm start (same model, data, sft
settings and seed) share one, trained once in DIR/warm_starts
(`sft.shared_dir`), and each run keeps only its newest checkpoint, the one a resume
needs (`checkpoint.keep=1`); a run's own overrides of either win. The wall time of
each run's processes and of the sweep itself is measured (DIR/runs/<name>/wall.json,
DIR/sweep_wall.json) and reported in DIR/timing.md.

At the end (and after each finished run) the summary is rewritten: DIR/results.md
(mean ± std over each group's runs), DIR/results.csv, DIR/timing.md and
DIR/curves.png (rl/sweeps/results.py). `--dry_run` prints one launch command per
unfinished run, for a cluster scheduler, with the paths as given on the command line
and `python` as the interpreter, and runs nothing.

The workdir may be a bucket (`--workdir=gs://BUCKET/sweep`, or s3://): every run's
directory, the shared warm starts, the DONE markers, wall times and the summary live
there (models/paths.py), so a rerun on any machine resumes from the bucket. What
needs this machine's file system stays local, in `--staging` (default: a temporary
folder): each run's train.log is its process's stdout, appended to a local file while
it runs and uploaded to DIR/runs/<name>/train.log when it ends (a rerun downloads it
first and appends); the shared warm start's file lock is in the temporary folder
(rl/train/sft.py `lock_path`). Exit status: 0 when every run
finished, 1 when some failed (their logs are named), 2 for a bad flag or sweep file.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

from absl import app, flags

from launch.common import load_config_file
from launch.workdir import check_writable
from models import extras, paths
from rl import sweeps
from rl.train import logs

_CONFIG = flags.DEFINE_string("config", None, "Sweep file `path.py[:arg]` defining "
                              "get_config(arg) and get_sweep(arg).", required=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Sweep directory (created): runs/<name>/ "
                               "per run, warm_starts/, results.md/.csv, timing.md, "
                               "curves.png.", required=True)
_STAGING = flags.DEFINE_string("staging", None, "With a gs:// / s3:// --workdir: the local "
                               "folder of the runs' train.log while they run (uploaded to "
                               "the bucket as each ends); default: a temporary folder.")
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Runs at a time.", lower_bound=1)
_DRY_RUN = flags.DEFINE_bool("dry_run", False, "Print one launch command per unfinished run "
                             "and run nothing.")
_SHARED_BASE = flags.DEFINE_bool(
    "shared_base", False, "LoRA sweeps: runs that differ only in the learner's keys "
    "(rl.sweeps.ARM_KEYS: loss, advantage, optimizer, dynamic sampling, minibatches) run "
    "in one process per group (launch.arms), as adapters over one frozen base whose "
    "sampler serves every arm in one batch.")
_TARGET = flags.DEFINE_float("target", None, "Held-out accuracy target for the 'steps / "
                             "tokens / wall time to target' columns (default: the sweep "
                             "file's TARGET, else 0.5).")
_STATUS_EVERY = 30.0  # seconds between progress lines while runs are going


def command(path: str, arg: str, workdir: str, run: dict,
            python: str = sys.executable) -> list[str]:
    """The launch.train command line of one run."""
    spec = f"{path}:{arg}" if arg else path
    return [python, "-m", "launch.train", f"--config={spec}",
            f"--workdir={sweeps.run_dir(workdir, run)}",
            *[f"--config.{k}={sweeps.flag_value(v)}"
              for k, v in sweeps.settings(workdir, run).items()]]


def arms_command(path: str, arg: str, workdir: str, runs: list[dict], logs: str,
                 python: str = sys.executable) -> list[str]:
    """The launch.arms command line of a group of runs sharing one base."""
    spec = f"{path}:{arg}" if arg else path
    return [python, "-m", "launch.arms", f"--sweep={spec}", f"--workdir={workdir}",
            f"--runs={','.join(r['name'] for r in runs)}", f"--logs={logs}"]


def done(workdir: str, run: dict) -> bool:
    return paths.exists(paths.join(sweeps.run_dir(workdir, run), "DONE"))


def progress(workdir: str, run: dict) -> str:
    """`name step k` from the run's metrics.jsonl (its last logged step)."""
    path = paths.join(sweeps.run_dir(workdir, run), "metrics.jsonl")
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

    def stop(self, signum: int) -> list[tuple[dict, float]]:
        """Signals every running process and waits for it; returns (run, seconds) each."""
        for proc, *_ in self.running.values():
            if proc.poll() is None:
                proc.send_signal(signum)
        stopped = []
        for proc, run, log, start in self.running.values():
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()
            stopped.append((run, time.perf_counter() - start))
        return stopped


def _load():
    """(the sweep, its target) from the flags; exits 2 with one line when it is bad."""
    try:
        sweep = sweeps.load(_CONFIG.value)
        sweeps.check_keys(load_config_file(_CONFIG.value), sweep.runs)
        if not _DRY_RUN.value:
            extras.require("matplotlib", "plots", "the sweep's curves.png")
            if paths.is_remote(_WORKDIR.value):  # a missing bucket, no credentials, no gcsfs
                check_writable(_WORKDIR.value)
            elif _STAGING.value:
                raise ValueError("--staging is for a gs:// or s3:// --workdir (a local "
                                 "sweep keeps its logs in its runs' folders)")
    except Exception as e:  # noqa: BLE001 - any failure of the user's sweep file
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(2)
    return sweep, sweep.target if _TARGET.value is None else _TARGET.value


class Sweeper:
    """Runs a sweep's unfinished runs `parallel` at a time and keeps its summary current."""

    def __init__(self, sweep, workdir: str, target: float, parallel: int, staging: str = "",
                 shared_base: bool = False):
        self.sweep, self.workdir, self.target = sweep, workdir, target
        self.staging = staging or workdir  # where the runs' train.log are written
        self.todo = [run for run in sweep.runs if not done(workdir, run)]
        # a job is one process: a run (launch.train) or a group sharing a base (launch.arms)
        self.jobs = ([{"name": f"group-{group[0]['name']}", "runs": group, "shared": True}
                      for group in sweeps.shared_base_groups(self.todo)] if shared_base else
                     [{"name": run["name"], "runs": [run], "shared": False}
                      for run in self.todo])
        self.pool, self.failed, self.finished = Pool(parallel), [], 0
        self.start = time.perf_counter()

    def summarize(self) -> list[str]:
        return sweeps.summarize(self.workdir, self.sweep.runs, target=self.target,
                                title=_CONFIG.value, metrics=self.sweep.metrics)

    def record_wall(self, run: dict, seconds: float) -> None:
        sweeps.add_wall(paths.join(sweeps.run_dir(self.workdir, run), sweeps.WALL_FILE),
                        seconds)
        self.publish_log(run)

    def log_path(self, run: dict) -> str:
        """The run's train.log on this machine (in its run folder, or in --staging)."""
        return os.path.join(sweeps.run_dir(self.staging, run), "train.log")

    def publish_log(self, run: dict) -> None:
        """Uploads a bucket sweep's train.log of `run` (nothing for a local sweep)."""
        if self.staging != self.workdir and os.path.exists(self.log_path(run)):
            paths.copy_file(self.log_path(run),
                            paths.join(sweeps.run_dir(self.workdir, run), "train.log"))

    def stop(self, signum, frame) -> None:
        del frame
        print(f"\nstopping: {signal.Signals(signum).name}; the running runs checkpoint "
              "(rerun the same command to resume)", file=sys.stderr, flush=True)
        for job, seconds in self.pool.stop(signal.SIGTERM):
            for run in job["runs"]:
                self.record_wall(run, seconds)
        self.record_sweep_wall()
        sys.exit(130 if signum == signal.SIGINT else 143)

    def record_sweep_wall(self) -> None:
        sweeps.add_wall(paths.join(self.workdir, sweeps.SWEEP_WALL_FILE),
                        time.perf_counter() - self.start, "invocations")

    def launch(self, job: dict) -> None:
        for run in job["runs"]:
            log = self.log_path(run)
            os.makedirs(os.path.dirname(log), exist_ok=True)
            remote_log = paths.join(sweeps.run_dir(self.workdir, run), "train.log")
            if (self.staging != self.workdir and not os.path.exists(log)
                    and paths.exists(remote_log)):
                paths.copy_file(remote_log, log)  # an earlier attempt's, appended to
        names = ", ".join(r["name"] for r in job["runs"])
        if job["shared"]:  # the group's own output (warm start, errors) in groups/
            log = os.path.join(self.staging, "groups", f"{job['name']}.log")
            os.makedirs(os.path.dirname(log), exist_ok=True)
            cmd = arms_command(self.sweep.path, self.sweep.arg, self.workdir, job["runs"],
                               self.staging)
            names = f"{len(job['runs'])} runs over one base ({names}); log {log}"
        else:
            cmd = command(self.sweep.path, self.sweep.arg, self.workdir, job["runs"][0])
        self.pool.start(cmd, job, log)
        started = self.finished + sum(len(j["runs"]) for _, j, *_ in self.pool.running.values())
        print(f"[{started}/{len(self.todo)}] {names}: started", flush=True)

    def collect(self) -> None:
        for job, code, seconds in self.pool.finished():
            for run in job["runs"]:
                self.finished += 1
                self.record_wall(run, seconds)
                directory = sweeps.run_dir(self.workdir, run)
                where = f"[{self.finished}/{len(self.todo)}] {run['name']}"
                if code == 0 and not job["shared"]:
                    paths.write_text(paths.join(directory, "DONE"), "")
                if done(self.workdir, run):  # a group's finished runs: written by launch.arms
                    print(f"{where}: done in {seconds:.0f}s", flush=True)
                    self.summarize()
                else:
                    self.failed.append(run["name"])
                    logs_ = [paths.join(directory, "train.log")] + (
                        [os.path.join(self.staging, "groups", f"{job['name']}.log")]
                        if job["shared"] else [])
                    print(f"{where}: FAILED (exit {code}); see {' and '.join(logs_)}",
                          flush=True)

    def run(self) -> None:
        queue, last_status = list(self.jobs), time.perf_counter()
        while queue or self.pool.running:
            while queue and len(self.pool.running) < self.pool.size:
                self.launch(queue.pop(0))
            self.collect()
            if self.pool.running and time.perf_counter() - last_status >= _STATUS_EVERY:
                last_status = time.perf_counter()
                print("  running: " + ", ".join(
                    progress(self.workdir, r) for _, job, *_ in self.pool.running.values()
                    for r in job["runs"]), flush=True)
            time.sleep(0.2)
        self.record_sweep_wall()


def main(argv):
    del argv
    sweep, target = _load()
    workdir = _WORKDIR.value
    if _DRY_RUN.value:
        for job in Sweeper(sweep, workdir, target, _PARALLEL.value,
                           shared_base=_SHARED_BASE.value).jobs:
            print(shlex.join(
                arms_command(sweep.path, sweep.arg, workdir, job["runs"], workdir, "python")
                if job["shared"] else
                command(sweep.path, sweep.arg, workdir, job["runs"][0], python="python")))
        return
    if not paths.is_remote(workdir):
        sweep_in(Sweeper(sweep, workdir, target, _PARALLEL.value,
                         shared_base=_SHARED_BASE.value))
    elif _STAGING.value:
        sweep_in(Sweeper(sweep, workdir, target, _PARALLEL.value, _STAGING.value,
                         _SHARED_BASE.value))
    else:
        with tempfile.TemporaryDirectory(prefix="sweep.") as staging:
            sweep_in(Sweeper(sweep, workdir, target, _PARALLEL.value, staging,
                             _SHARED_BASE.value))


def sweep_in(sweeper: Sweeper) -> None:
    """Runs the sweep's unfinished runs and writes its summary (the module docstring)."""
    workdir, runs = sweeper.workdir, sweeper.sweep.runs
    paths.makedirs(paths.join(workdir, "runs"))
    logs_at = os.path.join(sweeper.staging, "runs", "<name>", "train.log")
    shared = (f" in {len(sweeper.jobs)} groups over shared bases" if _SHARED_BASE.value
              else "")
    print(f"sweep {_CONFIG.value}: {len(runs)} runs, {len(runs) - len(sweeper.todo)} finished "
          f"(skipped), {len(sweeper.todo)} to run{shared}, {_PARALLEL.value} at a time; "
          "logs in "
          f"{logs_at}" + (f" (uploaded to {paths.join(workdir, 'runs', '<name>', 'train.log')}"
                          " as each run ends)" if sweeper.staging != workdir else ""),
          flush=True)
    signal.signal(signal.SIGTERM, sweeper.stop)
    signal.signal(signal.SIGINT, sweeper.stop)
    sweeper.run()
    print(f"wrote {', '.join(sweeper.summarize())}")
    if sweeper.failed:
        print(f"error: {len(sweeper.failed)} run(s) failed: {', '.join(sweeper.failed)} (logs: "
              f"{paths.join(workdir, 'runs', '<name>', 'train.log')}); rerun to retry them",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    app.run(main)
