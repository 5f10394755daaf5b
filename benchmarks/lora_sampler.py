"""The LoRA sampler's two modes side by side: merge W + (alpha/r) A B once per update and
decode the dense copy, or decode the base with the adapter applied in every step,
x W + (alpha/r)(x A) B ("factored"), on a plain and on an NF4 base.

    python benchmarks/lora_sampler.py --json
    python benchmarks/lora_sampler.py --presets=tiny --shapes=16x8x64 --repeats=5

Per preset, base and shape (prompts × samples × new tokens, 32-token prompts), one
sampler call per update is timed: "merge" is the merge (jitted, weights written once)
plus `sampling.generate` on the merged params; "factored" is `sampling.generate` on
the attached params. Both sides sample the same tokens from the same key (checked: the
token match is printed). Timed repeats alternate between the sides after one warm-up
call each (the compile); medians are reported, with factored / merge.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import models
from models import lora
from sampling import SamplingParams, generate


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    jax.block_until_ready(out)
    return time.perf_counter() - start, out


def measure(preset: str, quantize: str, shape: str, repeats: int, rank: int) -> dict:
    prompts_n, samples, new = (int(x) for x in shape.split("x"))
    config = models.get_preset(preset)
    params = models.init(config, jax.random.key(0))
    base = params if quantize == "none" else lora.quantize_base(config, params, quantize)
    cfg = lora.LoraConfig(rank=rank, alpha=2.0 * rank)
    ad = jax.tree.map(lambda x: x + 0.01, lora.init(config, cfg, jax.random.key(1)))
    rng = np.random.RandomState(0)
    prompts = [list(rng.randint(1, config.vocab_size, 32)) for _ in range(prompts_n)]
    sp = SamplingParams(temperature=1.0, max_new_tokens=new)
    merge = jax.jit(functools.partial(lora.merge, config, lora=cfg))
    key = jax.random.key(2)

    def merged():
        return generate(config, merge(base, adapters=ad), prompts, samples, sp, key).tokens

    def factored():
        return generate(config, lora.attach(base, ad, cfg), prompts, samples, sp, key).tokens

    sides = {"merge": merged, "factored": factored}
    outs = {name: _timed(fn)[1] for name, fn in sides.items()}  # warm-up: compiles
    times = {name: [] for name in sides}
    for _ in range(repeats):
        for name, fn in sides.items():
            times[name].append(_timed(fn)[0])
    med = {name: statistics.median(t) for name, t in times.items()}
    merge_alone = statistics.median(_timed(lambda: merge(base, adapters=ad))[0]
                                    for _ in range(repeats))
    match = float(np.mean(np.asarray(outs["merge"]) == np.asarray(outs["factored"])))
    return {"preset": preset, "base": quantize, "shape": shape, "rank": rank,
            "merge_s": med["merge"], "merge_only_s": merge_alone,
            "factored_s": med["factored"], "factored_over_merge": med["factored"] / med["merge"],
            "token_match": match}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--presets", default="tiny,small")
    ap.add_argument("--bases", default="none,nf4")
    ap.add_argument("--shapes", default="4x8x64,16x8x64")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    for preset in args.presets.split(","):
        for quantize in args.bases.split(","):
            for shape in args.shapes.split(","):
                r = measure(preset, quantize, shape, args.repeats, args.rank)
                print(json.dumps(r) if args.json else
                      f"{preset} {quantize} {shape}: merge {r['merge_s']:.3f} s (merging "
                      f"{r['merge_only_s']:.3f}), factored {r['factored_s']:.3f} s, "
                      f"factored/merge {r['factored_over_merge']:.2f}, "
                      f"tokens equal {r['token_match']:.3f}", flush=True)


if __name__ == "__main__":
    main()
