"""Held-out pass@k of a checkpoint (a Hugging Face directory) or a config's initial policy.

    python -m launch.evaluate --config=configs/demo.py --checkpoint=/tmp/run/final
    python -m launch.evaluate --config=configs/base.py:qwen2.5-0.5b \
        --checkpoint=/ckpt/Qwen2.5-0.5B-Instruct --config.data.source=jsonl \
        --config.data.heldout_path=test.jsonl --config.data.path=test.jsonl \
        --config.rl.reward.name=math --config.eval.n=16 --config.eval.k=1,4,16

`--checkpoint` may be a training workdir (its `final/` is used). The
checkpoint's config.json gives the architecture and its tokenizer files the
tokenizer. Prints greedy accuracy, pass@k for each k in `eval.k` (unbiased,
from `eval.n` samples at `eval.temperature`), and writes them as JSON to
`--output` if given.
"""

from __future__ import annotations

import json
import os
import sys

from absl import flags

from launch.common import default_config_path, define_config_flag, prepare, run

_CONFIG = define_config_flag("demo.py")
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", "", "Hugging Face directory or training workdir; empty = the config's "
    "initial policy.")
_OUTPUT = flags.DEFINE_string("output", "", "Also write the metrics to this JSON file.")


def main(argv):
    del argv
    import tempfile

    import jax

    from rl import evaluation

    cfg = _CONFIG.value
    path = _CHECKPOINT.value
    if path:
        if os.path.isdir(os.path.join(path, "final")):
            path = os.path.join(path, "final")
        if not os.path.isfile(os.path.join(path, "config.json")):
            print(f"error: checkpoint {path} has no config.json (expected a Hugging Face "
                  "directory or a training workdir with final/)", file=sys.stderr)
            sys.exit(2)
        cfg.model.hf_path = path
    with tempfile.TemporaryDirectory() as tmp:
        run_, params = prepare(cfg, tmp, logs=False)
        if run_.heldout_source is None:
            print("error: no held-out data (set data.heldout_path, data.tfds_heldout_split or "
                  "use a procedural task)", file=sys.stderr)
            sys.exit(2)
        metrics = evaluation.evaluate(run_, params, jax.random.key(cfg.seed + 2))
    for key, value in metrics.items():
        print(f"{key}: {value:.4f}")
    if _OUTPUT.value:
        with open(_OUTPUT.value, "w") as f:
            json.dump(metrics, f, indent=2)


if __name__ == "__main__":
    run(main, default_config=default_config_path("demo.py"))
