"""A sweep's results: each run's numbers, the tables of results.md / timing.md, the curves.

`summarize(workdir, runs)` writes DIR/results.csv (one row per run), DIR/results.md
(mean ± std per group; only numbers that are a function of the config and seed, so an
interrupted and resumed sweep writes the same file), DIR/timing.md (the wall time the
runs' processes took, measured by launch.sweep, and the share of it in training
steps) and DIR/curves.png (held-out accuracy and training reward per step, and
held-out accuracy per rollout token, one curve per group: the mean over its runs).

With a sweep file's `METRICS` (training-metric keys of metrics.jsonl:
`"learner/entropy"`, `"frac_reward_zero_std"`, ...), results.md adds a table of each
one's mean over a run's RL steps (mean ± std per group), and curves.png one panel per
metric (its value per step): the mechanics a study looks at beside accuracy.

Per run, from DIR/runs/<name>/metrics.jsonl:
  heldout_start / heldout_final / heldout_best   greedy held-out accuracy before RL
                                 (step 0) / at the last eval / best eval
  heldout_gain                   heldout_final - heldout_start
  reward_last10                  mean training reward over the last 10 steps
  steps_to_target                first eval step with held-out accuracy >= target
                                 (empty when never reached)
  rollout_tokens                 tokens decoded by the sampler over the run: the tree's
                                 and LATR's shared prefixes once (`tree/shared_token_frac`,
                                 `latr/shared_token_frac`), APRIL's
                                 partial samples as decoded (`april/decoded_tokens`)
  tokens_to_target               rollout tokens spent up to steps_to_target
  rollouts                       completions sampled (`sampled/rows`: DARS's extras,
                                 dynamic sampling's extra rounds, the tree's leaves)
  step_s, step_to_target_s       sum of `time/step` (+ `time/eval`), to the end / target
and from DIR/runs/<name>/wall.json (written by launch.sweep):
  wall_s                         the wall time of the run's processes, every attempt
                                 (start-up, compilation, warm start, evals, exports)
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from models import extras, paths
from rl.sweeps.spec import run_dir
from rl.train import logs

DETERMINISTIC = ("heldout_start", "heldout_final", "heldout_gain", "heldout_best",
                 "reward_last10", "steps_to_target",
                 "rollout_tokens", "tokens_to_target", "rollouts")
TIMING = ("wall_s", "step_s", "step_to_target_s")
WALL_FILE = "wall.json"  # a run's measured wall time: {"seconds": s, "attempts": k}
SWEEP_WALL_FILE = "sweep_wall.json"  # the sweep's: {"seconds": s, "invocations": k}


# -- one run's numbers --------------------------------------------------------------------------
def _decoded(record: Mapping[str, Any]) -> float:
    if record.get("april/decoded_tokens") is not None:
        return float(record["april/decoded_tokens"])
    tokens = float(record.get("generated_tokens") or 0)
    shared = record.get("tree/shared_token_frac", record.get("latr/shared_token_frac"))
    return tokens * (1.0 - float(shared)) if shared is not None else tokens


def run_numbers(records: list[dict], target: float,
                metrics: Sequence[str] = ()) -> dict[str, Any]:
    """The per-run numbers of the module docstring from metrics.jsonl's lines, plus the
    mean over RL steps of each of `metrics` (None where no step logged it)."""
    steps = [r for r in logs.metric_records(records) if r["step"] > 0]
    evals = [r for r in logs.metric_records(records) if r.get("heldout/accuracy") is not None]
    out: dict[str, Any] = {"steps": steps[-1]["step"] if steps else 0}
    out["heldout_final"] = evals[-1]["heldout/accuracy"] if evals else None
    start = [r["heldout/accuracy"] for r in evals if r["step"] == 0]
    out["heldout_start"] = start[0] if start else None
    out["heldout_gain"] = (out["heldout_final"] - start[0]
                           if start and out["heldout_final"] is not None else None)
    out["heldout_best"] = max(r["heldout/accuracy"] for r in evals) if evals else None
    last = [r["reward/mean"] for r in steps[-10:] if r.get("reward/mean") is not None]
    out["reward_last10"] = sum(last) / len(last) if last else None
    reached = next((r["step"] for r in evals if r["heldout/accuracy"] >= target), None)
    out["steps_to_target"] = reached
    tokens = seconds = 0.0
    out["tokens_to_target"] = out["step_to_target_s"] = None
    if reached == 0:
        out["tokens_to_target"] = out["step_to_target_s"] = 0.0
    for r in steps:
        tokens += _decoded(r)
        seconds += float(r.get("time/step") or 0) + float(r.get("time/eval") or 0)
        if reached is not None and r["step"] == reached:
            out["tokens_to_target"], out["step_to_target_s"] = tokens, seconds
    out["rollout_tokens"] = tokens
    out["rollouts"] = sum(int(r.get("sampled/rows") or 0) for r in steps)
    out["step_s"] = seconds
    for key in metrics:
        values = [float(r[key]) for r in steps if r.get(key) is not None]
        out[key] = sum(values) / len(values) if values else None
    return out


def add_wall(path: str, seconds: float, key: str = "attempts") -> dict:
    """Adds `seconds` to the wall-time file `path` (WALL_FILE or SWEEP_WALL_FILE) and
    counts one more `key`; returns its content."""
    wall = read_wall(path) or {"seconds": 0.0, key: 0}
    wall = {"seconds": wall["seconds"] + float(seconds), key: wall.get(key, 0) + 1}
    paths.write_text(path, json.dumps(wall))
    return wall


def read_wall(path: str) -> dict | None:
    """The content of a wall-time file, None when it does not exist."""
    try:
        return json.loads(paths.read_text(path))
    except FileNotFoundError:
        return None


# -- the summary ---------------------------------------------------------------------------------
def _mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof 1; 0 for a single value)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _cell(values: list[Any], digits: int) -> str:
    got = [float(v) for v in values if v is not None]
    if not got:
        return "–"
    mean, std = _mean_std(got)
    text = f"{mean:.{digits}f} ± {std:.{digits}f}"
    return text + (f" ({len(got)}/{len(values)})" if len(got) < len(values) else "")


def _table(rows: list[dict], columns: Sequence[tuple[str, str, int]]) -> list[str]:
    groups: dict[str, list[dict]] = {}
    for row in rows:
        groups.setdefault(row["group"], []).append(row)
    lines = ["| group | runs | " + " | ".join(title for _, title, _ in columns) + " |",
             "| --- | ---: |" + " ---: |" * len(columns)]
    for group, members in groups.items():
        cells = [_cell([m[key] for m in members], digits) for key, _, digits in columns]
        lines.append(f"| {group} | {len(members)} | " + " | ".join(cells) + " |")
    return lines


def summarize(workdir: str, runs: list[dict], *, target: float, title: str = "",
              metrics: Sequence[str] = (), plot: bool = True) -> list[str]:
    """Writes DIR/results.csv, results.md, timing.md (and curves.png with `plot`) from
    the finished runs among `runs`, with a table (and panels) of `metrics`; returns the
    paths written. `workdir` may be a bucket's URI (models.paths)."""
    rows, series = [], {}
    for run in runs:
        if not paths.exists(paths.join(run_dir(workdir, run), "DONE")):
            continue
        records = logs.read(paths.join(run_dir(workdir, run), "metrics.jsonl"))
        wall = read_wall(paths.join(run_dir(workdir, run), WALL_FILE)) or {}
        rows.append({"name": run["name"], "group": run["group"],
                     **run_numbers(records, target, metrics), "wall_s": wall.get("seconds")})
        series.setdefault(run["group"], []).append(logs.metric_records(records))
    written = []
    csv_path, table = paths.join(workdir, "results.csv"), io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=["name", "group", "steps", *DETERMINISTIC,
                                               *metrics, *TIMING])
    writer.writeheader()
    writer.writerows(rows)
    paths.write_text(csv_path, table.getvalue())
    written.append(csv_path)
    head = [f"# {title or 'Sweep results'}", "",
            f"{len(rows)} of {len(runs)} runs finished; mean ± sample std over each group's "
            f"runs; (k/n): only k of n runs have the value. Target held-out accuracy: "
            f"{target}.", ""]
    results = head + _table(rows, [
        ("heldout_start", "held-out acc (start)", 3), ("heldout_final", "held-out acc (final)", 3),
        ("heldout_gain", "gain", 3), ("heldout_best", "held-out acc (best)", 3),
        ("reward_last10", "train reward (last 10)", 3),
        ("steps_to_target", f"steps to {target}", 1),
        ("tokens_to_target", f"rollout tokens to {target}", 0),
        ("rollout_tokens", "rollout tokens", 0), ("rollouts", "rollouts", 0)])
    if metrics and rows:
        results += ["", "Training metrics: each run's mean over its RL steps.", ""]
        results += _table(rows, [(key, key, 4) for key in metrics])
        missing = [key for key in metrics if all(row[key] is None for row in rows)]
        if missing:
            results += ["", f"No run logged: {', '.join(missing)}."]
    for name, lines in (("results.md", results), ("timing.md", head + _timing(workdir, rows,
                                                                            target))):
        path = paths.join(workdir, name)
        paths.write_text(path, "\n".join(lines) + "\n")
        written.append(path)
    if plot and rows:
        written.append(plot_curves(paths.join(workdir, "curves.png"), series, title,
                                   metrics))
    return written


def _timing(workdir: str, rows: list[dict], target: float) -> list[str]:
    """timing.md's lines after the header: the sweep's wall time, then per group the
    runs' process wall time (every attempt) and the part of it in training steps."""
    sweep = read_wall(paths.join(workdir, SWEEP_WALL_FILE))
    runs_total = sum(row["wall_s"] or 0.0 for row in rows)
    lines = []
    if sweep:
        lines += [f"Sweep wall time: {sweep['seconds']:.0f} s over {sweep['invocations']} "
                  f"invocation(s) of launch.sweep; the finished runs' processes took "
                  f"{runs_total:.0f} s in all (runs in parallel overlap).", ""]
    lines += ["wall s: the run's processes from start to exit, every attempt (start-up, "
              "compilation, warm start, evals, exports); steps s: the part in training "
              "steps and their evals (`time/step` + `time/eval`).", ""]
    return lines + _table(rows, [("wall_s", "wall s", 1), ("step_s", "steps s", 1),
                                 ("step_to_target_s", f"steps s to {target}", 1)])


def _mean_curve(runs: list[list[dict]], key: str, x_of) -> tuple[list[float], list[float]]:
    """The mean over runs of `key` at each x the runs share (the first run's x)."""
    points = [[(x_of(run, i), r[key]) for i, r in enumerate(run) if r.get(key) is not None]
              for run in runs]
    n = min(len(p) for p in points)
    xs = [sum(p[i][0] for p in points) / len(points) for i in range(n)]
    ys = [sum(p[i][1] for p in points) / len(points) for i in range(n)]
    return xs, ys


def plot_curves(path: str, series: Mapping[str, list[list[dict]]], title: str = "",
                metrics: Sequence[str] = ()) -> str:
    """DIR/curves.png: held-out accuracy and training reward per step, held-out
    accuracy per rollout token, and each of `metrics` per step; one line per group
    (the mean over its runs), at most 4 panels a row."""
    matplotlib = extras.require("matplotlib", "plots", "the sweep's curves.png")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def step(run, i):
        return run[i]["step"]

    def tokens(run, i):
        return sum(_decoded(r) for r in run[:i + 1] if r["step"] > 0)

    panels = (("heldout/accuracy", step, "step", "held-out accuracy"),
              ("reward/mean", step, "step", "training reward"),
              ("heldout/accuracy", tokens, "rollout tokens", "held-out accuracy"),
              *((key, step, "step", key) for key in metrics))
    cols = min(4, len(panels))
    rows = -(-len(panels) // cols)
    fig, grid = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    axes = grid.ravel()
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]  # one per group, all panels
    for ax, (key, x_of, xlabel, ylabel) in zip(axes, panels, strict=False):
        for i, (group, runs) in enumerate(series.items()):
            if not any(r.get(key) is not None for run in runs for r in run):
                continue
            xs, ys = _mean_curve(runs, key, x_of)
            ax.plot(xs, ys, label=group, marker="o" if key.startswith("heldout") else None,
                    markersize=3, color=colors[i % len(colors)])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with paths.staged_file(path) as local:  # savefig writes local files only
        fig.savefig(local, dpi=110)
    plt.close(fig)
    return path
