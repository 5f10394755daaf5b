"""The embedded default: a tiny model learns a verifiable task on CPU, no downloads.

    python -m launch.demo                          # what `make demo` runs
    python -m launch.demo --workdir=/tmp/demo --config=configs/demo.py:dapo

`launch.train` with the demo config (configs/demo.py) and workdir runs/demo:
1. builds the `tiny` preset (4.07M params) from the seed and the byte tokenizer;
2. supervised warm start on task solutions (`sft.*`, rl/train/sft.py), or reuses
   DIR/sft from an earlier run of the same settings;
3. RL with the config's algorithm (GRPO by default; `:variant` picks another);
4. writes DIR/metrics.jsonl, DIR/sft_metrics.jsonl, DIR/tensorboard/,
   DIR/progress.png (training reward and held-out accuracy per RL step),
   DIR/sft and DIR/final (Hugging Face directories);
5. prints, as its last line, greedy held-out accuracy before and after RL:
   `heldout_accuracy: before=X after=Y`.
"""

from __future__ import annotations

from launch.common import (
    default_config_path,
    define_config_flag,
    define_fresh_flag,
    define_workdir_flag,
    prepare,
    print_heldout,
    run,
    train,
)

_CONFIG = define_config_flag("demo.py")
_FRESH = define_fresh_flag()
_WORKDIR = define_workdir_flag("runs/demo")


def main(argv):
    del argv
    run_, params = prepare(_CONFIG.value, _WORKDIR.value, fresh=_FRESH.value)
    print_heldout(train(run_, params, _WORKDIR.value))


if __name__ == "__main__":
    run(main, default_config=default_config_path("demo.py"))
