"""Supervised warm start on a procedural task's solutions.

    python -m launch.sft --config=configs/demo.py --workdir=/tmp/sft
    python -m launch.train --config=configs/demo.py --workdir=/tmp/rl \
        --config.model.hf_path=/tmp/sft/sft --config.train.warm_start=

Trains `sft.steps` steps of next-token loss on `prompt + solution + eos`
(rl/train/sft.py), prints held-out greedy accuracy before and after, and writes
the model with its tokenizer as a Hugging Face directory DIR/sft, plus
DIR/sft_metrics.jsonl and DIR/tensorboard/sft. A finished DIR/sft of the
same settings is reused, not retrained. `launch.train` with
`train.warm_start=sft` (the demo config's default) does this step itself
in its own workdir; the commands above keep the two runs apart.
"""

from __future__ import annotations

import os

from launch import distributed
from launch.common import (
    default_config_path,
    define_config_flag,
    define_fresh_flag,
    define_workdir_flag,
    prepare,
    print_heldout,
    run,
)
from rl.train import sft

_CONFIG = define_config_flag("demo.py")
_FRESH = define_fresh_flag()
_WORKDIR = define_workdir_flag()
distributed.define_flags()


def main(argv):
    del argv

    run_, params = prepare(_CONFIG.value, _WORKDIR.value, for_sft=True,
                           fresh=_FRESH.value)
    _, summary, reused = sft.warm_start(run_, params, _WORKDIR.value)
    out = os.path.join(_WORKDIR.value, "sft")
    print(f"{'reused' if reused else 'wrote'} {out}")
    print_heldout(summary)


if __name__ == "__main__":
    run(main, default_config=default_config_path("demo.py"))
