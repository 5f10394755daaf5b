"""The `math` verifier against math-verify: agreement with hand labels, throughput, parallelism.

Three measurements on the project's hand-labelled (gold, completion) pairs
(`tests/rl/rewards/math_pairs.py`, labels set by hand before any verifier ran):

1. agreement: accuracy, false positives and false negatives of the `math`
   verifier and of math-verify 0.9.0 in three settings (its defaults with the
   gold parsed as `$gold$`, the same with `\\boxed{gold}`, and TRL's
   `accuracy_reward` settings), every verifier in a 2-worker pool (`--workers`)
   with a hard per-item timeout, per category too;
2. throughput on the non-adversarial pairs, one process each: the `math`
   verifier with `workers=0` (its fast parser in this process, the items it
   escalates in one worker) against math-verify's defaults called directly in
   this process's main thread (its own signal timeouts), both warmed first,
   alternating over repeats (math-verify's parse caches hold 20 entries, so a
   repeat over 1,333 pairs does not reuse them); medians;
3. parallel scoring: 1,024 MATH-style completions (non-adversarial pairs in a
   fixed shuffled order) scored serially (one completion at a time in one fresh
   process, both stages there, as rewards were scored before the pool), with
   `workers=0` (the exact stage in this process, escalations in one worker) and
   with `workers=2`, alternating over `--repeats` runs, each with fresh
   processes, warmed on 16 other pairs ("cold", a run's first batches) or on all
   the other non-adversarial pairs ("warm", a long run's steady state); memoised
   verdicts are cleared before each timed run; medians and the median of paired
   ratios. For scale,
   the same 1-vs-2 worker comparison on a pure CPU loop (`sum(range(n))` per
   item) shows what the machine's two cores allow.

    python benchmarks/rewards.py --json
    python benchmarks/rewards.py --only=throughput
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import random
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from rl.rewards import RewardSpec, pool  # noqa: E402
from tests.rl.rewards import math_pairs, pool_verifiers, reference_verifiers  # noqa: E402, F401

VERIFIERS = {"math": "this project (`math`)",
             "math_verify_default": "math-verify 0.9.0 defaults (gold `$gold$`)",
             "math_verify_boxed_gold": "math-verify 0.9.0 defaults (gold `\\boxed{gold}`)",
             "math_verify_trl": "math-verify 0.9.0, TRL accuracy_reward settings"}


def agreement(pairs, workers: int, log) -> dict:
    labels = np.array([p.label for p in pairs])
    out = {}
    for name, title in VERIFIERS.items():
        spec = RewardSpec.build(name, workers=workers, timeout_s=30.0)
        spec.score([pairs[0].completion], [pairs[0].gold])  # start and warm the workers
        start = time.perf_counter()
        result = spec.score([p.completion for p in pairs], [p.gold for p in pairs])
        seconds = time.perf_counter() - start
        got = result.correct
        per_category = collections.defaultdict(lambda: [0, 0])
        for p, g in zip(pairs, got, strict=True):
            per_category[p.category][0] += int(g == p.label)
            per_category[p.category][1] += 1
        out[name] = {"title": title, "accuracy": float(np.mean(got == labels)),
                     "false_positives": int(np.sum(got & ~labels)),
                     "false_negatives": int(np.sum(~got & labels)),
                     "timeouts": result.timeouts, "seconds": seconds,
                     "per_category": {k: v[0] / v[1] for k, v in sorted(per_category.items())}}
        log(f"{title}: accuracy {out[name]['accuracy']:.4f}, FP {out[name]['false_positives']}, "
            f"FN {out[name]['false_negatives']}, timeouts {result.timeouts} ({seconds:.1f}s)")
        pool.close_all()
    return out


def throughput(pairs, repeats: int, log) -> dict:
    from math_verify import parse, verify
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    completions, golds = [p.completion for p in pairs], [p.gold for p in pairs]
    verify(parse("$(x+1)^2$"), parse("\\boxed{x^2+2x+1}"))  # imports, first parse
    ours, theirs = [], []
    from rl.rewards import math_answer
    for _ in range(repeats):  # alternating; a fresh escalation worker each time
        math_answer.forget()  # memoised verdicts serve one repeat only
        spec = RewardSpec.build("math", workers=0)
        spec.score(["\\boxed{x^2+2x+1}"], ["(x+1)^2"])  # start and warm it
        start = time.perf_counter()
        spec.score(completions, golds)
        ours.append(time.perf_counter() - start)
        pool.close_all()
        start = time.perf_counter()
        for completion, gold in zip(completions, golds, strict=True):
            verify(parse(f"${gold}$"), parse(completion))
        theirs.append(time.perf_counter() - start)
    mine, lib = statistics.median(ours), statistics.median(theirs)
    paired = statistics.median(b / a for a, b in zip(ours, theirs, strict=True))
    log(f"throughput on {len(pairs)} pairs, {repeats} alternating repeats: ours "
        f"{len(pairs) / mine:.0f}/s, math-verify {len(pairs) / lib:.0f}/s (medians), ratio "
        f"{lib / mine:.2f}x (paired median {paired:.2f}x)")
    return {"pairs": len(pairs), "repeats": repeats, "ours_s": ours, "math_verify_s": theirs,
            "ratio": lib / mine, "paired_ratio": paired}


def _batches(pairs, size: int) -> dict:
    """The timed batch and, per regime, the pairs that warm a process up first: "cold", 16
    other pairs (a run's first batches); "warm", all the other non-adversarial pairs (a
    long run's steady state: ANTLR's DFA cache filled)."""
    order = list(range(len(pairs)))
    random.Random(0).shuffle(order)
    return {"batch": [pairs[i] for i in order[:size]],
            "cold": [pairs[i] for i in order[size:size + 16]],
            "warm": [pairs[i] for i in order[size:]]}


def serial_child(pairs, size: int, regime: str) -> None:
    """Run in a fresh process: scores the batch one completion at a time in this process
    (how rewards were scored before the pool: no workers, no timeouts), prints seconds."""
    from rl.rewards import common
    from rl.rewards import spec as spec_module
    sets = _batches(pairs, size)
    common.IN_WORKER = True  # the library stage runs here, not in a worker
    for warm in common.WARMERS.values():
        warm()
    verify = common.VERIFIERS.get("math")
    options = dict(RewardSpec.build("math").options["math"])
    for p in sets[regime]:
        spec_module.call(verify, p.completion, p.gold, options)
    start = time.perf_counter()
    for p in sets["batch"]:
        spec_module.call(verify, p.completion, p.gold, options)
    print(time.perf_counter() - start)


def _serial_seconds(size: int, regime: str) -> float:
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--serial_child", regime,
                          "--size", str(size)], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def parallel(pairs, size: int, repeats: int, log) -> dict:
    from rl.rewards import math_answer
    sets = _batches(pairs, size)
    batch = sets["batch"]
    out = {"completions": len(batch), "repeats": repeats}
    for regime in ("cold", "warm"):
        warmup = sets[regime]
        times: dict[str, list[float]] = {"serial": [], "pool1": [], "pool2": []}
        for _ in range(repeats):  # alternating, each with fresh processes
            times["serial"].append(_serial_seconds(size, regime))
            for workers, key in ((0, "pool1"), (2, "pool2")):
                spec = RewardSpec.build("math", workers=workers)
                spec.score([p.completion for p in warmup], [p.gold for p in warmup])
                math_answer.forget()  # nothing of an earlier repeat is remembered
                start = time.perf_counter()
                spec.score([p.completion for p in batch], [p.gold for p in batch])
                times[key].append(time.perf_counter() - start)
                pool.close_all()
        med = {k: statistics.median(v) for k, v in times.items()}
        paired = {k: statistics.median(b / a for a, b in zip(times["serial"], times[k],
                                                            strict=True))
                  for k in ("pool1", "pool2")}
        log(f"{len(batch)} completions, {regime}, {repeats} alternating repeats (medians): "
            f"serial {med['serial']:.2f}s, 1 worker {med['pool1']:.2f}s, 2 workers "
            f"{med['pool2']:.2f}s; 2 workers / serial {med['pool2'] / med['serial']:.2f} "
            f"(paired median {paired['pool2']:.2f}), 2 workers / 1 worker "
            f"{med['pool2'] / med['pool1']:.2f}")
        out[regime] = {"serial_s": times["serial"], "workers0_s": times["pool1"],
                       "workers2_s": times["pool2"], "ratio": med["pool2"] / med["serial"],
                       "paired_ratio": paired["pool2"],
                       "ratio_vs_one_worker": med["pool2"] / med["pool1"]}
    cpu = {1: [], 2: []}
    items = [("misbehave", "loop:300000", None, {})] * 200
    for _ in range(repeats):  # the machine's ceiling: a pure CPU loop on 1 and 2 workers
        for workers in (1, 2):
            p = pool.Pool(workers, imports=("tests.rl.rewards.pool_verifiers",))
            p.run(items[:4], timeout_s=60.0)
            start = time.perf_counter()
            p.run(items, timeout_s=60.0)
            cpu[workers].append(time.perf_counter() - start)
            p.close()
    ceiling = statistics.median(b / a for a, b in zip(cpu[1], cpu[2], strict=True))
    log(f"pure CPU loop, 200 items: 2 workers take {ceiling:.2f}x the time of 1 "
        "(paired median): the machine's ceiling for this ratio")
    out.update({"cpu_loop_1_s": cpu[1], "cpu_loop_2_s": cpu[2], "cpu_loop_ratio": ceiling})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="pool size for agreement")
    parser.add_argument("--size", type=int, default=1024, help="completions for parallel")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats for parallel")
    parser.add_argument("--only", choices=("agreement", "throughput", "parallel"),
                        help="run one of the three measurements")
    parser.add_argument("--json", action="store_true", help="print one JSON line at the end")
    parser.add_argument("--serial_child", choices=("cold", "warm"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    pairs = list(math_pairs.PAIRS)
    plain = [p for p in pairs if not p.adversarial]
    if args.serial_child:
        return serial_child(plain, args.size, args.serial_child)
    print(f"{len(pairs)} labelled pairs ({len(plain)} non-adversarial)", flush=True)
    runs = {"agreement": lambda: agreement(pairs, args.workers, print),
            "throughput": lambda: throughput(plain, max(3, args.repeats // 2), print),
            "parallel": lambda: parallel(plain, args.size, args.repeats, print)}
    results = {name: run() for name, run in runs.items() if args.only in (None, name)}
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
