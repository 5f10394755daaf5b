"""launch.compile: an RL step's programs compiled for a TPU v5e 2×2 slice on this CPU
machine (libtpu, the `tpu` extra that `make test` installs, compiles them; nothing runs).

The tiny preset compiles in this process (every program, the update's argument bytes
checked against the state and batch shapes); the small preset through the entry point,
against an HBM it cannot fit (exit 1, one line naming the program)."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys

import jax
import pytest

from configs import base
from launch import compile as compile_lib
from launch import topology
from rl.train import programs
from tests import subprocess_env

pytestmark = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                reason="libtpu is not installed (pip install -e '.[tpu]'; "
                                "make test installs it)")

SLICE = "v5e-4"  # v5e:2x2, one host


def _shard_bytes(info, layout) -> int:
    """Bytes of one device's shard of an input as the compiled program lays it out: the
    shard's dims in `layout`'s minor-to-major order, the most minor ones padded to the
    layout's tile (the TPU's (8, 128)-style tiles), times the item size."""
    key = jax.dtypes.issubdtype(info.dtype, jax.dtypes.prng_key)
    shape = info.sharding.shard_shape(info.shape) + ((2,) if key else ())  # threefry: 2 × u32
    if layout is None:  # no device layout reported (the PRNG key): dense
        return math.prod(shape) * (4 if key else info.dtype.itemsize)
    dims = [shape[d] for d in layout.major_to_minor]
    tile = layout.tiling[0] if layout.tiling else ()
    for i, t in enumerate(reversed(tile)):
        if i < len(dims):
            dims[-1 - i] = -(-dims[-1 - i] // t) * t
    dims = dims or [tile[0] if tile else 1]
    return math.prod(dims) * (4 if key else info.dtype.itemsize)


@pytest.fixture
def no_compilation_cache():
    """The suite's persistent cache is for its CPU programs: a TPU executable compiled
    without a TPU client can be neither stored nor read back."""
    before = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    yield
    jax.config.update("jax_enable_compilation_cache", before)


@pytest.mark.slow
def test_tiny_step_compiles_for_v5e_2x2(tmp_path, no_compilation_cache):
    cfg = base.get_config("tiny")
    with cfg.unlocked():
        cfg.mesh.data, cfg.mesh.fsdp = 1, 4
    slice_ = topology.parse(SLICE)
    topology.quiet_libtpu(slice_)
    run_ = compile_lib.on_slice(cfg, slice_, str(tmp_path))
    assert run_.mesh.size == 4 and run_.mesh.devices.flat[0].platform == "tpu"
    figures = compile_lib.compile_step(run_, prompt_len=20)
    assert list(figures) == list(programs.PROGRAMS)
    for name, f in figures.items():
        assert not isinstance(f, str), f"{name}: {f}"
        assert f.arguments > 0 and f.total > 0 and f.flops > 0 and f.bytes_accessed > 0, name
    # the update donates its state: every state byte comes back aliased as an output
    learner = programs.make_learner(run_)
    state = programs.abstract_state(run_, learner)
    batch = programs.abstract_batch(run_, learner, 20)
    compiled = learner.train_step.lower(state, batch).compile()
    formats = jax.tree.leaves(compiled.input_formats[0])
    leaves = jax.tree.leaves((state, batch))
    expected = [_shard_bytes(x, f.layout) for x, f in zip(leaves, formats, strict=True)]
    # arguments: exactly the state's and batch's shards as laid out (no other input)
    assert figures["update"].arguments == sum(expected)
    assert figures["update"].aliased == sum(expected[:len(jax.tree.leaves(state))])
    # prefill writes the pool that decode reads and gives back (donated)
    assert figures["decode"].aliased <= figures["prefill"].outputs
    assert figures["decode"].aliased > 0


@pytest.mark.slow
def test_small_does_not_fit_a_tiny_hbm():
    out = subprocess.run(
        [sys.executable, "-m", "launch.compile", "--config=configs/base.py:small",
         f"--topology={SLICE}", "--config.mesh.data=1", "--config.mesh.fsdp=4",
         "--hbm_gib=0.01"], env=subprocess_env.env(), capture_output=True, text=True,
        timeout=600)
    assert out.returncode == 1, out.stderr[-2000:]
    head = out.stdout.splitlines()
    assert head[0].startswith(f"compiled for {SLICE} (v5e:2x2, 4 devices") and "small" in head[0]
    assert [line.split()[0] for line in head[2:]] == list(programs.PROGRAMS)
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: does not fit {SLICE}: update needs ") and "more than" in last
    assert not [line for line in out.stderr.splitlines()
                if "TPU_" in line or "INVALID_ARGUMENT" in line], out.stderr  # libtpu quiet


@pytest.mark.parametrize("flag,expected", [
    ("--topology=v5e-3", "error: unknown TPU topology 'v5e-3'; known: v4-8,"),
    ("--topology=v5p:3x3x3", "error: unknown TPU topology 'v5p:3x3x3'"),
])
def test_bad_topology(flag, expected):
    out = subprocess.run([sys.executable, "-m", "launch.compile", flag],
                         env=subprocess_env.env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and out.stderr.strip().splitlines()[-1].startswith(expected)


def test_topology_names():
    assert topology.parse("v5e-16").shape == "4x4"
    v5p = topology.parse("v5p-8")
    assert (v5p.shape, v5p.chips, v5p.accelerator_type) == ("2x2x1", 4, "v5p-8")
    assert topology.parse("v4-32").shape == "2x2x4"
    assert topology.parse("v5e:2x4").chips == 8
