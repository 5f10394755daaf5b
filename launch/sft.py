"""Supervised warm start on a procedural task's solutions.

    python -m launch.sft --config=configs/demo.py --workdir=/tmp/sft
    python -m launch.train --config=configs/demo.py --workdir=/tmp/rl \
        --config.model.hf_path=/tmp/sft/sft

Trains `sft.steps` steps of next-token loss on `prompt + solution + eos`
(rl/sft.py), prints held-out greedy accuracy before and after, and writes
the model with its tokenizer as a Hugging Face directory DIR/sft, plus
DIR/sft_metrics.jsonl and DIR/tensorboard/sft.
"""

from __future__ import annotations

import os

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
    from rl import build, sft

    run_, params = prepare(_CONFIG.value, _WORKDIR.value)
    params, summary = sft.train(run_, params, _WORKDIR.value)
    out = build.export(os.path.join(_WORKDIR.value, "sft"), run_, params)
    print(f"wrote {out}")
    print_heldout(summary)


if __name__ == "__main__":
    run(main, default_config=default_config_path("demo.py"))
