r"""Any Orbax checkpoint of a run as a Hugging Face directory.

    python -m launch.export --workdir=/tmp/run --out=/tmp/run_hf            # newest usable
    python -m launch.export --workdir=/tmp/run --step=300 --out=/tmp/step300
    python -m launch.export --workdir=/tmp/run --sft --out=/tmp/sft_hf      # the warm start's

Reads the checkpoint's own config (the architecture, the tokenizer), restores
only the parameters and writes `model.safetensors` + `config.json` + the
tokenizer files: loadable by transformers, launch.evaluate, or as another
run's `model.hf_path`. A damaged newest checkpoint is skipped with a warning
(an explicit --step that is damaged is an error). `--out` must be a new or empty
directory: an export never overwrites a run's files.
"""

from __future__ import annotations

import sys

from absl import flags

from configs.base import CPU_XLA_FLAGS
from launch import runtime
from launch.common import run
from models import paths
from rl.train import build

_WORKDIR = flags.DEFINE_string("workdir", None, "Training workdir (or its checkpoints/ "
                               "directory).", required=True)
_OUT = flags.DEFINE_string("out", None, "Hugging Face directory to write: new, or empty "
                           "(an existing directory with files is refused).", required=True)
_STEP = flags.DEFINE_integer("step", None, "Checkpoint step (default: the newest usable).")
_SFT = flags.DEFINE_bool("sft", False, "Export the supervised warm start's checkpoints "
                         "(DIR/sft_checkpoints) instead of the RL run's.")


def main(argv):
    del argv

    runtime.configure_xla(CPU_XLA_FLAGS)  # before reading the checkpoint starts JAX
    workdir = _WORKDIR.value
    directory = (paths.join(workdir, "sft_checkpoints") if _SFT.value
                 else build.checkpoint_dir(workdir))
    if directory is None or not paths.isdir(directory):
        print(f"error: {workdir} has no Orbax checkpoints (expected {workdir}/checkpoints/<step>)",
              file=sys.stderr)
        sys.exit(2)
    out = _OUT.value
    if paths.exists(out) and (not paths.isdir(out) or paths.listdir(out)):
        print(f"error: --out {out} exists and is not an empty directory: an export writes a "
              "new directory and never overwrites (a run's workdir, its final/ or sft/ "
              "included); name a new one", file=sys.stderr)
        sys.exit(2)
    try:
        cfg = build.config_from_checkpoint(directory, _STEP.value)
        run_ = build.resolve(cfg, paths.dirname(paths.absolute(directory)))
        step, params = build.checkpoint_params(run_, directory, _STEP.value)
    except build.ERRORS as e:
        print(f"error: {build.message(e)}", file=sys.stderr)
        sys.exit(2)
    build.export(out, run_, params)
    print(f"wrote {out} (step {step} of {directory})")


if __name__ == "__main__":
    run(main)
