r"""RL post-training: `python -m launch.train --config=configs/<x>.py[:arg] --workdir=DIR`.

    python -m launch.train --config=configs/demo.py --workdir=/tmp/run
    python -m launch.train --config=configs/demo.py:tree --workdir=/tmp/tree
    python -m launch.train --config=configs/demo.py:dapo --workdir=/tmp/dapo \
        --config.train.steps=200 --config.optim.lr=3e-5
    python -m launch.train --config=configs/base.py:qwen2.5-0.5b,grpo --workdir=... \
        --config.model.hf_path=/ckpt/Qwen2.5-0.5B --config.data.source=jsonl \
        --config.data.path=train.jsonl --config.rl.reward.name=math

With `train.warm_start=sft` (the demo config) it first runs the supervised
warm start (DIR/sft, reused by a rerun) and starts RL from it. Writes
DIR/metrics.jsonl (one JSON object per step), DIR/tensorboard/,
DIR/progress.png, DIR/config.json and the final policy as a Hugging Face
directory DIR/final (model + tokenizer; loadable by launch.evaluate,
transformers, or as `model.hf_path` of another run). Every config key is
documented in configs/base.py. A bad key, value, verifier, task or data file
fails before any compute with one line on stderr and exit status 2. The last
line printed is `heldout_accuracy: before=X after=Y` (greedy, before and after RL).
"""

from __future__ import annotations

from launch import distributed
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
_WORKDIR = define_workdir_flag()
distributed.define_flags()


def main(argv):
    del argv
    run_, params = prepare(_CONFIG.value, _WORKDIR.value, fresh=_FRESH.value)
    print_heldout(train(run_, params, _WORKDIR.value))


if __name__ == "__main__":
    run(main, default_config=default_config_path("demo.py"))
