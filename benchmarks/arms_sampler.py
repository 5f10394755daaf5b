"""K LoRA arms sampled in one batch (`sampling.generate(..., arms=)`, what
`launch.sweep --shared_base` does each cycle) against K calls of one arm each.

    python benchmarks/arms_sampler.py --json
    python benchmarks/arms_sampler.py --preset=tiny --shape=16x8x8 --arms=1,6,10 --repeats=5

Per K: K adapters (rank 16, every target, random: each arm samples other tokens) over one
base; "batched" is one `generate` of K × P prompts with an adapter index per prompt and a
key per arm; "separate" is K `generate` calls, arm k's prompts with its adapter and key.
Shape: prompts per arm × samples × new tokens, 32-token prompts. Both sides sample the
same tokens (each arm draws what it draws alone; checked, printed as `tokens equal`).
Timed repeats alternate between the sides after one warm-up each (the compiles); medians,
with batched / separate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import models
from models import lora
from sampling import SamplingParams, generate


def _timed(fn):
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    return time.perf_counter() - start, out


def measure(preset: str, shape: str, k: int, repeats: int, rank: int) -> dict:
    prompts_n, samples, new = (int(x) for x in shape.split("x"))
    config = models.get_preset(preset)
    base = models.init(config, jax.random.key(0))
    cfg = lora.LoraConfig(rank=rank, alpha=2.0 * rank)
    arms = [jax.tree.map(lambda x, i=i: x + 0.05 * jax.random.normal(
        jax.random.key(10 + i), x.shape, x.dtype), lora.init(config, cfg, jax.random.key(i)))
        for i in range(k)]
    rng = np.random.RandomState(0)
    prompts = [list(rng.randint(1, config.vocab_size, 32)) for _ in range(prompts_n)]
    sp = SamplingParams(temperature=1.0, max_new_tokens=new)
    keys = jax.random.split(jax.random.key(2), k)
    stacked = lora.attach(base, lora.stack(arms), cfg)
    index = np.repeat(np.arange(k), prompts_n)

    def batched():
        return generate(config, stacked, prompts * k, samples, sp, keys, arms=index).tokens

    def separate():
        return jnp.concatenate([generate(config, lora.attach(base, arms[i], cfg), prompts,
                                         samples, sp, keys[i]).tokens for i in range(k)])

    sides = {"batched": batched, "separate": separate}
    outs = {name: np.asarray(_timed(fn)[1]) for name, fn in sides.items()}  # compiles
    times = {name: [] for name in sides}
    for _ in range(repeats):
        for name, fn in sides.items():
            times[name].append(_timed(fn)[0])
    med = {name: statistics.median(t) for name, t in times.items()}
    width = min(outs["batched"].shape[1], outs["separate"].shape[1])
    match = float(np.mean(outs["batched"][:, :width] == outs["separate"][:, :width]))
    return {"preset": preset, "shape": shape, "arms": k, "rank": rank,
            "batched_s": med["batched"], "separate_s": med["separate"],
            "batched_over_separate": med["batched"] / med["separate"], "token_match": match}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--shape", default="16x8x8", help="prompts per arm x samples x tokens")
    ap.add_argument("--arms", default="1,6,10")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    for k in (int(a) for a in args.arms.split(",")):
        if k < 1:
            ap.error(f"--arms: each count must be >= 1, got {k}")
        r = measure(args.preset, args.shape, k, args.repeats, args.rank)
        print(json.dumps(r) if args.json else
              f"{args.preset} {args.shape} x {k} arms: batched {r['batched_s']:.3f} s, "
              f"separate {r['separate_s']:.3f} s, batched/separate "
              f"{r['batched_over_separate']:.2f}, tokens equal {r['token_match']:.3f}",
              flush=True)


if __name__ == "__main__":
    main()
