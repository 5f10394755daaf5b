"""launch.compile: an RL step's programs compiled for a TPU v5e 2×2 slice on this CPU
machine (libtpu, the `tpu` extra that `make test` installs, compiles them; nothing runs).

The tiny preset compiles in this process (every program, the update's argument bytes
checked against the state and batch shapes); the small preset through the entry point,
against an HBM it cannot fit (exit 1, one line naming the program)."""

from __future__ import annotations

import dataclasses
import importlib.util
import math
import subprocess
import sys

import jax
import pytest

from configs import base
from launch import compile as compile_lib
from launch import compiled, topology
from rl.train import programs
from rl.train.memory_plan import size
from tests import subprocess_env

needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="libtpu is not installed (pip install -e '.[tpu]'; "
                                  "make test installs it)")

SLICE = "v5e-4"  # v5e:2x2, one host


def _shard_bytes(info, layout) -> int:
    """Bytes of one device's shard of an input as the compiled program lays it out: the
    shard's dims in `layout`'s minor-to-major order, the most minor ones padded to the
    layout's tile (the TPU's (8, 128)-style tiles), times the item size."""
    key = jax.dtypes.issubdtype(info.dtype, jax.dtypes.prng_key)
    shape = info.sharding.shard_shape(info.shape) + ((2,) if key else ())  # threefry: 2 × u32
    if layout is None:  # no device layout reported: dense
        return math.prod(shape) * (4 if key else info.dtype.itemsize)
    dims = [shape[d] for d in layout.major_to_minor]
    tile = layout.tiling[0] if layout.tiling else ()
    for i, t in enumerate(reversed(tile)):
        if i < len(dims):
            dims[-1 - i] = -(-dims[-1 - i] // t) * t
    dims = dims or [tile[0] if tile else 1]
    return math.prod(dims) * (4 if key else info.dtype.itemsize)


@pytest.fixture
def as_launch_compile():
    """The process settings `python -m launch.compile` compiles under: JAX's default
    matmul precision (the suite's "highest" makes libtpu lower every f32 matmul as
    several bf16 passes: the tiny update compiled in 164 s instead of 29 s, with 67% more
    temporaries) and no persistent cache (the suite's is for its CPU programs: a TPU
    executable compiled without a TPU client can be neither stored nor read back)."""
    before = jax.config.jax_default_matmul_precision, jax.config.jax_enable_compilation_cache
    jax.config.update("jax_default_matmul_precision", None)
    jax.config.update("jax_enable_compilation_cache", False)
    yield
    jax.config.update("jax_default_matmul_precision", before[0])
    jax.config.update("jax_enable_compilation_cache", before[1])


def _tiny(tmp_path):
    """The tiny preset's model on v5e 2×2 (FSDP over the 4 chips), a small step: 4
    prompts of 2 samples of 16 tokens."""
    cfg = base.get_config("tiny")
    with cfg.unlocked():
        cfg.mesh.data, cfg.mesh.fsdp = 1, 4
        cfg.train.prompts_per_step, cfg.sampling.n, cfg.sampling.max_new_tokens = 4, 2, 16
    slice_ = topology.parse(SLICE)
    topology.quiet_libtpu(slice_)
    return compile_lib.on_slice(cfg, slice_, str(tmp_path))


@needs_libtpu
@pytest.mark.slow
def test_tiny_step_compiles_for_v5e_2x2(tmp_path, as_launch_compile):
    run_ = _tiny(tmp_path)
    assert run_.mesh.size == 4 and run_.mesh.devices.flat[0].platform == "tpu"
    lowered = programs.lower_step(run_, prompt_len=20)
    assert list(lowered) == list(programs.PROGRAMS)
    # on TPU the decode reads pages through the Pallas kernel (models.pallas_attention)
    assert "paged_partial" in lowered["decode"].as_text()
    executables = {name: low.compile() for name, low in lowered.items()}
    figures = {name: compiled.Figures.of(c) for name, c in executables.items()}
    for name, f in figures.items():
        assert f.arguments > 0 and f.total > 0 and f.flops > 0 and f.bytes_accessed > 0, name
    # the update's arguments are exactly the state's and batch's shards as the program
    # lays them out, less the inputs it does not read (jit drops them): ref_logp, the
    # KL being off (tiny's rl.kl.coef = 0)
    learner = programs.make_learner(run_)
    assert not learner.kl_in_loss
    state = programs.abstract_state(run_, learner)
    batch = programs.abstract_batch(run_, learner, 20)
    formats = jax.tree.leaves(executables["update"].input_formats[0])
    leaves = jax.tree_util.tree_leaves_with_path((state, batch))
    expected = [0 if "ref_logp" in jax.tree_util.keystr(path) else _shard_bytes(x, f.layout)
                for (path, x), f in zip(leaves, formats, strict=True)]
    assert figures["update"].arguments == sum(expected)
    # the update donates its state: every state byte comes back aliased as an output
    assert figures["update"].aliased == sum(expected[:len(jax.tree.leaves(state))])
    # prefill writes the pool that decode reads and gives back (donated)
    assert 0 < figures["decode"].aliased <= figures["prefill"].outputs
    # beside the sampler and scoring, AdamW's two params-shaped moments stay resident (and
    # the counts, step and key: a few bytes); no reference (KL off), so none beside the update
    resident = programs.resident(run_)
    params = programs.shard_bytes(state.params)
    assert resident["update"] == 0
    assert 0 < resident["decode"] - 2 * params <= 64, (resident, params)
    assert resident["score"] == resident["prefill"] == resident["decode"]
    kl = programs.resident(dataclasses.replace(
        run_, algorithm=dataclasses.replace(run_.algorithm, kl_coef=0.01)))
    assert kl["update"] == params and kl["decode"] == resident["decode"] + params


SMALL = ["--config=configs/base.py:small", "--config.mesh.data=1", "--config.mesh.fsdp=4",
         "--config.train.prompts_per_step=4", "--config.sampling.n=2",
         "--config.sampling.max_new_tokens=16"]


@needs_libtpu
@pytest.mark.slow
def test_small_does_not_fit_a_tiny_hbm_and_plans_from_its_figures(tmp_path):
    """launch.compile exits 1 naming the update; its --save file then gives launch.plan
    XLA's figures for the same settings (on the slice's 4 devices and chip)."""
    saved = str(tmp_path / "small.json")
    out = subprocess.run(
        [sys.executable, "-m", "launch.compile", *SMALL, f"--topology={SLICE}",
         "--hbm_gib=0.01", f"--save={saved}"], env=subprocess_env.env(),
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stderr[-2000:]
    head = out.stdout.splitlines()
    assert head[0].startswith(f"compiled for {SLICE} (v5e:2x2, 4 devices") and "small" in head[0]
    assert [line.split()[0] for line in head[2:-1]] == list(programs.PROGRAMS)
    assert head[-1] == compile_lib.LOOP_NOTE
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: does not fit {SLICE}: update needs ") and "more than" in last
    assert not [line for line in out.stderr.splitlines()
                if "TPU_" in line or "INVALID_ARGUMENT" in line], out.stderr  # libtpu quiet
    figures = compiled.load(saved).programs
    plan = subprocess.run([sys.executable, "-m", "launch.plan", *SMALL, f"--compiled={saved}"],
                          env=subprocess_env.env(), capture_output=True, text=True, timeout=300)
    assert plan.returncode == 0, plan.stderr[-2000:]
    lines = plan.stdout.splitlines()
    assert " on 4 device(s)" in lines[0]
    for name, figure in (("kv pool", figures["decode"].aliased),
                         ("decode temps", figures["decode"].temps),
                         ("prefill temps", figures["prefill"].temps),
                         ("update temps", figures["update"].temps)):
        assert [line for line in lines if line.startswith(f"{name} (compiled) ")
                and f" {size(figure)} " in line], (name, plan.stdout)
    assert lines[-2] == f"compiled figures: launch.compile for {SLICE} ({saved})"
    assert lines[-1].startswith("tpu-v5e: 16.00 GiB per device;") and lines[-1].endswith("fits")


@needs_libtpu
def test_save_to_a_folder_that_cannot_be_written_fails_before_compiling(tmp_path):
    (tmp_path / "file").write_text("")
    out = subprocess.run(
        [sys.executable, "-m", "launch.compile", *SMALL, f"--topology={SLICE}",
         f"--save={tmp_path}/file/small.json"], env=subprocess_env.env(),
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1] == (
        f"error: --save's folder {tmp_path}/file exists and is not a directory")
    assert "compiling" not in out.stderr


def test_bad_topology():
    out = subprocess.run([sys.executable, "-m", "launch.compile", "--topology=v5e-3"],
                         env=subprocess_env.env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith(
        "error: unknown TPU topology 'v5e-3'; known: v4-8,")
    for name in ("v5p:3x3x3", "v5e-0", "v7-8", "v5p-6", "v5e:2x2x1"):  # the same message
        with pytest.raises(ValueError, match=f"unknown TPU topology '{name}'; known: v4-8,"):
            topology.parse(name)


def test_topology_names():
    assert topology.parse("v5e-16").shape == "4x4"
    v5p = topology.parse("v5p-8")
    assert (v5p.shape, v5p.chips, v5p.accelerator_type) == ("2x2x1", 4, "v5p-8")
    assert topology.parse("v4-32").shape == "2x2x4"
    assert topology.parse("v5e:2x4").chips == 8


def test_without_libtpu_one_line_names_the_extra():
    """libtpu hidden from the process (as where the `tpu` extra is not installed): exit 2
    before any compile, one line naming the extra."""
    code = ("import runpy, sys; sys.modules['libtpu'] = None; "
            "sys.argv = ['launch.compile', '--config=configs/base.py:tiny', '--topology=v5e-4']; "
            "runpy.run_module('launch.compile', run_name='__main__')")
    out = subprocess.run([sys.executable, "-c", code], env=subprocess_env.env(),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        "error: launch.compile needs libtpu, which is not installed: pip install "
        "'rlvr-jax[tpu]' (or pip install -e '.[tpu]' in a clone)"), out.stderr
