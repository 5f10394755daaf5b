"""What fault tolerance costs: snapshot overhead per step, restore from memory vs disk,
the persistent save's blocking time. Workloads W1 (`tiny`) and the `small` preset.

    python benchmarks/snapshot.py --json
    python benchmarks/snapshot.py --json --workloads W1 --pairs 30

For each workload a `rl.train.trainer.Trainer` (benchmarks/rl_step.py's W1 settings;
`small` swaps in the 31.7M-parameter preset) runs warm-up steps, then:
  * step overhead: `--pairs` interleaved pairs of steps, one plain and one
    followed by `rl.checkpoint.snapshot.Snapshots.take` of the full train state (what
    `checkpoint.snapshot_every=1` adds to every step), in alternating order;
    the cost of one snapshot is the mean paired difference (with its standard
    error), also as a fraction of the median plain step; the per-step overhead
    at `--snapshot_every` (default: the config's) is that fraction divided by
    the cadence. `take_blocking_s` is the time `take` itself holds the step;
    the copy's own duration is measured apart (`copy_s`: take + wait for it to
    arrive). On a CPU the copy is a memcpy that runs while `take` returns, so
    most of it shows up in the step;
  * restore: the same state from the newest in-memory snapshot
    (`Snapshots.restore`) and from an Orbax checkpoint on local disk
    (`Checkpoints.restore`, the resume path, checksums included), each until
    the arrays are on the device, median of `--repeats`, side by side;
  * persistent save: the time `Checkpoints.save` blocks the step (asynchronous
    write) and the time until the checkpoint is complete on disk.
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.rl_step import w1_config


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(name: str, preset: str, pairs: int, repeats: int, warmup: int,
            every: int) -> dict:
    import jax

    from rl.checkpoint.persistent import Checkpoints
    from rl.checkpoint.snapshot import Snapshots
    from rl.train import build
    from rl.train.trainer import Trainer

    cfg = w1_config()
    cfg.unlock()
    cfg.model.preset = preset
    cfg.lock()
    with tempfile.TemporaryDirectory() as workdir:
        run = build.resolve(cfg, workdir)
        trainer = Trainer(run, build.init_params(run), workdir, stream=io.StringIO())
        for _ in range(warmup):
            trainer.step()
        snaps = Snapshots()
        state_bytes = sum(x.nbytes for x in jax.tree.leaves(
            jax.tree.map(lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(
                x.dtype, jax.dtypes.prng_key) else x, trainer.get_state())))

        plain, snap, blocking = [], [], []
        for i in range(pairs):
            for with_snapshot in ((False, True) if i % 2 == 0 else (True, False)):
                start = time.perf_counter()
                trainer.step()
                if with_snapshot:
                    t = time.perf_counter()
                    snaps.take(i, trainer.get_state(), trainer.host_state())
                    blocking.append(time.perf_counter() - t)
                (snap if with_snapshot else plain).append(time.perf_counter() - start)
        diffs = [s - p for s, p in zip(snap, plain)]
        step = statistics.median(plain)
        mean_diff = statistics.fmean(diffs)
        stderr = statistics.stdev(diffs) / len(diffs) ** 0.5

        def copy():
            snaps.take(0, trainer.get_state(), trainer.host_state())
            jax.block_until_ready(snaps.pending.arrays)

        copy_s = _median_time(copy, repeats)
        template = trainer.get_state()
        memory_s = _median_time(
            lambda: jax.block_until_ready(snaps.restore(template)[1]), repeats)

        ckpts = Checkpoints(os.path.join(workdir, "ckpt"), config=cfg, keep=2)
        save_blocking, save_total = [], []
        for index in range(1, repeats + 1):
            start = time.perf_counter()
            ckpts.save(index, trainer.get_state(), trainer.host_state())
            save_blocking.append(time.perf_counter() - start)
            ckpts.wait()
            save_total.append(time.perf_counter() - start)
        newest = ckpts.steps()[-1]
        disk_s = _median_time(
            lambda: jax.block_until_ready(ckpts.restore(newest, template)[0]), repeats)
        ckpts.close()
        trainer.log.close()
    return {
        "workload": name, "preset": preset,
        "params_M": run.model_config.num_params() / 1e6, "state_MB": state_bytes / 2**20,
        "step_s": step, "pairs": pairs,
        "snapshot_cost_s": mean_diff, "snapshot_cost_stderr_s": stderr,
        "snapshot_cost_frac": mean_diff / step,
        "snapshot_every": every, "overhead_frac_at_snapshot_every": mean_diff / step / every,
        "take_blocking_s": statistics.median(blocking),
        "take_blocking_frac": statistics.median(blocking) / step,
        "copy_s": copy_s,
        "restore_memory_s": memory_s, "restore_disk_s": disk_s,
        "disk_over_memory": disk_s / memory_s,
        "save_blocking_s": statistics.median(save_blocking),
        "save_total_s": statistics.median(save_total),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--workloads", default="W1,small",
                        help="comma-separated: W1 (tiny preset), small")
    parser.add_argument("--pairs", type=int, default=30, help="interleaved step pairs")
    parser.add_argument("--repeats", type=int, default=7, help="restore / save repeats")
    parser.add_argument("--warmup", type=int, default=3, help="steps before timing")
    parser.add_argument("--snapshot_every", type=int, default=0,
                        help="cadence the per-step overhead is given for (0 = the config "
                             "default, checkpoint.snapshot_every)")
    args = parser.parse_args(argv)
    presets = {"W1": "tiny", "small": "small"}
    names = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in names if w not in presets]
    if unknown:
        parser.error(f"unknown workload {unknown[0]!r} (choose from {', '.join(presets)})")

    from configs import base
    from launch import runtime
    runtime.configure_xla(w1_config().cpu_xla_flags)  # as the launch/ entry points do
    for name in names:
        row = measure(name, presets[name], args.pairs, args.repeats, args.warmup,
                      args.snapshot_every or base.checkpoint_section().snapshot_every)
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print("  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                            for k, v in row.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
