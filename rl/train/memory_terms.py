"""The memory planner's terms per device, as formulas of shapes and the mesh
(`rl.train.memory_plan`'s docstring gives them in full; `plan` adds them up).

    shard_bytes(shape, axes, itemsize, sizes, rules)   one tensor's bytes per device
    pool_bytes(run, sizes, pages, tpu_tiles)           the k and v pages per device
    sampler_terms(run, sizes, lp, tpu_tiles) -> (kv_pool, decode_weights, prefill, shapes)
    learner_terms(run, sizes, lp) -> (activations, shapes)
    lora_terms(run, sizes) -> (frozen decoder weights, adapters)    with lora.rank >= 1
"""

from __future__ import annotations

import math
import types
from collections.abc import Mapping

import jax.numpy as jnp

from models import lora as lora_lib
from models import params as params_lib
from models import sharding
from models.config import DTYPES
from sampling.layout import next_pow2 as pow2
from sampling.layout import row_bucket


def split(axes, shape, sizes: Mapping[str, int], rules) -> tuple[int, ...]:
    """Per dim, how many ways the mesh splits it: `models.sharding.logical_to_spec` on
    mesh axis sizes alone (it reads nothing of a mesh but `mesh.shape`)."""
    spec = sharding.logical_to_spec(axes, shape, types.SimpleNamespace(shape=dict(sizes)),
                                    rules, "memory_plan")
    out = []
    for entry in tuple(spec) + (None,) * (len(shape) - len(spec)):
        out.append(math.prod(sizes[a] for a in sharding.axis_names(entry)))
    return tuple(out)


def shard_bytes(shape, axes, itemsize: int, sizes, rules) -> int:
    """Bytes of one device's shard (every device holds the same: the splits divide)."""
    return math.prod(d // f for d, f in zip(shape, split(axes, shape, sizes, rules))) * itemsize


def _bytes(run, sizes: Mapping[str, int]):
    """(X(shape, axes, itemsize) -> bytes per device, one layer's weight bytes(itemsize),
    b_p, b_c) on the planned mesh."""
    c = run.model_config
    bp, bc = (jnp.dtype(DTYPES[d]).itemsize for d in (c.param_dtype, c.dtype))
    layers = params_lib.param_specs(c)["layers"]

    def x(shape, axes, item=bc):
        return shard_bytes(shape, axes, item, sizes, run.rules)

    def layer_w(item):  # every layer's weights: / L for one layer
        return sum(shard_bytes(s.shape, s.axes, item, sizes, run.rules) for s in layers.values())

    return x, layer_w, bp, bc


MLP_BLOCK = ("mlp_norm", "gate", "up", "down")


def fsdp(run, sizes: Mapping[str, int]) -> bool:
    """Whether the rules split the `embed` dim (FSDP: weights gathered at use)."""
    return split(("embed",), (run.model_config.hidden_size,), sizes, run.rules)[0] > 1


def gathered_layer(run, sizes: Mapping[str, int], item: int) -> int:
    """Bytes per device of one layer's weights as FSDP gathers them at use: every weight
    with its `embed` dim whole (its other splits kept), the attention block's or the MLP
    block's, the larger (XLA gathers a block's weights where that block runs: the
    qwen2.5-7b prefill compiled for v5e-16 holds gate, up and down, 3 × 129.5 MiB, and
    its temporaries are 389 MiB); 0 when the rules do not split `embed`, where the layer
    scan reads its slice in place (the DP row of `benchmarks/compile_table.py`: no
    prefill temporaries at all)."""
    if not fsdp(run, sizes):
        return 0
    blocks = [0, 0]
    for name, s in params_lib.param_specs(run.model_config)["layers"].items():
        axes = tuple(None if a == "embed" else a for a in s.axes[1:])
        blocks[name in MLP_BLOCK] += shard_bytes(s.shape[1:], axes, item, sizes, run.rules)
    return max(blocks)


def output_head(run, sizes: Mapping[str, int]) -> int:
    """Bytes per device of the output matrix [D, V] (b_c) that decode's logits read: under
    FSDP gathered (D whole, vocab over tensor); else a copy only where the head is the
    tied table transposed or cast to b_c (`models.transformer.output_matrix`)."""
    c = run.model_config
    X, _, bp, bc = _bytes(run, sizes)
    if fsdp(run, sizes):
        return X((c.hidden_size, c.vocab_size), (None, "vocab"))
    if c.tie_embeddings or bp != bc:
        return X((c.hidden_size, c.vocab_size), ("embed", "vocab"))
    return 0


def code_bits(run) -> int:
    """Bits per stored decoder weight: 8 · b_p, or the quantized base's 8 (int8) / 4 (nf4)."""
    quantize = run.lora.quantize if run.lora is not None else "none"
    if quantize == "none":
        return 8 * jnp.dtype(DTYPES[run.model_config.param_dtype]).itemsize
    return 4 if quantize == "nf4" else 8


def layer_at_use(run, sizes: Mapping[str, int]) -> int:
    """One layer's weights as a scanned forward reads them: FSDP's gathered copy (and its
    b_c cast when b_p ≠ b_c), else only the cast of the layer's shard; a quantized layer
    (QLoRA) gathered as codes and dequantized to b_c."""
    c = run.model_config
    _, layer_w, bp, bc = _bytes(run, sizes)
    bits = code_bits(run)
    gathered = gathered_layer(run, sizes, 1) * bits // 8
    cast = 0 if bits == 8 * bc else (gathered_layer(run, sizes, bc) if gathered
                                     else layer_w(bc) // c.num_layers)
    return gathered + cast


def lora_terms(run, sizes: Mapping[str, int]) -> tuple[int, int]:
    """(the adapted decoder weights as the frozen base stores them, the fp32 adapters),
    bytes per device: codes at `code_bits` plus one fp32 scale per `lora.block` entries
    of a quantized weight (its scales split like the weight where the splits divide)."""
    st, c = run.lora, run.model_config
    specs = params_lib.param_specs(c)["layers"]
    base = 0
    for name in lora_lib.TARGETS:
        sp = specs[name]
        base += shard_bytes(sp.shape, sp.axes, 1, sizes, run.rules) * code_bits(run) // 8
        if st.quantize != "none":
            a = len(sp.shape) + lora_lib.quant_axis(name, len(sp.shape))
            scales = sp.shape[:a] + (sp.shape[a] // st.block,) + sp.shape[a + 1:]
            base += shard_bytes(scales, sp.axes, 4, sizes, run.rules)
    adapters = sum(shard_bytes(x.shape, x.axes, 4, sizes, run.rules)
                   for ab in lora_lib.adapter_specs(c, st.lora)["layers"].values()
                   for x in ab.values())
    return base, adapters


def pool_bytes(run, sizes: Mapping[str, int], pages: int, tpu_tiles: bool = False) -> int:
    """Bytes per device of the k [L, pages, K, Dh, ps] and v [L, pages, K, ps, Dh] pages,
    pages over the batch shards and kv heads over tensor. `tpu_tiles`: as a TPU stores
    them, in (8·4/itemsize, 128) tiles over the two minor dims of the layout XLA picks:
    the page and head dims (ps, Dh) minor, or the pages minor with Dh second, whichever
    pads less (compiled for v5e-8 and v5p-8: qwen2.5-0.5b's Dh = 64 pools take the pages
    minor, 73 pages on 128 lanes; the Dh = 128 pools of the 7B/8B rows are dense)."""
    c = run.model_config
    item = jnp.dtype(DTYPES[c.dtype]).itemsize
    ps, shape = int(run.cfg.sampling.page_size), (c.num_layers, pages, c.num_kv_heads)
    n_l, n_p, n_k = (d // f for d, f in zip(shape, split(("layers", "batch", "kv_heads"),
                                                          shape, sizes, run.rules)))
    dh = c.head_dim
    if tpu_tiles:
        sub, up = 8 * 4 // item, lambda x, m: -(-x // m) * m  # noqa: E731
        per_head = min(n_p * up(ps, sub) * up(dh, 128), up(n_p, 128) * ps * up(dh, sub))
    else:
        per_head = n_p * ps * dh
    return 2 * n_l * n_k * per_head * item


def sampler_terms(run, sizes: Mapping[str, int], lp: int, tpu_tiles: bool = False):
    """(kv_pool, decode_weights, prefill, shapes) of the largest sampling call;
    `tpu_tiles`: the pages as a TPU lays them out (`pool_bytes`)."""
    cfg, c = run.cfg, run.model_config
    X, layer_w, bp, bc = _bytes(run, sizes)
    L, D, F, H, K, Dh, V = (c.num_layers, c.hidden_size, c.mlp_dim, c.num_heads,
                            c.num_kv_heads, c.head_dim, c.vocab_size)
    sp, ps = run.sampling_params, int(cfg.sampling.page_size)
    groups = int(cfg.train.prompts_per_step)
    pp = pow2(-(-lp // ps))
    # `sampling.shards`: each of the d batch shards holds its prompts' groups, their rows
    # and their pages (a pool of its own, ids local to it)
    d = math.prod(sizes[a] for a in dict(run.rules)["batch"])
    if run.tree is not None:
        t = run.tree
        mine = -(-groups // d)
        rows, width = d * row_bucket(mine * t.leaves_per_prompt), t.segment_len
        pages = d * (1 + pow2(mine) * (pp + t.leaves_per_prompt * t.max_depth * width // ps))
    else:
        if cfg.rollout.april:
            groups = math.ceil(round(groups * float(cfg.rollout.over_provision), 9))
        n = run.samples_drawn
        mine = -(-groups // d)
        seg = min(int(cfg.sampling.segment_len), ps * -(-sp.max_new_tokens // ps))
        gp = -(-sp.max_new_tokens // seg) * (seg // ps)
        rows = d * row_bucket(mine * n)
        pages = d * (1 + pow2(mine) * pp + rows // d * gp)
        width = seg if n > 1 else (pp + gp) * ps  # n = 1: a dense view of every page
    kv = ("layers", "batch", "kv_heads", None, None)  # pages and rows over the batch axes
    kv_pool = (pool_bytes(run, sizes, pages, tpu_tiles) + 2 * X((L, rows, K, Dh, width), kv)
               + 2 * X((L, rows, K, Dh), ("layers", "batch", "kv_heads", None))
               + 2 * X((rows, V), ("batch", "vocab"), 4))
    # the head is read after the last layer: XLA reuses the layer's gathered buffers for it
    # (buffer assignment of the qwen2.5-7b FSDP decode, compiled for v5e-16)
    layer = layer_at_use(run, sizes)
    decode_weights = max(output_head(run, sizes), layer)
    b, ts = d * pow2(mine), pp * ps  # each shard prefills pow2(its prompts) rows
    blk = min(ts, max(128, -(-ts // 16)))
    pf = ("batch", "length")
    prefill = (layer + 3 * X((b, ts, F), pf + ("mlp",))
               + 4 * X((b, ts, D), pf + ("embed",))
               + 2 * X((b, H, ts, blk), ("batch", "heads", "length", None), 4))
    return kv_pool, decode_weights, prefill, dict(kv_pages=pages, decode_rows=rows,
                                                  decode_width=width)


def learner_terms(run, sizes: Mapping[str, int], lp: int):
    """(activations, shapes): one minibatch's backward (module docstring)."""
    cfg, c = run.cfg, run.model_config
    X, layer_w, bp, bc = _bytes(run, sizes)
    L, D, F, H, K, Dh, V = (c.num_layers, c.hidden_size, c.mlp_dim, c.num_heads,
                            c.num_kv_heads, c.head_dim, c.vocab_size)
    m, g, cl = int(cfg.train.minibatches), run.samples_per_prompt, run.completion_len
    big_p = int(cfg.train.prompts_per_step)
    p = big_p // m
    n_mb, s = p * g, max(cl - 1, 1)
    tp = -(-max(lp, 1) // 16) * 16
    lg = tp + g * s
    tok = lambda last, axis: X((p, lg, last), ("batch", "length", axis))  # noqa: E731
    heads = X((p, lg, H, Dh), ("batch", "length", "heads", "head_dim"))
    kvh = X((p, lg, K, Dh), ("batch", "length", "kv_heads", "head_dim"))
    kv_axes = ("batch", "length", "kv_heads", "head_dim")
    probs = ("batch", "heads", "length", None)
    r = (5 * tok(F, "mlp") + 6 * tok(D, "embed") + 2 * heads
         + 2 * X((p, tp, K, Dh), kv_axes) + 2 * X((n_mb, tp + s, K, Dh), kv_axes)
         + 2 * X((p, H, tp, tp), probs, 4) + 2 * X((n_mb, H, s, tp + s), probs, 4))
    if c.remat == "none":  # a quantized layer keeps its codes for the backward, no cast
        cast = bp != bc and (run.lora is None or run.lora.quantize == "none")
        saved = r + (layer_w(bc) // L if cast else 0)
    elif c.remat == "dots":
        saved = heads + 2 * kvh + 3 * tok(D, "embed") + 2 * tok(F, "mlp")
    else:
        saved = tok(D, "embed")
    chunk = min(int(cfg.train.logits_chunk), cl)
    blocks = max(-(-cl // chunk), 1)
    block = -(-cl // blocks)
    # the head's backward: one fp32 logits block (XLA fuses its softmax and cotangent into
    # it), the output matrix's fp32 gradient [D, V] before it is reduced, and under FSDP
    # the gathered output matrix (tied or not: [D, V] with vocab over tensor)
    gathered = X((D, V), (None, "vocab"), bp) if fsdp(run, sizes) else 0
    head_grad = X((D, V), (None, "vocab"), 4) if run.lora is None else 0  # LoRA: frozen
    head_bwd = (X((n_mb, block, V), ("batch", "length", "vocab"), 4) + head_grad + gathered
                + 3 * X((n_mb, blocks * block, D), ("batch", "length", "embed")))
    batch = (X((big_p * g, cl), ("batch", None), 4 + 1 + 3 * 4)  # tokens, mask, 3 × f32
             + X((big_p, tp), ("batch", None), 4) + X((big_p,), ("batch",), 4))
    activations = L * saved + max(head_bwd, r) + layer_at_use(run, sizes) + batch
    return activations, dict(learner_tokens=p * lg, learner_rows=n_mb, completion_len=cl)
