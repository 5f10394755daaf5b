r"""Memory plan of an RL step: `python -m launch.plan --config=configs/<x>.py[:arg]`.

    python -m launch.plan --config=configs/base.py:small
    python -m launch.plan --config=configs/base.py:qwen2.5-7b --devices=8 \
        --accelerator=h100-80gb --config.mesh.fsdp=8 --config.model.dtype=bfloat16

    python -m launch.compile --config=configs/base.py:qwen2.5-7b --topology=v5e-16 \
        --config.mesh.fsdp=16 ... --save=7b.json
    python -m launch.plan --config=configs/base.py:qwen2.5-7b --config.mesh.fsdp=16 ... \
        --compiled=7b.json

Prints each term of the step's memory per device (rl/train/memory_plan.py: the formulas) and, with
`--accelerator`, whether it fits. `--devices=N` plans the config's mesh section on N devices
(one mesh axis may be -1) instead of this machine's: no jax Mesh of that size is built.
`--compiled=FILE` (`launch.compile --save`, launch/compiled.py) takes XLA's figures for the
KV pool and the sampler's and update's temporaries from that compile, on its slice (its
devices, its chip unless `--accelerator` names the same; the same settings, or exit 2).
Nothing is computed and no parameters are built. Exit status: 0 when the plan fits (or no
accelerator is named), 1 when it does not (the last line on stderr names the largest term
and the setting that shrinks it), 2 for a bad flag or config (one line, as launch.train).
"""

from __future__ import annotations

import sys
import tempfile

from absl import flags, logging

from launch import compiled
from launch.common import default_config_path, define_config_flag, run
from rl.train import build, memory_plan

_CONFIG = define_config_flag("base.py")
_ACCELERATOR = flags.DEFINE_string(
    "accelerator", None, "Memory per device to check against: tpu-v4, tpu-v5e, tpu-v5p, "
    "tpu-v6e, h100-80gb, h200-141gb, cpu (this host's RAM) or local (this process's "
    "devices); unset: print only.")
_COMPILED = flags.DEFINE_string(
    "compiled", None, "A launch.compile --save file of this config: XLA's figures replace "
    "the planned sampler and learner terms (local, gs:// or s3://).")
_DEVICES = flags.DEFINE_integer(
    "devices", None, "Plan the config's mesh on this many devices instead of this machine's.",
    lower_bound=1)


def _with_mesh(cfg, sizes):
    """A resolved copy of `cfg` with mesh.{data, fsdp, tensor} = `sizes`."""
    cfg = cfg.copy_and_resolve_references()
    with cfg.unlocked():
        for axis, n in sizes.items():
            cfg.mesh[axis] = n
    return cfg


def _on_compiled(saved, accelerator, devices):
    """(accelerator, devices) of a plan with `saved`'s figures: the slice's; ValueError
    when the flags name others."""
    if accelerator not in (None, saved.accelerator):
        raise ValueError(f"--compiled={_COMPILED.value} was compiled for {saved.slice} "
                         f"({saved.accelerator}), not {accelerator}")
    if devices not in (None, saved.devices):
        raise ValueError(f"--compiled={_COMPILED.value} was compiled for {saved.devices} "
                         f"devices ({saved.slice}), not {devices}")
    return saved.accelerator, saved.devices


def main(argv):
    del argv

    logging.set_verbosity(logging.ERROR)  # replication notes of the planned tensors
    cfg, accelerator, devices = _CONFIG.value, _ACCELERATOR.value, _DEVICES.value
    try:
        saved = None
        if _COMPILED.value is not None:
            saved = compiled.load(_COMPILED.value)
            accelerator, devices = _on_compiled(saved, accelerator, devices)
        if accelerator is not None:
            memory_plan.capacity(accelerator)
        sizes = None
        if devices is not None:
            sizes = memory_plan.mesh_sizes(cfg.mesh, devices)
            if saved is not None:
                compiled.check(saved, _with_mesh(cfg, sizes), _COMPILED.value)
            cfg = _with_mesh(cfg, dict(data=-1, fsdp=1, tensor=1))  # resolve on this machine
        tiles = (accelerator or "").startswith("tpu-")
        with tempfile.TemporaryDirectory() as tmp:  # the byte tokenizer, when one is made
            run_ = build.resolve(cfg, tmp)
            plan = memory_plan.plan(run_, mesh_sizes=sizes, tpu_tiles=tiles,
                                    prompt_len=saved.prompt_len if saved else None)
            if saved is not None:
                plan = plan.with_compiled(compiled.phases(saved, _COMPILED.value),
                                          f"launch.compile for {saved.slice} "
                                          f"({_COMPILED.value})")
    except build.ERRORS as e:
        print(f"error: {build.message(e)}", file=sys.stderr)
        sys.exit(2)
    mc = run_.model_config
    devices = devices or run_.mesh.size
    print(f"memory plan: {cfg.model.hf_path or cfg.model.preset} ({mc.num_params() / 1e6:.1f}M "
          f"params, {mc.param_dtype} params, {mc.dtype} compute, remat {mc.remat}) on "
          f"{devices} device(s); {run_.algorithm.advantage}/{run_.algorithm.loss}, "
          f"{cfg.sampling.sampler} sampling")
    print(plan.format(accelerator))
    if accelerator is not None:
        try:
            plan.check(accelerator)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(1)


if __name__ == "__main__":
    run(main, default_config=default_config_path("base.py"))
