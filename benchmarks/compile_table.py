r"""The memory planner against XLA's compiled figures, per term, for TPU slices.

    python benchmarks/compile_table.py                      # every row of ROWS
    python benchmarks/compile_table.py --rows=0,3 --out=/tmp/table.md
    python benchmarks/compile_table.py --rows=2 --prompts=32    # another batch

For each row (model preset, slice, mesh) it resolves configs/base.py with the row's
settings on the slice's devices (`launch.compile.on_slice`), plans the step
(`rl.train.memory_plan.plan`, same prompt length, the KV pages in TPU tiles) and compiles
its programs (`launch.compile.compile_step`), then prints one markdown line per term; XLA's
side of the last four is what `launch.plan --compiled` reads (`launch.compiled.phases`,
the last column: whose figure it reports for the term):

  state        planner params + optimizer   vs the update's aliased bytes (the donated
                                              TrainState: params, AdamW mu/nu, counters)
  update temps planner gradients + max(activations, update) vs the update's temps
  kv pool      planner k/v pages            vs decode's aliased bytes (the donated pool) [KV]
  prefill      planner prefill              vs prefill's temps
  decode temps planner kv_pool - pages + decode_weights vs decode's temps         [KV]

Rows marked [KV] move when the pool's sharding changes: re-run them after such a change
(`--recompile=prefill,decode`). Each 7B row compiles for minutes on a 2-core machine, so
each row's compiled figures are kept in `--cache` (one `launch.compile --save` file per
row) and a re-run compiles only the programs missing there (all of them for a file of
other settings).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from configs import base
from launch import compile as compile_lib
from launch import compiled, topology
from rl.train import memory_plan, memory_terms, programs

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


def compare(run, plan, saved: compiled.Saved, path: str) -> dict[str, tuple[int, int]]:
    """{term: (planner bytes, XLA bytes)}: the planner's terms against the figures that
    `launch.plan --compiled` would read in their place (`launch.compiled.phases`)."""
    xla = compiled.phases(saved, path)
    pool = memory_terms.pool_bytes(run, dict(run.mesh.shape), plan.shapes["kv_pages"],
                                   tpu_tiles=True)
    return {
        "state": (plan.params + plan.optimizer, saved.programs["update"].aliased),
        "update temps": (plan.learner, xla["learner"]),
        "kv pool": (pool, xla["kv_pool"]),
        "prefill": (plan.prefill, xla["prefill"]),
        "decode temps": (plan.kv_pool - pool + plan.decode_weights, xla["decode"]),
    }


def figures_of(run, slice_, path: str, recompile=()) -> compiled.Saved:
    """The row's `launch.compile --save` file at `path`, compiling only the programs it
    lacks or `recompile` names (and all of them when it holds other settings)."""
    saved, cached = None, {}
    if os.path.exists(path):
        saved = compiled.load(path)
        try:
            compiled.check(saved, run.cfg, path)
            cached = {k: v for k, v in saved.programs.items() if k not in recompile}
        except ValueError as e:
            print(f"{e}: compiling again", file=sys.stderr)
    missing = [p for p in programs.PROGRAMS if p not in cached]
    if not missing:
        return saved
    cached |= compile_lib.compile_step(run, PROMPT_LEN, names=missing)
    return compiled.save(path, run.cfg, slice_, run.mesh.size, PROMPT_LEN,
                         {p: cached[p] for p in programs.PROGRAMS})


def row(index: int, cache: str, recompile=(), prompts: int | None = None) -> list[str]:
    preset, name, mesh, default = ROWS[index]
    prompts = prompts or default
    slice_ = topology.parse(name)
    topology.quiet_libtpu(slice_)
    with tempfile.TemporaryDirectory() as tmp:
        run = compile_lib.on_slice(config(preset, mesh, prompts), slice_, tmp)
        plan = memory_plan.plan(run, prompt_len=PROMPT_LEN, tpu_tiles=True)
        path = os.path.join(cache, f"{preset}_{name}_{'x'.join(map(str, mesh))}_p{prompts}.json")
        saved = figures_of(run, slice_, path, recompile)
    kind = ("DP" if mesh[1] == mesh[2] == 1 else "FSDP" if mesh[2] == 1 else "FSDP×TP")
    lines = []
    for term, (planned, xla) in compare(run, plan, saved, path).items():
        off = f"{planned / xla - 1:+.0%}" if xla else "n/a"
        used = "planner" if term == "state" else "XLA's"
        lines.append(f"| {preset} | {name} | {kind} {'×'.join(map(str, mesh))} | {term}"
                     f"{' [KV]' if term in KV_TERMS else ''} | {memory_plan.size(planned)} | "
                     f"{memory_plan.size(xla)} | {off} | {used} |")
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
    out = ["| model | slice | mesh (data×fsdp×tensor) | term | planner | XLA | planner off "
           "| `launch.plan --compiled` reports |", "|---|---|---|---|---|---|---|---|"]
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
