"""rl.train.memory_terms.pool_bytes: the KV pages per device, dense and in a TPU's tiles,
against the pools XLA allocated when the step was compiled for TPU slices."""

import pytest

from rl.train import memory_terms
from tests.rl.train.test_memory_plan import make_run

# (preset, mesh sizes, pages in all, the decode's donated pool per device in bytes as
# libtpu 0.0.42.1 compiled it: benchmarks/compile_table.py's rows, 16 prompts of 64
# tokens × 8 samples of 64, bf16, 16-token pages)
COMPILED = [
    ("qwen2.5-0.5b", dict(data=8, fsdp=1, tensor=1), 8 * 73, 25_165_824),   # v5e-8
    ("qwen2.5-0.5b", dict(data=1, fsdp=4, tensor=1), 4 * 145, 50_331_648),  # v5p-8
    ("qwen2.5-7b", dict(data=1, fsdp=16, tensor=1), 16 * 37, 33_947_648),   # v5e-16
    ("qwen3-8b", dict(data=1, fsdp=16, tensor=4), 16 * 37, 21_823_488),     # v5e-64
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("terms"))


@pytest.mark.parametrize("preset,sizes,pages,xla", COMPILED)
def test_tiled_pool_is_the_compiled_pool(workdir, preset, sizes, pages, xla):
    run = make_run(workdir, preset, **{"model.dtype": "bfloat16"})
    c = run.model_config
    shards = sizes["data"] * sizes["fsdp"]
    kv_heads = c.num_kv_heads // sizes["tensor"]
    dense = 2 * c.num_layers * (pages // shards) * kv_heads * 16 * c.head_dim * 2
    assert memory_terms.pool_bytes(run, sizes, pages) == dense
    assert memory_terms.pool_bytes(run, sizes, pages, tpu_tiles=True) == xla
    if c.head_dim == 128:  # (16, 128) tiles over (page, head dim) fit exactly: dense
        assert xla == dense
    else:  # Dh = 64: the pages minor, padded to 128 lanes, beat head dims padded to 128
        lanes = -(-(pages // shards) // 128) * 128
        assert xla == 2 * c.num_layers * kv_heads * 16 * c.head_dim * lanes * 2 < 2 * dense


def test_tiles_take_the_layout_that_pads_less(workdir):
    """Dh = 64 with 129 pages per device: (page, head dim) tiles pad 2× (64 -> 128), the
    pages minor 1.98× (129 -> 256): the pages; with 1 page, the pages would pad 128×."""
    run = make_run(workdir, "qwen2.5-0.5b", **{"model.dtype": "bfloat16"})
    c = run.model_config
    one = dict(data=1, fsdp=1, tensor=1)
    per = 2 * c.num_layers * c.num_kv_heads * 16 * 2  # bytes per (page, head dim) element
    assert memory_terms.pool_bytes(run, one, 129, tpu_tiles=True) == per * 64 * 256
    assert memory_terms.pool_bytes(run, one, 1, tpu_tiles=True) == per * 128 * 1
