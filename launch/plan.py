r"""Memory plan of an RL step: `python -m launch.plan --config=configs/<x>.py[:arg]`.

    python -m launch.plan --config=configs/base.py:small
    python -m launch.plan --config=configs/base.py:qwen2.5-7b --devices=8 \
        --accelerator=h100-80gb --config.mesh.fsdp=8 --config.model.dtype=bfloat16

Prints each term of the step's memory per device (rl/train/memory_plan.py: the formulas) and, with
`--accelerator`, whether it fits. `--devices=N` plans the config's mesh section on N devices
(one mesh axis may be -1) instead of this machine's: no jax Mesh of that size is built.
Nothing is computed and no parameters are built. Exit status: 0 when the plan fits (or no
accelerator is named), 1 when it does not (the last line on stderr names the largest term
and the setting that shrinks it), 2 for a bad flag or config (one line, as launch.train).
"""

from __future__ import annotations

import sys
import tempfile

from absl import flags, logging

from launch.common import default_config_path, define_config_flag, run
from rl.train import build, memory_plan

_CONFIG = define_config_flag("base.py")
_ACCELERATOR = flags.DEFINE_string(
    "accelerator", None, "Memory per device to check against: tpu-v4, tpu-v5e, tpu-v5p, "
    "tpu-v6e, h100-80gb, h200-141gb, cpu (this host's RAM) or local (this process's "
    "devices); unset: print only.")
_DEVICES = flags.DEFINE_integer(
    "devices", None, "Plan the config's mesh on this many devices instead of this machine's.",
    lower_bound=1)


def main(argv):
    del argv

    logging.set_verbosity(logging.ERROR)  # replication notes of the planned tensors
    cfg = _CONFIG.value
    try:
        if _ACCELERATOR.value is not None:
            memory_plan.capacity(_ACCELERATOR.value)
        sizes = None
        if _DEVICES.value is not None:
            sizes = memory_plan.mesh_sizes(cfg.mesh, _DEVICES.value)
            cfg = cfg.copy_and_resolve_references()  # resolve on a mesh this machine has
            with cfg.unlocked():
                cfg.mesh.data, cfg.mesh.fsdp, cfg.mesh.tensor = -1, 1, 1
        with tempfile.TemporaryDirectory() as tmp:  # the byte tokenizer, when one is made
            run_ = build.resolve(cfg, tmp)
            plan = memory_plan.plan(run_, mesh_sizes=sizes)
    except build.ERRORS as e:
        print(f"error: {build.message(e)}", file=sys.stderr)
        sys.exit(2)
    mc = run_.model_config
    devices = _DEVICES.value or run_.mesh.size
    print(f"memory plan: {cfg.model.hf_path or cfg.model.preset} ({mc.num_params() / 1e6:.1f}M "
          f"params, {mc.param_dtype} params, {mc.dtype} compute, remat {mc.remat}) on "
          f"{devices} device(s); {run_.algorithm.advantage}/{run_.algorithm.loss}, "
          f"{cfg.sampling.sampler} sampling")
    print(plan.format(_ACCELERATOR.value))
    if _ACCELERATOR.value is not None:
        try:
            plan.check(_ACCELERATOR.value)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    run(main, default_config=default_config_path("base.py"))
