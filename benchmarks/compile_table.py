r"""The memory planner against XLA's compiled figures, per term, for TPU slices.

    python benchmarks/compile_table.py                      # every row of ROWS
    python benchmarks/compile_table.py --rows=0,3 --out=/tmp/table.md
    python benchmarks/compile_table.py --rows=2 --prompts=32    # another batch

For each row (model preset, slice, mesh) it resolves configs/base.py with the row's
settings on the slice's devices (`launch.compile.on_slice`), plans the step
(`rl.train.memory_plan.plan`, same prompt length) and compiles its programs
(`launch.compile.compile_step`), then prints one markdown line per term:

  state        planner params + optimizer   vs the update's aliased bytes (the donated
                                              TrainState: params, AdamW mu/nu, counters)
  update temps planner gradients + max(activations, update) vs the update's temps
  kv pool      planner k/v pages            vs prefill's outputs (the pool + [R, D])  [KV]
  prefill      planner prefill              vs prefill's temps
  decode temps planner kv_pool - pages + decode_weights vs decode's temps         [KV]

Rows marked [KV] move when the pool's sharding changes: re-run them after such a change
(`--recompile=prefill,decode`). Each 7B row compiles for minutes on a 2-core machine, so
each row's compiled figures are kept in `--cache` (one JSON file per row) and a re-run
compiles only the programs missing there.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile

import jax.numpy as jnp

from configs import base
from launch import compile as compile_lib
from launch import topology
from models.config import DTYPES
from rl.train import memory_plan, programs

# (preset, slice, mesh data/fsdp/tensor, prompts_per_step): bf16 params and compute,
# remat full, 8 samples of 64 tokens per prompt, 64-token prompts
ROWS = [
    ("qwen2.5-0.5b", "v5e-8", (8, 1, 1), 16),
    ("qwen2.5-0.5b", "v5p-8", (1, 4, 1), 16),
    ("qwen2.5-7b", "v5e-16", (1, 16, 1), 16),
    ("qwen3-8b", "v5e-64", (1, 16, 4), 16),
    ("llama3.1-8b", "v5p-32", (1, 4, 4), 16),
]
PROMPT_LEN = 64
TERMS = ("state", "update temps", "kv pool", "prefill", "decode temps")
KV_TERMS = ("kv pool", "decode temps")


def config(preset: str, mesh: tuple[int, int, int], prompts: int):
    cfg = base.get_config(preset)
    with cfg.unlocked():
        cfg.model.dtype = cfg.model.param_dtype = "bfloat16"
        cfg.model.remat = "full"
        cfg.mesh.data, cfg.mesh.fsdp, cfg.mesh.tensor = mesh
        cfg.train.prompts_per_step = prompts
    return cfg


def pool_bytes(run, plan) -> int:
    """The planner's k/v pages alone (its kv_pool term less the decode call's tails)."""
    c = run.model_config
    ps, pages = int(run.cfg.sampling.page_size), plan.shapes["kv_pages"]
    axes = ("layers", "batch", "kv_heads", None, None)  # pages over the batch shards
    sizes = dict(run.mesh.shape)
    item = jnp.dtype(DTYPES[c.dtype]).itemsize
    return 2 * memory_plan.shard_bytes((c.num_layers, pages, c.num_kv_heads, c.head_dim, ps),
                                       axes, item, sizes, run.rules)


def compare(run, plan, figures) -> dict[str, tuple[int, int | None]]:
    """{term: (planner bytes, XLA bytes or None when XLA refused the program)}."""
    def xla(name, field):
        f = figures[name]
        return None if isinstance(f, str) else getattr(f, field)

    pool = pool_bytes(run, plan)
    return {
        "state": (plan.params + plan.optimizer, xla("update", "aliased")),
        "update temps": (plan.learner, xla("update", "temps")),
        "kv pool": (pool, xla("prefill", "outputs")),
        "prefill": (plan.prefill, xla("prefill", "temps")),
        "decode temps": (plan.kv_pool - pool + plan.decode_weights, xla("decode", "temps")),
    }


def figures_of(run, path: str, recompile=()) -> dict:
    """{program: Figures or str} of the row, compiling only those `path` (JSON) lacks or
    `recompile` names; writes them back."""
    cached = {}
    if os.path.exists(path):
        with open(path) as f:
            cached = {k: v if isinstance(v, str) else compile_lib.Figures(**v)
                      for k, v in json.load(f).items() if k not in recompile}
    missing = [p for p in programs.PROGRAMS if p not in cached]
    if missing:
        cached |= compile_lib.compile_step(run, PROMPT_LEN, names=missing)
        with open(path, "w") as f:
            json.dump({k: v if isinstance(v, str) else dataclasses.asdict(v)
                       for k, v in cached.items()}, f, indent=1)
    return {p: cached[p] for p in programs.PROGRAMS}


def row(index: int, cache: str, recompile=(), prompts: int | None = None) -> list[str]:
    preset, name, mesh, default = ROWS[index]
    prompts = prompts or default
    slice_ = topology.parse(name)
    topology.quiet_libtpu(slice_)
    with tempfile.TemporaryDirectory() as tmp:
        run = compile_lib.on_slice(config(preset, mesh, prompts), slice_, tmp)
        plan = memory_plan.plan(run, prompt_len=PROMPT_LEN)
        figures = figures_of(run, os.path.join(
            cache, f"{preset}_{name}_{'x'.join(map(str, mesh))}_p{prompts}.json"), recompile)
    kind = ("DP" if mesh[1] == mesh[2] == 1 else "FSDP" if mesh[2] == 1 else "FSDP×TP")
    lines = []
    for term, (planned, compiled) in compare(run, plan, figures).items():
        off = "refused" if compiled is None else (f"{planned / compiled - 1:+.0%}" if compiled
                                                   else "n/a")
        got = "—" if compiled is None else memory_plan.size(compiled)
        lines.append(f"| {preset} | {name} | {kind} {'×'.join(map(str, mesh))} | {term}"
                     f"{' [KV]' if term in KV_TERMS else ''} | {memory_plan.size(planned)} | "
                     f"{got} | {off} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default=",".join(map(str, range(len(ROWS)))))
    parser.add_argument("--out", default=None)
    parser.add_argument("--cache", default="/tmp/compile_table",
                        help="directory of each row's compiled figures (JSON)")
    parser.add_argument("--recompile", default="",
                        help="programs to compile again even when cached, e.g. prefill,decode")
    parser.add_argument("--prompts", type=int, default=None,
                        help="train.prompts_per_step for every row (default: the row's, 16)")
    args = parser.parse_args()
    os.makedirs(args.cache, exist_ok=True)
    import jax  # noqa: PLC0415 - after the flags: a bad flag costs no backend
    jax.config.update("jax_platforms", "cpu")
    out = ["| model | slice | mesh (data×fsdp×tensor) | term | planner | XLA | planner off |",
           "|---|---|---|---|---|---|---|"]
    for index in (int(i) for i in args.rows.split(",")):
        out += row(index, args.cache, tuple(filter(None, args.recompile.split(","))),
                   args.prompts)
        print("\n".join(out[-len(TERMS):]), file=sys.stderr, flush=True)
    text = "\n".join(out)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
