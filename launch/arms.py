r"""A group of a sweep's runs as LoRA adapters over one shared base, in one process.

    python -m launch.arms --sweep=configs/paper/losses.py:tiny,lora --workdir=DIR \
        --runs=grpo-s0,dr_grpo-s0,dapo-s0

`launch.sweep --shared_base` starts one per group (runs that differ only in
`rl.sweeps.ARM_KEYS`); it can also be run by hand. Each run is configured exactly as
`launch.sweep` would launch it alone (`rl.sweeps.settings`: the sweep's shared warm
start in DIR/warm_starts, one kept checkpoint, the run's overrides) and keeps its own
DIR/runs/<name>/ (metrics.jsonl, checkpoints, final/); its console goes to
LOGS/runs/<name>/train.log (`--logs`, default DIR). The arms train in one process over
one frozen base, every sampler call serving all of them (rl/train/arms.py). An
interrupted group resumes each arm from its own checkpoints.

Writes DIR/runs/<name>/DONE for each run that finished. Exit status: 0 when every run
finished, 1 when some failed (their train.log ends with the error), 2 for a bad flag,
sweep or config (before any compute).
"""

from __future__ import annotations

import os
import sys
import time

from absl import flags

from launch import distributed
from launch.common import load_config_file, prepare, print_heldout, run
from models import paths
from rl import sweeps
from rl.train import arms, build, sft
from rl.train.logs import plot

_SWEEP = flags.DEFINE_string("sweep", None, "Sweep file `path.py[:arg]` (get_config and "
                             "get_sweep).", required=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "The sweep's directory (runs/<name>/ per "
                               "run, warm_starts/).", required=True)
_RUNS = flags.DEFINE_list("runs", None, "Names of the sweep's runs to train together; they "
                          "may differ only in rl.sweeps.ARM_KEYS.", required=True)
_LOGS = flags.DEFINE_string("logs", None, "Local folder of the runs' train.log "
                            "(LOGS/runs/<name>/train.log); default --workdir.")
_WORKERS = flags.DEFINE_integer("workers", 0, "At most this many arms compute at once "
                                "(0: all); an arm waiting for its sampler batch gives its "
                                "turn away.", lower_bound=0)
distributed.define_flags()


def chosen_runs(spec: str, names: list[str]) -> list[dict]:
    """The named runs of sweep `spec`; ValueError (one line) for an unknown name or runs
    that may not share a base."""
    sweep = sweeps.load(spec)
    by_name = {r["name"]: r for r in sweep.runs}
    unknown = [n for n in names if n not in by_name]
    if unknown or not names:
        raise ValueError(f"--runs: {', '.join(unknown) or 'none given'} not in {spec} "
                         f"(its runs: {', '.join(by_name)})")
    chosen = [by_name[n] for n in dict.fromkeys(names)]
    if len(sweeps.shared_base_groups(chosen)) != 1:
        raise ValueError(f"--runs: {', '.join(names)} differ in more than the learner's keys "
                         f"({', '.join(sweeps.ARM_KEYS)}): they cannot share one base")
    return chosen


def configs_of(spec: str, workdir: str, runs: list[dict]) -> list:
    """Each run's config: the sweep file's with the run's `rl.sweeps.settings`."""
    out = []
    for run_ in runs:
        cfg = load_config_file(spec)
        cfg.update_from_flattened_dict(sweeps.settings(workdir, run_))
        out.append(cfg)
    return out


def _prepared(cfgs: list, workdirs: list[str]) -> list:
    """Each run resolved and checked (`launch.common.prepare`, no params yet); None for a
    run whose checkpoints are already finished."""
    out = []
    for cfg, workdir in zip(cfgs, workdirs, strict=True):
        try:
            run_, _ = prepare(cfg, workdir, init=False)
        except SystemExit as e:  # prepare's "finished: nothing to do" exits 0
            if e.code not in (0, None):
                raise
            run_ = None
        if run_ is not None:
            try:
                arms.check(run_)
            except ValueError as e:
                print(f"error: {e}", file=sys.stderr)
                sys.exit(2)
        out.append(run_)
    return out


def _warm_started(runs_: list, workdir: str):
    """The group's starting params: the first run's warm start (which every run shares:
    checked) or its initial policy."""
    first = runs_[0]
    params = build.init_params(first)
    if first.cfg.train.warm_start != "sft":
        return params
    keys = {sft.fingerprint_key(r) for r in runs_}
    if len(keys) > 1:
        print("error: the runs' supervised warm starts differ: they cannot share one base",
              file=sys.stderr)
        sys.exit(2)
    print(f"supervised warm start: {first.cfg.sft.steps} steps (shared by "
          f"{len(runs_)} runs)", flush=True)
    params, summary, _ = sft.warm_start(first, params, workdir)
    print(f"      held-out accuracy {summary['before'].get('heldout/accuracy', 0):.3f} -> "
          f"{summary['after'].get('heldout/accuracy', 0):.3f}", flush=True)
    return params


def _finish(name: str, run_, workdir: str, result, stream) -> bool:
    """Reports one run's end on its stream and stdout; writes DONE; whether it finished."""
    if isinstance(result, BaseException):
        line = f"error: {type(result).__name__}: {' '.join(str(result).split())}"
        print(line, file=stream, flush=True)
        print(f"{name}: {line}", flush=True)
        return False
    if run_.cfg.train.plot:
        plot(workdir, title=f"{name}: {run_.algorithm.advantage}")
    paths.write_text(paths.join(workdir, "DONE"), "")
    before = result["before"].get("heldout/accuracy")
    after = result["after"].get("heldout/accuracy")
    if before is not None and after is not None:
        print(f"heldout_accuracy: before={before:.3f} after={after:.3f}", file=stream,
              flush=True)
    print(f"{name}: done", flush=True)
    print_heldout(result)
    return True


def main(argv):
    del argv
    start = time.perf_counter()
    workdir = _WORKDIR.value
    try:
        chosen = chosen_runs(_SWEEP.value, _RUNS.value)
        cfgs = configs_of(_SWEEP.value, workdir, chosen)
    except Exception as e:  # noqa: BLE001 - the user's sweep file or flags
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(2)
    dirs = [sweeps.run_dir(workdir, r) for r in chosen]
    prepared = _prepared(cfgs, dirs)
    todo = [i for i, r in enumerate(prepared) if r is not None]
    for i in set(range(len(chosen))) - set(todo):  # finished before: only the marker
        paths.write_text(paths.join(dirs[i], "DONE"), "")
    if not todo:
        return
    runs_ = [prepared[i] for i in todo]
    frozen = arms.shared_frozen(runs_[0], _warm_started(runs_, dirs[todo[0]]))
    logs = _LOGS.value or workdir
    streams = []
    for i in todo:
        log = os.path.join(sweeps.run_dir(logs, chosen[i]), "train.log")
        os.makedirs(os.path.dirname(log), exist_ok=True)
        streams.append(open(log, "a"))  # noqa: SIM115 - closed below
    print(f"RL: {len(todo)} arms over one base ({', '.join(chosen[i]['name'] for i in todo)})",
          flush=True)
    try:
        results = arms.run_group(runs_, [dirs[i] for i in todo], frozen, streams,
                                     _WORKERS.value)
        ok = [_finish(chosen[i]["name"], r, dirs[i], res, s)
              for i, r, res, s in zip(todo, runs_, results, streams, strict=True)]
    finally:
        for stream in streams:
            stream.close()
    print(f"total {time.perf_counter() - start:.0f}s", flush=True)
    if not all(ok):
        sys.exit(1)


if __name__ == "__main__":
    run(main)
