"""RL post-training: `python -m launch.train --config=configs/<x>.py[:variant] --workdir=DIR`.

    python -m launch.train --config=configs/demo.py --workdir=/tmp/run
    python -m launch.train --config=configs/demo.py:dapo --workdir=/tmp/dapo \
        --config.train.steps=200 --config.optim.lr=3e-5
    python -m launch.train --config=configs/base.py:qwen2.5-0.5b,grpo --workdir=... \
        --config.model.hf_path=/ckpt/Qwen2.5-0.5B --config.data.source=jsonl \
        --config.data.path=train.jsonl --config.rl.reward.name=math

Writes DIR/metrics.jsonl (one JSON object per step), DIR/tensorboard/,
DIR/progress.png, DIR/config.json and the final policy as a Hugging Face
directory DIR/final (model + tokenizer; loadable by launch/evaluate.py,
transformers, or as `model.hf_path` of another run). Every config key is
documented in configs/base.py. A bad key, verifier, task or data file fails
before any compute with one line on stderr and exit status 2.
"""

from __future__ import annotations

from launch.common import (
    default_config_path,
    define_config_flag,
    define_workdir_flag,
    prepare,
    print_heldout,
    run,
)

_CONFIG = define_config_flag("demo.py")
_WORKDIR = define_workdir_flag()


def main(argv):
    del argv
    from rl import trainer as trainer_lib
    from rl.logs import plot

    run_, params = prepare(_CONFIG.value, _WORKDIR.value)
    trainer = trainer_lib.Trainer(run_, params, _WORKDIR.value)
    summary = trainer.run()
    png = plot(_WORKDIR.value)
    print(f"wrote {trainer.log.path}, {png} and {_WORKDIR.value}/final")
    print_heldout(summary)


if __name__ == "__main__":
    run(main, default_config=default_config_path("demo.py"))
