"""Held-out pass@k of a checkpoint (Hugging Face or Orbax) or a config's initial policy.

    python -m launch.evaluate --config=configs/demo.py --checkpoint=/tmp/run/final
    python -m launch.evaluate --config=configs/base.py:qwen2.5-0.5b \
        --checkpoint=/ckpt/Qwen2.5-0.5B-Instruct --config.data.source=jsonl \
        --config.data.heldout_path=test.jsonl --config.data.path=test.jsonl \
        --config.rl.reward.name=math --config.eval.n=16 --config.eval.k=1,4,16

`--checkpoint` may be a Hugging Face directory (its config.json gives the
architecture, its tokenizer files the tokenizer) or a training workdir. In a
workdir with Orbax checkpoints (DIR/checkpoints) the newest usable one is
evaluated, or `--step=N`; the run's stored config then gives the model,
tokenizer and data, and --config only the `eval` section and seed. A workdir
without checkpoints is evaluated through its `final/` export. Prints greedy
accuracy, pass@k for each k in `eval.k` (unbiased, from `eval.n` samples at
`eval.temperature`), and writes them as JSON to `--output` if given.
"""

from __future__ import annotations

import json
import sys
import tempfile

import jax
from absl import flags

from launch import runtime
from launch.common import default_config_path, define_config_flag, prepare, run
from models import paths
from rl.train import build, evaluation

_CONFIG = define_config_flag("demo.py")
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", "", "Hugging Face directory or training workdir; empty = the config's "
    "initial policy.")
_STEP = flags.DEFINE_integer("step", None, "With a workdir's Orbax checkpoints: the step "
                             "(default: the newest usable).")
_OUTPUT = flags.DEFINE_string("output", "", "Also write the metrics to this JSON file.")


def main(argv):
    del argv

    cfg = _CONFIG.value
    path = _CHECKPOINT.value
    runtime.configure_xla(cfg.cpu_xla_flags)  # before reading a checkpoint starts JAX
    orbax = build.checkpoint_dir(path) if path else None  # a workdir's checkpoints first
    if orbax:
        try:
            stored = build.config_from_checkpoint(orbax, _STEP.value)
        except build.ERRORS as e:
            print(f"error: {build.message(e)}", file=sys.stderr)
            sys.exit(2)
        stored.eval, stored.seed = cfg.eval, cfg.seed
        cfg = stored
    elif path:
        if paths.isdir(paths.join(path, "final")):
            path = paths.join(path, "final")
        if not paths.isfile(paths.join(path, "config.json")):
            print(f"error: checkpoint {path} has no config.json (expected a Hugging Face "
                  "directory or a training workdir with final/)", file=sys.stderr)
            sys.exit(2)
    hf_dir = path if path and not orbax else None  # a Hugging Face directory
    with tempfile.TemporaryDirectory() as tmp, paths.local_copy(hf_dir or tmp) as local:
        if hf_dir:  # downloaded first when it is remote
            cfg.model.hf_path = local
        run_, params = prepare(cfg, tmp, logs=False, resume=False, init=not orbax)
        if orbax:
            try:
                step, params = build.checkpoint_params(run_, orbax, _STEP.value)
            except build.ERRORS as e:
                print(f"error: {build.message(e)}", file=sys.stderr)
                sys.exit(2)
            print(f"checkpoint: step {step} of {orbax}")
        if run_.heldout_source is None:
            print("error: no held-out data (set data.heldout_path, data.tfds_heldout_split or "
                  "use a procedural task)", file=sys.stderr)
            sys.exit(2)
        metrics = evaluation.evaluate(run_, params, jax.random.key(cfg.seed + 2))
    for key, value in metrics.items():
        print(f"{key}: {value:.4f}")
    if _OUTPUT.value:
        paths.write_text(_OUTPUT.value, json.dumps(metrics, indent=2))


if __name__ == "__main__":
    run(main, default_config=default_config_path("demo.py"))
