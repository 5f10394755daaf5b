"""models.quant against a NumPy reference: blockwise absmax int8 and NF4 codes, the
dequantized weight, the scales' layout, and the stored size."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import quant


def reference(w: np.ndarray, kind: str, axis: int, block: int):
    """(codes, scales, dequantized, at a boundary) by the definition: per block of `block`
    entries along `axis`, scale = absmax; int8 rounds w / (absmax / 127), NF4 takes the
    level nearest to w / absmax by exhaustive distance (not the midpoints `quant`
    searches). "At a boundary": the ratio is within fp32 rounding (1e-5 relative) of a
    rounding boundary, where XLA's fused division may round it to either side."""
    x = np.moveaxis(w.astype(np.float32), axis, -1)
    blocks = x.reshape(x.shape[:-1] + (-1, block))
    absmax = np.abs(blocks).max(-1, keepdims=True)
    if kind == "int8":
        scale = absmax / np.float32(127)
        ratio = blocks / scale
        codes = np.clip(np.round(ratio), -127, 127)
        values = codes * scale
        edge = np.abs(np.abs(ratio - np.floor(ratio)) - 0.5) < 1e-5 * np.abs(ratio) + 1e-6
    else:
        scale = absmax
        ratio = blocks / absmax
        codes = np.abs(ratio[..., None] - quant.NF4_LEVELS).argmin(-1)
        values = quant.NF4_LEVELS[codes] * absmax
        mid = (quant.NF4_LEVELS[1:] + quant.NF4_LEVELS[:-1]) / 2
        edge = (np.abs(ratio[..., None] - mid) < 1e-6).any(-1)
    unblock = lambda a: np.moveaxis(a.reshape(x.shape), -1, axis)  # noqa: E731
    return (unblock(codes), np.moveaxis(scale[..., 0], -1, axis), unblock(values),
            unblock(edge))


@pytest.mark.parametrize("kind", quant.KINDS)
@pytest.mark.parametrize("shape,axis", [((3, 128, 4, 8), -3), ((2, 4, 64, 16), -2)])
def test_codes_scales_and_values_match_the_reference(kind, shape, axis):
    w = np.asarray(jax.random.normal(jax.random.key(0), shape, jnp.float32))
    q = quant.quantize(jnp.asarray(w), kind, axis=axis, block=32)
    codes, scale, values, edge = reference(w, kind, axis, 32)
    assert q.codes.dtype == (jnp.int8 if kind == "int8" else jnp.uint4)
    got = np.asarray(q.codes).astype(np.int64)
    np.testing.assert_array_equal(got[~edge], codes[~edge])
    assert edge.mean() < 1e-3 and (np.abs(got - codes)[edge] <= 1).all()
    # the scales are fp32 of the same absmax (int8: divided by 127 in fp32)
    np.testing.assert_allclose(np.asarray(q.scale), scale, rtol=1e-6)
    assert q.block == 32 and q.shape == shape
    # dequantizing is codes × scale in fp32: one rounding of a product of fp32 numbers
    got_values = np.asarray(quant.dequantize(q))
    np.testing.assert_allclose(got_values[~edge], values[~edge], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind,bound", [("int8", 0.5 / 127), ("nf4", 0.1520)])
def test_the_error_is_within_half_a_step_of_the_block_absmax(kind, bound):
    # int8 rounds to the nearest of 255 steps of absmax / 127; NF4's widest gap is
    # between -1 and -0.6962 (0.3038 / 2 = 0.1519 of the absmax)
    w = jax.random.normal(jax.random.key(1), (4, 256, 16), jnp.float32)
    q = quant.quantize(w, kind, axis=-2, block=64)
    err = np.abs(np.asarray(quant.dequantize(q) - w)).reshape(4, 4, 64, 16)
    absmax = np.abs(np.asarray(w)).reshape(4, 4, 64, 16).max(2, keepdims=True)
    assert (err <= bound * absmax * (1 + 1e-6)).all()


def test_a_zero_block_stays_zero_and_the_abstract_form_has_the_same_layout():
    w = jnp.zeros((2, 64, 8)).at[1].set(1.0)
    for kind in quant.KINDS:
        q = quant.quantize(w, kind, axis=-2, block=16)
        np.testing.assert_array_equal(np.asarray(quant.dequantize(q)), np.asarray(w))
        a = quant.abstract((2, 64, 8), kind, axis=-2, block=16)
        assert jax.tree.map(lambda x: (x.shape, x.dtype), a) == jax.tree.map(
            lambda x: (x.shape, x.dtype), q)
    assert quant.nbytes(quant.quantize(w, "nf4", axis=-2, block=16)) == 2 * 64 * 8 // 2 + (
        2 * 4 * 8 * 4)


def test_bad_blocks_and_kinds_fail_with_one_line():
    w = jnp.ones((4, 48, 8))
    with pytest.raises(ValueError, match="block 64 does not divide"):
        quant.quantize(w, "nf4", axis=-2, block=64)
    with pytest.raises(ValueError, match="unknown quantization"):
        quant.quantize(w, "fp8", axis=-2, block=16)
    with pytest.raises(ValueError, match="counts from the end"):
        quant.quantize(w, "int8", axis=1, block=16)
