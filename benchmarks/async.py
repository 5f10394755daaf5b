"""Asynchronous rollouts, timed: each phase of each step on a timeline, the overlap of
sampling with learning, and the wall time per step against `sync`, side by side.

    python benchmarks/async.py                      # 8 simulated CPU devices
    python benchmarks/async.py --steps 12 --json

Workload: the `tiny` preset (4.07M parameters, fp32), GRPO, 8 prompts × 4 samples × 32
new tokens (2 decode segments of 16) of the countdown task, one optimizer step per batch,
on 8 simulated CPU devices (XLA_FLAGS=--xla_force_host_platform_device_count=8):

  sync           the learner's mesh is all 8 devices; each step samples, then learns
  one_step_off   the sampler on 4 devices of its own (`mesh.rollout_devices=4`), the
                 learner on the other 4; the sampler makes batch n+1 while step n learns
  async          the same devices, the sampler 2 versions ahead (`rollout.max_staleness=2`),
                 2× the groups in flight, unfinished samples carried to the next call

The timeline (`Trainer.timeline`): per step, `sample` (a rollout call: prefill, decode,
rewards), `score` (π_old / reference log-probs and the host work before the update),
`update` (advantages, the optimizer step, its metrics on the host), `weights` (moving the
new version to the sampler's devices: the dispatch) and `wait_batch` (the learner waiting
for its batch). The learner's time is score + update; the overlap is the fraction of it
during which a sampling call also ran. The first `--warmup` steps (compiles) are left out.

A 2-core host cannot show a speed-up (both sides share the same two cores); it shows the
overlap. On an accelerator the two meshes are separate chips.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from configs import base, variants  # noqa: E402

MODES = {"sync": {},
         "one_step_off": {"rollout.mode": "one_step_off", "mesh.rollout_devices": 4},
         "async": {"rollout.mode": "async", "rollout.max_staleness": 2,
                   "mesh.rollout_devices": 4}}


def config(mode: str, steps: int):
    cfg = base.build("tiny")
    variants.apply(cfg, "grpo")
    cfg.rl.kl.coef = 0.0
    cfg.sampling.n, cfg.sampling.max_new_tokens, cfg.sampling.segment_len = 4, 32, 16
    cfg.train.prompts_per_step, cfg.train.steps = 8, steps
    cfg.train.tensorboard = cfg.train.plot = False
    cfg.optim.lr = 1e-5
    cfg.mesh.data = -1
    for key, value in MODES[mode].items():
        section, name = key.split(".")
        cfg[section][name] = value
    cfg.lock()
    return cfg


def covered(interval: tuple[float, float], others: list[tuple[float, float]]) -> float:
    """The length of `interval` that the union of `others` covers."""
    start, end = interval
    spans = sorted((max(a, start), min(b, end)) for a, b in others if b > start and a < end)
    total, reach = 0.0, start
    for a, b in spans:
        a = max(a, reach)
        if b > a:
            total, reach = total + b - a, b
    return total


def measure(mode: str, steps: int, warmup: int) -> dict:
    from rl.train import build
    from rl.train.trainer import Trainer

    cfg = config(mode, steps)
    with tempfile.TemporaryDirectory() as workdir:
        run = build.resolve(cfg, workdir)
        trainer = Trainer(run, build.init_params(run), workdir, stream=io.StringIO())
        walls, marks = [], []
        for step in range(1, steps + 1):
            trainer.timeline = []
            start = time.perf_counter()
            trainer.step(step)
            walls.append(time.perf_counter() - start)
            marks.append(trainer.timeline)
        if trainer.overlap is not None:
            trainer.overlap.stop()
        trainer.log.close()
    kept = [m for m in marks[warmup:]]
    learner = [(a, b) for m in kept for phase, a, b in m if phase in ("score", "update")]
    sample = [(a, b) for m in marks for phase, a, b in m if phase == "sample"]
    learner_s = sum(b - a for a, b in learner)
    phase_s = {phase: statistics.median(sum(b - a for p, a, b in m if p == phase)
                                        for m in kept)
               for phase in ("sample", "score", "update", "weights", "wait_batch")}
    return {"mode": mode, "devices": f"{len(run.mesh.devices.flat)} learner"
            + ("" if run.rollout_act is run.act
               else f" + {len(run.rollout_act.mesh.devices.flat)} sampler"),
            "wall_per_step_s": statistics.median(walls[warmup:]),
            "overlap": sum(covered(iv, sample) for iv in learner) / max(learner_s, 1e-9),
            **{f"{k}_s": v for k, v in phase_s.items()}}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=3, help="first steps left out")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args(argv)
    from launch import common, runtime
    common.skip_absent_tpu()  # as the launch/ entry points start JAX
    runtime.configure_xla(base.build("tiny").cpu_xla_flags)
    rows = [measure(mode, args.steps, args.warmup) for mode in args.modes.split(",")]
    sync = next((r["wall_per_step_s"] for r in rows if r["mode"] == "sync"), None)
    for row in rows:
        if sync:
            row["wall_vs_sync"] = row["wall_per_step_s"] / sync
        if args.json:
            print(json.dumps(row))
        else:
            print("  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                            for k, v in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
