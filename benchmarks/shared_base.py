"""One sweep run two ways, compared: its runs one process each (`launch.sweep`) and as
adapters over one base per group (`launch.sweep --shared_base`).

    python -m launch.sweep --config=configs/paper/losses.py:tiny,lora --workdir=A
    python -m launch.sweep --config=configs/paper/losses.py:tiny,lora --workdir=B --shared_base
    python benchmarks/shared_base.py A B [--config=configs/paper/losses.py:tiny,lora] [--json]

Reads both sweeps' DIR/results.csv and DIR/sweep_wall.json (written by launch.sweep).
Prints, for each run both sweeps finished, the largest difference in the results-table
columns (`rl.sweeps.DETERMINISTIC`), the runs whose samples differ at all (rollout
tokens or rollouts), and the two sweeps' wall times with their ratio.

With --config (the sweep both ran), also each group's wall time both ways, from the runs'
DIR/runs/<name>/wall.json (every attempt counted): the separate side is the sum over the
group's runs, the shared side the group process's (the largest over its arms, since an arm
resumed in a later group carries both attempts). A group's figure survives a sweep
invocation whose own total was lost (a killed launch.sweep records none).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from rl import sweeps  # noqa: E402

SAMPLES = ("rollout_tokens", "rollouts")  # equal when every sampled token is


def _rows(workdir: str) -> dict[str, dict]:
    with open(os.path.join(workdir, "results.csv")) as f:
        return {row["name"]: row for row in csv.DictReader(f)}


def _number(text: str) -> float | None:
    return float(text) if text not in ("", None) else None


def compare(separate: str, shared: str) -> dict:
    """{"runs": {name: {column: |a - b|, None where one side has no value (one run reached
    the target, the other not)}}, "differ_in_samples": [names], "max": {column: largest
    difference}, "wall_s": {"separate", "shared"}, "shared_over_separate": their ratio}."""
    a, b = _rows(separate), _rows(shared)
    runs, worst, differ = {}, {}, []
    for name in sorted(set(a) & set(b)):
        diffs = {}
        for column in sweeps.DETERMINISTIC:
            x, y = _number(a[name].get(column)), _number(b[name].get(column))
            if x is None and y is None:  # e.g. neither reached the target
                diffs[column] = 0.0
            elif x is None or y is None:  # one reached it, the other did not
                diffs[column] = None
            else:
                diffs[column] = abs(x - y)
            if diffs[column] is not None:
                worst[column] = max(worst.get(column, 0.0), diffs[column])
        if any(diffs[c] != 0.0 for c in SAMPLES):
            differ.append(name)
        runs[name] = diffs
    wall = {side: (sweeps.read_wall(os.path.join(d, sweeps.SWEEP_WALL_FILE)) or {}).get(
        "seconds") for side, d in (("separate", separate), ("shared", shared))}
    ratio = (wall["shared"] / wall["separate"] if wall["shared"] and wall["separate"]
             else math.nan)
    return {"runs": runs, "differ_in_samples": differ, "max": worst, "wall_s": wall,
            "shared_over_separate": ratio, "compared": len(runs),
            "only_one_side": sorted(set(a) ^ set(b))}


def _run_wall(workdir: str, name: str) -> float | None:
    wall = sweeps.read_wall(os.path.join(workdir, "runs", name, sweeps.WALL_FILE))
    return wall["seconds"] if wall else None


def groups(spec: str, separate: str, shared: str) -> list[dict]:
    """[{"runs": [names], "separate_s": sum of the runs' walls, "shared_s": the group's
    wall, "shared_over_separate"}] for each `--shared_base` group of the sweep `spec`;
    a side is None where one of its runs has no wall.json yet."""
    out = []
    for group in sweeps.shared_base_groups(sweeps.load(spec).runs):
        names = [run["name"] for run in group]
        a = [_run_wall(separate, n) for n in names]
        b = [_run_wall(shared, n) for n in names]
        sep = None if None in a else sum(a)
        sha = None if None in b else max(b)
        out.append({"runs": names, "separate_s": sep, "shared_s": sha,
                    "shared_over_separate": sha / sep if sep and sha else math.nan})
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("separate", help="the sweep run one process per run")
    parser.add_argument("shared", help="the same sweep run with --shared_base")
    parser.add_argument("--config", default="",
                        help="the sweep both ran (path.py[:arg]): adds each group's wall")
    parser.add_argument("--json", action="store_true", help="one JSON object")
    args = parser.parse_args(argv)
    out = compare(args.separate, args.shared)
    if args.config:
        out["groups"] = groups(args.config, args.separate, args.shared)
    if args.json:
        print(json.dumps(out))
        return
    print(f"runs compared: {out['compared']} (finished on one side only: "
          f"{', '.join(out['only_one_side']) or 'none'})")
    print(f"runs whose samples differ: {len(out['differ_in_samples'])} "
          f"({', '.join(out['differ_in_samples']) or 'none'})")
    for column, value in out["max"].items():
        print(f"  largest |separate - shared| {column}: {value:.6g}")
    wall = out["wall_s"]
    print(f"sweep wall time: separate {_seconds(wall['separate'])}, shared "
          f"{_seconds(wall['shared'])}, "
          f"shared / separate {out['shared_over_separate']:.3f}")
    for group in out.get("groups", []):
        print(f"group {group['runs'][0]} ({len(group['runs'])} runs): separate "
              f"{_seconds(group['separate_s'])}, shared {_seconds(group['shared_s'])}, "
              f"shared / separate {group['shared_over_separate']:.3f}")


def _seconds(value: float | None) -> str:
    return "unfinished" if value is None else f"{value:.0f} s"


if __name__ == "__main__":
    main()
