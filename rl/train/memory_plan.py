"""Per-device memory of one RL step, planned from the resolved config: no arrays, no compute.

    run = rl.train.build.resolve(cfg)
    p = rl.train.memory_plan.plan(run)                       # or plan(run, mesh_sizes={...})
    print(p.format("h100-80gb")); p.check("h100-80gb")  # ValueError when it cannot fit
    rl.train.memory_plan.preflight(run)  # both, against this process's devices: a run's start

Phases. The persistent state lives through the whole step; the sampler and the learner run
one after the other and free their buffers in between; decode's weight copies and the
prefill's tensors are never live together, nor the backward's activations and the
optimizer's update tree. So the total is the step's peak, not the sum of the terms:

    total   = params + optimizer + reference + max(sampler, learner)
    sampler = kv_pool + max(decode_weights, prefill)
    learner = gradients + max(activations, update)

Scoring (old/reference log-probs) is a forward pass of the learner's shapes without
gradients: below the learner phase.

For a TPU slice, what XLA decides by its own choices (which buffers share memory, which
live in VMEM) is read from a compile where one exists (`launch.plan --compiled`,
`Plan.with_compiled`): then sampler = kv pool + max(decode temps, prefill temps) and
learner = update temps, XLA's figures per device (`COMPILED`), and the terms below are
estimates beside them.

Notation: L layers, D hidden, F mlp, H heads, K kv heads, Dh head dim, V vocab; b_p / b_c
bytes per element of model.param_dtype / model.dtype. P prompts_per_step (sampler, flat:
times rollout.over_provision with APRIL), n samples drawn per prompt, G the learner's group
(`Run.samples_per_prompt`), m train.minibatches, C completion length, Lp the longest prompt
(of the first 256 train prompts, encoded), Tp = round_up(Lp, 16), S = max(C - 1, 1).

Sharding: each tensor's logical axes go through `models.sharding.logical_to_spec` with the
mesh axis sizes (no jax Mesh needed): a dim is split over the product of the mesh axes its
rule keeps (only dividing ones), and the tensor costs prod(dim // split) × itemsize on every
device. Rows ("batch") split over data × fsdp, heads / kv heads / mlp / vocab over tensor.

  params       Σ over `models.params.param_specs` leaves of their shards × b_p.
  optimizer    optax.adamw: mu and nu with the params' shapes, shardings and dtype
               (mu_dtype unset keeps the params'): 2 × params (+ two int32 counts).
  reference    a copy of the policy sharded like it when the algorithm keeps one
               (`Algorithm.needs_reference`), else 0; 0 with rl.reference.offload (in host
               memory; on the devices only while it scores, next to no gradients).
  kv_pool      the largest sampling call's pool, k [L, pages, K, Dh, ps] + v [L, pages, K,
               ps, Dh], b_c (`tpu_tiles`: in a TPU's tiles, `memory_terms.pool_bytes`),
               pages over the s = data × fsdp batch shards (each shard holds
               its prompts' groups, their rows and their pages: `sampling.shards`) and kv
               heads over tensor, plus that decode call's tails k/v [L, R, K, Dh, W]
               (W = its steps; n = 1: the rows share nothing and the decode views their
               whole context), the step's new k/v [L, R, K, Dh] and logits [R, V] fp32 × 2.
               With P' = ceil(P / s) prompts per shard:
               flat: pages = s·(1 + pow2(P')·pp + R'·gp), R = s·R', R' = row_bucket(P'·n),
                     pp = pow2(ceil(Lp / ps)), seg = min(segment_len, ps·ceil(max_new / ps)),
                     gp = ceil(max_new / seg)·seg / ps, W = seg;
               tree: pages = s·(1 + pow2(P')·(pp + leaves·max_depth·seg_t / ps)),
                     R = s·row_bucket(P'·leaves), W = seg_t (tree.segment_len).
  decode_weights  what decode adds to the weights, the larger of (never live together:
               the head is read after the last layer, in the layers' freed buffers):
               the output head [D, V] in b_c (under FSDP gathered, D whole; else a copy
               only where it is the tied table transposed or cast), and one layer's
               weights as the scan reads them: under FSDP gathered with embed whole (and
               cast when b_p ≠ b_c), else in place (a cast copy when b_p ≠ b_c). The
               trainer's sampler gets the mesh, so it uses the weights where they are (no
               fused q|k|v, gate|up copies: docs/sampling.md). The embedding lookup reads
               the table's own shards (`models.transformer.embed_tokens`): no table copy.
  prefill      the prompt forward, one layer at a time: that layer's weights at use (as
               above) + 3 [B, Ts, F] + 4 [B, Ts, D] (b_c) + 2 fp32 score blocks
               [B, H, Ts, blk], B = s·pow2(P') (each shard's prompts; flat APRIL: its
               over-provisioned groups), Ts = pp·ps, blk = min(Ts, max(128, ceil(Ts / 16))).
  gradients    params-shaped, in the params' dtype and sharding: = params.
  update       the AdamW update tree (params-shaped, b_p) that optax builds from the clipped
               gradients before `apply_updates`, live with them: = params.
  activations  the backward of one minibatch: p = P/m groups, N = p·G rows, T = p·(Tp + G·S)
               packed tokens (`models.shared_prefix_hidden_states`). One layer's tensors
               (b_c unless marked):
                 r = 5·T·F (gate, up, sigmoid, silu, silu·up) + 6·T·D (layer input, mid
                     residual, two RMSNorms' normalised inputs and outputs) + 2·T·H·Dh
                     (q heads-major, attention output) + 2·p·Tp·K·Dh (prompt k, v)
                     + 2·N·(Tp + S)·K·Dh (each sample's [prompt | own] k, v)
                     + 2·4·H·(p·Tp² + N·S·(Tp + S)) (fp32 softmax)
               saved per layer s: none r (+ the layer's weights cast to b_c when b_p ≠ b_c);
                 dots the matmul outputs T·(H·Dh + 2·K·Dh + D + 2F + D) + the input T·D;
                 full the input T·D.
               activations = L·s + max(head, r) + one layer's weights at use + batch:
                 r = the layer being differentiated: its cotangents (none) or its
                 recomputed tensors (full, dots) next to what the layers saved;
                 head = one fp32 [N, size, V] block (`chunk_layout`: size = ceil(C /
                 ceil(C / min(logits_chunk, C))); XLA fuses its softmax and cotangent into
                 it) + the output matrix's fp32 gradient [D, V] before it is reduced + under
                 FSDP the gathered output matrix [D, V] b_p + 3 × [N, C, D];
                 batch = [P·G, C] × 17 bytes + prompts.

Checked against XLA:CPU on one device (tests/rl/train/test_memory_plan.py: live arrays + each
program's temp allocation): the total within 2% for tiny and small; across remat
none/full/dots and batches up to tiny's default step, totals -5% to +10%, activations alone
-11% (full) to +17% (dots), none +3% to +6%. Not modelled: XLA:CPU computes
bfloat16 in fp32 and keeps fp32 copies (bf16 measures above the plan there); APRIL's
resumed rows prefill prompt + partial completion (longer prompts than planned).
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Mapping

import jax
import jax.numpy as jnp

from models import lora as lora_lib
from models import params as params_lib
from models import sharding
from models.config import DTYPES
from rl.checkpoint.storage import size_text as size
from rl.train.memory_terms import (  # noqa: F401  (re-exported: benchmarks, tests)
    gathered_layer,
    learner_terms,
    lora_terms,
    output_head,
    sampler_terms,
    shard_bytes,
    split,
)

GiB, MiB = 1 << 30, 1 << 20
# Memory per chip/GPU. Cloud TPU docs (tpu/docs/v4, v5e, v5p, v6e) give HBM per chip as
# 32, 16, 95 and 32 "GB", binary sizes: GiB here. NVIDIA: the totals NVML (nvidia-smi)
# reports for the H100 SXM "80GB", 81,559 MiB, and the H200 "141GB", 143,771 MiB.
ACCELERATORS: dict[str, int] = {
    "tpu-v4": 32 * GiB, "tpu-v5e": 16 * GiB, "tpu-v5p": 95 * GiB, "tpu-v6e": 32 * GiB,
    "h100-80gb": 81_559 * MiB, "h200-141gb": 143_771 * MiB,
    "cpu": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),  # this host's RAM
}
# Peak dense bf16 FLOP/s and HBM bandwidth (bytes/s) per TPU chip, from the Cloud TPU
# system architecture pages (tpu/docs/v4, v5e, v5p, v6e): 275 TFLOP/s and 1,200 GB/s;
# 197 and 819; 459 and 2,765; 918 and 1,640. `launch.compile`'s step-time lower bound.
PEAKS: dict[str, tuple[float, float]] = {
    "tpu-v4": (275e12, 1200e9), "tpu-v5e": (197e12, 819e9), "tpu-v5p": (459e12, 2765e9),
    "tpu-v6e": (918e12, 1640e9),
}
PERSISTENT = ("params", "optimizer", "reference")
SAMPLER = ("kv_pool", "decode_weights", "prefill")
LEARNER = ("gradients", "activations", "update")
PROMPTS_SCANNED = 256
# XLA's figures that replace the planned terms where a compile gave them
# (`Plan.with_compiled`: launch.plan --compiled): {key: (name, phase, what it is)}
COMPILED = {
    "kv_pool": ("kv pool", "sampler", "the decode's donated KV pages"),
    "decode": ("decode temps", "sampler", "the decode's temporaries"),
    "prefill": ("prefill temps", "sampler", "the prefill's temporaries"),
    "learner": ("update temps", "learner", "the update's temporaries"),
}
ADVICE_OF = {"kv_pool": "kv_pool", "decode": "kv_pool", "prefill": "prefill",
             "learner": "activations"}


def mesh_sizes(section: Mapping, devices: int) -> dict[str, int]:
    """{data, fsdp, tensor} of a `config.mesh` section on `devices` devices (one -1 = the
    rest), without a Mesh; ValueError when they do not multiply to `devices`."""
    sizes = {a: int(section[a]) for a in sharding.MESH_AXES}
    free = [a for a, s in sizes.items() if s == -1]
    known = math.prod(s for s in sizes.values() if s != -1)
    if len(free) > 1 or any(s == 0 or s < -1 for s in sizes.values()) or devices % known:
        raise ValueError(f"mesh {sizes} does not fit {devices} devices")
    if free:
        sizes[free[0]] = devices // known
    if math.prod(sizes.values()) != devices:
        raise ValueError(f"mesh {sizes} needs {math.prod(sizes.values())} devices, "
                         f"not {devices}")
    return sizes


@dataclasses.dataclass
class Plan:
    """Bytes per device of each term (module docstring); `total` is the step's peak."""

    params: int
    optimizer: int
    reference: int
    kv_pool: int
    decode_weights: int
    prefill: int
    gradients: int
    activations: int
    update: int
    settings: dict = dataclasses.field(default_factory=dict)  # what the advice names
    shapes: dict = dataclasses.field(default_factory=dict)    # the sizes planned for
    # XLA's figures ({COMPILED key: bytes}) that replace the sampler's and learner's terms,
    # and where they come from (`with_compiled`); empty: every term is planned
    compiled: dict = dataclasses.field(default_factory=dict)
    compiled_from: str = ""
    # LoRA with lora.sampler=merge: the sampler's merged copy (dense, b_p), live while it
    # samples (the trainer drops it before the update)
    sampler_copy: int = 0

    def with_compiled(self, figures: Mapping[str, int], source: str) -> Plan:
        """This plan with XLA's figures for the phases ({COMPILED key: bytes per device},
        `launch.compiled.phases`) in place of the planned sampler and learner terms."""
        if set(figures) != set(COMPILED):
            raise ValueError(f"compiled figures need {sorted(COMPILED)}, got {sorted(figures)}")
        return dataclasses.replace(self, compiled=dict(figures), compiled_from=source)

    @property
    def persistent(self) -> int:
        return self.params + self.optimizer + self.reference

    @property
    def sampler(self) -> int:
        c = self.compiled
        if c:
            return c["kv_pool"] + max(c["decode"], c["prefill"]) + self.sampler_copy
        return self.kv_pool + max(self.decode_weights, self.prefill) + self.sampler_copy

    @property
    def learner(self) -> int:
        if self.compiled:
            return self.compiled["learner"]
        return self.gradients + max(self.activations, self.update)

    @property
    def total(self) -> int:
        return self.persistent + max(self.sampler, self.learner)

    def peak_terms(self) -> tuple[str, ...]:
        """The terms the total adds up (with compiled figures: their COMPILED keys)."""
        c = self.compiled
        if c:
            if self.sampler > self.learner:
                return PERSISTENT + ("kv_pool", "decode" if c["decode"] >= c["prefill"]
                                     else "prefill")
            return PERSISTENT + ("learner",)
        if self.sampler > self.learner:
            return PERSISTENT + ("kv_pool", "decode_weights" if self.decode_weights
                                 >= self.prefill else "prefill")
        return PERSISTENT + ("gradients", "activations" if self.activations >= self.update
                             else "update")

    def _bytes(self, term: str) -> int:
        """A term's bytes: XLA's where the plan has compiled figures, else planned."""
        if self.compiled and term in COMPILED:
            return self.compiled[term]
        return getattr(self, term)

    def _name(self, term: str) -> str:
        return COMPILED[term][0] + " (compiled)" if self.compiled and term in COMPILED else term

    def format(self, accelerator: str | None = None) -> str:
        """An aligned table: each term per device, its share of the total, its phase; with
        compiled figures, the planned sampler and learner terms are shown as estimates
        and XLA's figures below them make the total."""
        peak = self.peak_terms()
        phase = {**dict.fromkeys(PERSISTENT, "persistent"), **dict.fromkeys(SAMPLER, "sampler"),
                 **dict.fromkeys(LEARNER, "learner")}
        rows = [("term", "per device", "share", "phase")]
        for t in PERSISTENT + SAMPLER + LEARNER:
            note = ("" if t in peak else " (not at the peak)") if (
                t in PERSISTENT or not self.compiled) else " (estimate; XLA's below)"
            rows.append((t, size(getattr(self, t)),
                         f"{getattr(self, t) / max(self.total, 1):.0%}", phase[t] + note))
            if t == SAMPLER[-1] and self.sampler_copy:
                rows.append(("sampler_copy", size(self.sampler_copy),
                             f"{self.sampler_copy / max(self.total, 1):.0%}",
                             "sampler (LoRA's merged weights)"))
        for key, (name, ph, what) in COMPILED.items() if self.compiled else ():
            rows.append((f"{name} (compiled)", size(self.compiled[key]),
                         f"{self.compiled[key] / max(self.total, 1):.0%}",
                         f"{ph}: {what}" + ("" if key in peak else " (not at the peak)")))
        rows.append(("total", size(self.total), "100%", f"persistent + max(sampler "
                     f"{size(self.sampler)}, learner {size(self.learner)})"))
        w = [max(len(r[i]) for r in rows) for i in range(3)]
        out = [f"{a:<{w[0]}}  {b:>{w[1]}}  {c:>{w[2]}}  {d}" for a, b, c, d in rows]
        out.append("planned for " + ", ".join(f"{k}={v}" for k, v in self.shapes.items()))
        if self.compiled:
            out.append(f"compiled figures: {self.compiled_from}")
        if accelerator is not None:
            cap = capacity(accelerator)
            out.append(f"{accelerator}: {size(cap)} per device; the step needs "
                       f"{self.total / cap:.0%} of it: "
                       + ("fits" if self.total <= cap else "does NOT fit"))
        return "\n".join(out)

    def check(self, accelerator: str) -> None:
        """ValueError, one line naming the largest term and the setting that shrinks it,
        when the total exceeds `accelerator`'s memory."""
        cap = capacity(accelerator)
        if self.total <= cap:
            return
        term = max(self.peak_terms(), key=self._bytes)
        raise ValueError(f"the step needs {size(self.total)} per device but {accelerator} has "
                         f"{size(cap)}; the largest term is {self._name(term)} "
                         f"({size(self._bytes(term))}): "
                         f"{advice(ADVICE_OF.get(term, term), self.settings)}")


def capacity(accelerator: str) -> int:
    """Bytes per device of a named accelerator, or of this process's devices ("local": the
    allocator's `bytes_limit` where the backend reports it (GPU, TPU), else the host's RAM
    shared by its CPU devices)."""
    if accelerator == "local":
        stats = jax.local_devices()[0].memory_stats() or {}
        return int(stats.get("bytes_limit") or ACCELERATORS["cpu"] // jax.local_device_count())
    if accelerator not in ACCELERATORS:
        raise ValueError(f"unknown accelerator {accelerator!r}; known: "
                         f"{', '.join(ACCELERATORS)}, local")
    return ACCELERATORS[accelerator]


def preflight(run, accelerator: str = "local", *, stream=None) -> Plan:
    """For a run's start: prints the plan (to `stream`, default stdout) against
    `accelerator` and raises `check`'s one-line ValueError when the step cannot fit."""
    result = plan(run, tpu_tiles=run.mesh.devices.flat[0].platform == "tpu")
    print(result.format(accelerator), file=stream if stream is not None else sys.stdout)
    result.check(accelerator)
    return result


def advice(term: str, s: Mapping) -> str:
    """The setting that shrinks `term` (`Plan.settings` holds the current values)."""
    shard = f"raise mesh.fsdp (now {s['fsdp']}) or mesh.tensor (now {s['tensor']})"
    if term in ("params", "optimizer", "gradients", "update", "decode_weights"):
        return f"shard it over more devices: {shard}"
    if term == "reference":
        return f"{shard}, or set rl.reference.offload=True (or drop the reference: rl.kl.coef=0)"
    if term == "activations":
        remat = f"set model.remat=full (now {s['remat']}), or " if s["remat"] != "full" else ""
        return (f"{remat}train fewer rows per optimizer step (raise train.minibatches, now "
                f"{s['minibatches']}), or lower train.logits_chunk (now {s['logits_chunk']})")
    if term == "prefill":
        return (f"prefill fewer or shorter prompts: lower train.prompts_per_step (now "
                f"{s['prompts_per_step']}), or raise mesh.data / mesh.tensor")
    return (f"sample less per call: lower sampling.n (now {s['n']}), train.prompts_per_step "
            f"(now {s['prompts_per_step']}) or sampling.max_new_tokens (now "
            f"{s['max_new_tokens']}), or raise mesh.tensor (the pool's kv heads split over it)")


def longest_prompt(run, count: int = PROMPTS_SCANNED) -> int:
    """Tokens of the longest of the first `count` train prompts (encoded as the trainer
    does)."""
    source = run.train_source
    return max(len(run.encode_prompt(source[i].prompt)) for i in range(min(len(source), count)))


def plan(run, *, mesh_sizes: Mapping[str, int] | None = None,
         prompt_len: int | None = None, tpu_tiles: bool = False) -> Plan:
    """The step's memory per device (module docstring) for `run` (`rl.train.build.resolve`).
    `mesh_sizes` ({data, fsdp, tensor}) plans another mesh than `run.mesh`; `prompt_len`
    replaces the scanned longest prompt; `tpu_tiles` counts the KV pages as a TPU lays
    them out (`memory_terms.pool_bytes`)."""
    cfg, c = run.cfg, run.model_config
    sizes, rules = dict(mesh_sizes if mesh_sizes is not None else run.mesh.shape), run.rules
    bp = jnp.dtype(DTYPES[c.param_dtype]).itemsize
    specs = params_lib.param_specs(c)
    leaf = lambda s, item: shard_bytes(s.shape, s.axes, item, sizes, rules)  # noqa: E731
    tops = [s for k, s in specs.items() if k != "layers"]
    params = sum(leaf(s, bp) for s in [*tops, *specs["layers"].values()])
    reference = (params if run.algorithm.needs_reference and not cfg.rl.reference.offload
                 else 0)
    lp = prompt_len if prompt_len is not None else longest_prompt(run)
    kv_pool, decode_weights, prefill, sampler_shapes = sampler_terms(run, sizes, lp, tpu_tiles)
    activations, learner_shapes = learner_terms(run, sizes, lp)
    sp, big_p = run.sampling_params, int(cfg.train.prompts_per_step)
    settings = dict(sizes, remat=c.remat, minibatches=int(cfg.train.minibatches),
                    logits_chunk=cfg.train.logits_chunk, n=cfg.sampling.n,
                    prompts_per_step=big_p, max_new_tokens=sp.max_new_tokens)
    shapes = dict(mesh="x".join(str(sizes[a]) for a in sharding.MESH_AXES), prompt_len=lp,
                  **sampler_shapes, **learner_shapes)
    if run.lora is None:
        return Plan(params, 2 * params + 2 * 4, reference, kv_pool, decode_weights, prefill,
                    params, activations, params, settings, shapes)
    # LoRA: the base holds the frozen weights (the reference), the state only adapters
    dense = sum(leaf(specs["layers"][name], bp) for name in lora_lib.TARGETS)
    base, adapters = lora_terms(run, sizes)
    copy = params if run.lora.sampler == "merge" else 0
    return Plan(params - dense + base + adapters, 2 * adapters + 2 * 4, 0, kv_pool,
                decode_weights, prefill, adapters, activations, adapters, settings,
                dict(shapes, lora=f"r{run.lora.lora.rank}/{run.lora.quantize}"),
                sampler_copy=copy)
