"""The embedded default: a tiny model learns a verifiable task on CPU, no downloads.

    python -m launch.demo                          # what `make demo` runs
    python -m launch.demo --workdir=/tmp/demo --config=configs/demo.py:dapo

1. builds the `tiny` preset (4.07M params) from the seed and the byte tokenizer;
2. supervised warm start on task solutions (`sft.*`, rl/sft.py);
3. RL with the config's algorithm (GRPO by default; `:variant` picks another);
4. writes DIR/metrics.jsonl, DIR/sft_metrics.jsonl, DIR/tensorboard/,
   DIR/progress.png (reward and held-out accuracy per RL step), DIR/sft and
   DIR/final (Hugging Face directories);
5. prints, as its last line, greedy held-out accuracy before and after RL:
   `heldout_accuracy: before=X after=Y`.
"""

from __future__ import annotations

import os
import time

from launch.common import (
    default_config_path,
    define_config_flag,
    define_workdir_flag,
    prepare,
    print_heldout,
    run,
)

_CONFIG = define_config_flag("demo.py")
_WORKDIR = define_workdir_flag("runs/demo")


def main(argv):
    del argv
    import jax

    from rl import build, sft
    from rl import trainer as trainer_lib
    from rl.logs import plot

    start = time.perf_counter()
    cfg, workdir = _CONFIG.value, _WORKDIR.value
    run_, params = prepare(cfg, workdir)
    mc = run_.model_config
    print(f"model: {cfg.model.preset} ({mc.num_params() / 1e6:.2f}M params) on "
          f"{jax.device_count()} {jax.devices()[0].platform} device(s); task: "
          f"{cfg.data.task.name}; algorithm: {run_.algorithm.advantage}/{run_.algorithm.loss}")
    example = run_.train_source[0]
    print(f"example prompt: {example.prompt!r} -> solution {example.solution!r}")

    print(f"[1/2] supervised warm start: {cfg.sft.steps} steps")
    params, sft_summary = sft.train(run_, params, workdir)
    build.export(os.path.join(workdir, "sft"), run_, params)
    print(f"      held-out accuracy {sft_summary['before']['heldout/accuracy']:.3f} -> "
          f"{sft_summary['after']['heldout/accuracy']:.3f} ({time.perf_counter() - start:.0f}s)")

    print(f"[2/2] RL: {cfg.train.steps} steps × {cfg.train.prompts_per_step} prompts × "
          f"{run_.samples_per_prompt} samples")
    trainer = trainer_lib.Trainer(run_, params, workdir)
    summary = trainer.run()
    png = plot(workdir, title=f"{cfg.data.task.name}: tiny preset, SFT then "
                              f"{run_.algorithm.advantage}")
    print(f"wrote {trainer.log.path}, {os.path.join(workdir, 'tensorboard')}, {png}")
    print(f"total {time.perf_counter() - start:.0f}s")
    print_heldout(summary)


if __name__ == "__main__":
    run(main, default_config=default_config_path("demo.py"))
