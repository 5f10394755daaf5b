r"""Compile an RL step for a TPU slice, on any machine: `python -m launch.compile`.

    python -m launch.compile --config=configs/base.py:qwen2.5-7b --topology=v5e-16 \
        --config.mesh.data=1 --config.mesh.fsdp=16 --config.model.dtype=bfloat16 \
        --config.model.param_dtype=bfloat16 --config.model.remat=full

Lowers and compiles, for the slice's devices (`launch.topology`: v4, v5e, v5p, v6e by
name, every host's devices; libtpu, the `tpu` extra, compiles them here without a TPU) and
the config's mesh, every program of an RL step (`rl.train.programs`: update, score,
prefill, decode) and prints, per device, what XLA allocates for each: arguments, outputs,
aliased (donated inputs reused as outputs), temporaries, total = arguments + outputs -
aliased + temporaries; what stays on the devices beside it without being its argument
(`rl.train.programs.resident`: AdamW's moments beside the sampler and scoring, the
reference's params), and their sum, the program's peak, against the chip's HBM; the FLOPs
and bytes XLA's cost analysis counts and the time bound max(FLOPs / peak FLOP/s, bytes /
HBM bandwidth) from them (`rl.train.memory_plan.PEAKS`). XLA's cost analysis counts the
body of every loop once, whatever its trip count: one layer of the layer scan, one
minibatch (the update's scan over epochs × minibatches), one logits block
(`train.logits_chunk`) and one decode step (the decode's while loop). So these three
columns are per loop iteration, floors of a step's work, not its totals (a 28-layer
model's update does about 28 times the layer work counted). Progress goes to stderr.
Nothing runs on a device. `--save=FILE` also writes the figures with the settings they
were compiled from, for `launch.plan --compiled=FILE` (launch/compiled.py).

Exit status: 0 when every program's peak fits, 1 when one does not (the last line on
stderr names each that does not and by how much: over the HBM, or refused by XLA's own
check), 2 for a bad flag, config or topology name, or no libtpu (one line; the names
are listed).
"""

from __future__ import annotations

import dataclasses
import sys
import tempfile
import time

import jax
from absl import flags, logging

from launch import compiled as compiled_lib
from launch import topology
from launch.common import default_config_path, define_config_flag, run
from launch.workdir import check_writable
from models import extras, paths, sharding
from rl.train import build, memory_plan, programs
from rl.train.memory_plan import GiB, size

_CONFIG = define_config_flag("base.py")
_TOPOLOGY = flags.DEFINE_string(
    "topology", None, "TPU slice to compile for: v4-N, v5p-N (N TensorCores), v5e-N, v6e-N "
    "(N chips), or generation:shape (v5e:4x4).")
_HBM = flags.DEFINE_float(
    "hbm_gib", None, "Check each program against this many GiB per device instead of the "
    "chip's HBM.", lower_bound=0)
_SAVE = flags.DEFINE_string(
    "save", None, "Also write the figures to this JSON file (local, gs:// or s3://), for "
    "launch.plan --compiled (launch/compiled.py).")
_PROMPT_LEN = flags.DEFINE_integer(
    "prompt_len", None, "Prompt tokens to compile for (default: the longest of the first "
    "256 train prompts, as launch.plan).", lower_bound=1)


LOOP_NOTE = ("* XLA's cost analysis: each loop body counted once (one layer, one minibatch, "
             "one logits block, one decode step), not a step's total")


def on_slice(cfg, slice_: topology.Slice, workdir: str):
    """`build.resolve(cfg)` with its mesh on the slice's devices (the config's sizes; one
    may be -1); raises build.ERRORS."""
    devices = topology.devices(slice_)
    sizes = memory_plan.mesh_sizes(cfg.mesh, len(devices))
    cfg = cfg.copy_and_resolve_references()  # resolve on a mesh this machine has
    with cfg.unlocked():
        cfg.mesh.data, cfg.mesh.fsdp, cfg.mesh.tensor = -1, 1, 1
    run_ = build.resolve(cfg, workdir)
    with cfg.unlocked():
        for axis, n in sizes.items():
            cfg.mesh[axis] = n
    mesh = sharding.make_mesh(sizes, devices)
    return dataclasses.replace(run_, cfg=cfg, mesh=mesh,
                               act=sharding.ActivationSharding(mesh, run_.rules))


def compile_step(run_, prompt_len: int | None = None, stream=sys.stderr,
                 names=programs.PROGRAMS):
    """{program: Figures, or XLA's one-line refusal (str) when it does not fit}, for the
    programs in `names`."""
    out = {}
    start = time.perf_counter()
    for name, lowered in programs.lower_step(run_, prompt_len, names).items():
        print(f"compiling {name} ...", file=stream, flush=True)
        try:
            out[name] = compiled_lib.Figures.of(lowered.compile())
        except jax.errors.JaxRuntimeError as e:
            if "RESOURCE_EXHAUSTED" not in str(e):
                raise
            out[name] = " ".join(str(e).split("RESOURCE_EXHAUSTED:", 1)[-1].split())
        print(f"compiled {name} ({time.perf_counter() - start:.0f}s)", file=stream, flush=True)
    return out


def table(figures: dict, resident: dict, accelerator: str, hbm: int) -> str:
    """The per-program figures as an aligned table; `resident` ({program: bytes}) is what
    stays on the devices beside each program (`rl.train.programs.resident`)."""
    rows = [("program", "arguments", "outputs", "aliased", "temps", "total", "+resident",
             "peak", "of HBM", "GFLOP*", "GB accessed*", "bound*")]
    for name, f in figures.items():
        if isinstance(f, str):
            rows.append((name, "refused by XLA:", f) + ("",) * 9)
            continue
        peak = f.total + resident[name]
        rows.append((name, size(f.arguments), size(f.outputs), size(f.aliased), size(f.temps),
                     size(f.total), size(resident[name]), size(peak), f"{peak / hbm:.0%}",
                     f"{f.flops / 1e9:,.1f}", f"{f.bytes_accessed / 1e9:,.2f}",
                     f"{f.bound(accelerator) * 1e3:.2f} ms"))
    w = [max(len(r[i]) for r in rows if r[1] != "refused by XLA:" or i == 0)
         for i in range(len(rows[0]))]
    return "\n".join(r[0].ljust(w[0]) + "  " + (" ".join(r[1:3]) if r[1] == "refused by XLA:"
                     else "  ".join(c.rjust(w[i + 1]) for i, c in enumerate(r[1:])))
                     for r in rows)


def failures(figures: dict, resident: dict, hbm: int) -> list[str]:
    """One phrase per program whose peak (its total + what stays resident beside it) does
    not fit `hbm` bytes per device."""
    out = []
    for name, f in figures.items():
        if isinstance(f, str):
            out.append(f"{name} (XLA: {f})")
        elif f.total + resident[name] > hbm:
            peak = f.total + resident[name]
            out.append(f"{name} needs {size(peak)} per device ({size(f.total)} + "
                       f"{size(resident[name])} resident), {size(peak - hbm)} more than "
                       f"{size(hbm)}")
    return out


def main(argv):
    del argv
    logging.set_verbosity(logging.ERROR)  # replication notes of small batch dims
    cfg = _CONFIG.value
    try:
        slice_ = topology.parse(_TOPOLOGY.value or "")
        extras.check("libtpu", "tpu", "launch.compile")
        if _SAVE.value:  # before minutes of compiling
            check_writable(paths.dirname(_SAVE.value) or ".", "--save's folder")
        topology.quiet_libtpu(slice_)
        jax.config.update("jax_platforms", "cpu")  # compiles only: nothing runs on a TPU
        with tempfile.TemporaryDirectory() as tmp:  # the byte tokenizer, when one is made
            run_ = on_slice(cfg, slice_, tmp)
            hbm = int(_HBM.value * GiB) if _HBM.value is not None else memory_plan.capacity(
                slice_.accelerator)
            mc = run_.model_config
            print(f"compiled for {slice_.name} ({slice_.generation}:{slice_.shape}, "
                  f"{run_.mesh.size} devices; {size(hbm)} HBM each): "
                  f"{cfg.model.hf_path or cfg.model.preset} ({mc.num_params() / 1e6:.1f}M "
                  f"params, {mc.param_dtype} params, {mc.dtype} compute, remat {mc.remat}); "
                  "mesh " + " ".join(f"{a}={n}" for a, n in run_.mesh.shape.items()), flush=True)
            lp = (_PROMPT_LEN.value if _PROMPT_LEN.value is not None
                  else memory_plan.longest_prompt(run_))
            figures = compile_step(run_, lp)
            resident = programs.resident(run_)
            if _SAVE.value:
                compiled_lib.save(_SAVE.value, run_.cfg, slice_, run_.mesh.size, lp, figures)
    except build.ERRORS as e:
        print(f"error: {build.message(e)}", file=sys.stderr)
        sys.exit(2)
    print(table(figures, resident, slice_.accelerator, hbm))
    print(LOOP_NOTE)
    bad = failures(figures, resident, hbm)
    if bad:
        print(f"error: does not fit {slice_.name}: {'; '.join(bad)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    run(main, default_config=default_config_path("base.py"))
