"""Generation benchmarks, each comparison side by side in one process.

(a) flat decode tokens/s vs transformers `generate` on identical weights
    (greedy, every row forced to the full length; tokens cross-checked);
(b) tree vs flat sampling at equal leaves per prompt and equal max length:
    tokens decoded, prefill tokens, wall time;
(c) G samples per prompt with and without prompt-page sharing.

    python benchmarks/sampler.py --json
    python benchmarks/sampler.py --only=a --flat_shapes=16x32x64

Timed repeats alternate between the compared sides after one warm-up call
each (the warm-up compiles); the median is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import models
from sampling import SamplingParams, TreeConfig, generate, tree_generate


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def _alternate(sides: dict, repeats: int) -> dict:
    """Median seconds per side; each side warmed up (compiled) once first."""
    results = {name: [_timed(fn)] for name, fn in sides.items()}
    times = {name: [] for name in sides}
    for _ in range(repeats):
        for name, fn in sides.items():
            t, out = _timed(fn)
            times[name].append(t)
            results[name].append((t, out))
    return {name: (statistics.median(times[name]), results[name][-1][1],
                   results[name][0][0]) for name in sides}


def bench_flat_vs_transformers(config, params, shapes, repeats, threads, log):
    import torch
    import transformers

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        models.save_pretrained(tmp, config, params)
        hf = transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
    for batch, prompt_len, new in shapes:
        prompts = np.random.default_rng(0).integers(0, config.vocab_size, (batch, prompt_len))
        ids = torch.tensor(prompts)
        sp = SamplingParams(temperature=0.0, max_new_tokens=new)

        def ours(prompts=prompts, sp=sp):
            return generate(config, params, prompts.tolist(), 1, sp, jax.random.key(0))

        def theirs(ids=ids, new=new):
            with torch.inference_mode():
                return hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                                   min_new_tokens=new, do_sample=False, pad_token_id=0)

        res = _alternate({"ours": ours, "transformers": theirs}, repeats)
        (t_ours, ro, first), (t_hf, out, _) = res["ours"], res["transformers"]
        match = float((ro.tokens == out[:, prompt_len:].numpy()).mean())
        tokens = batch * new
        log({"benchmark": "flat_decode_vs_transformers", "batch": batch,
             "prompt_len": prompt_len, "new_tokens": new, "greedy_token_match": match,
             "ours_tokens_per_s": round(tokens / t_ours, 1),
             "transformers_tokens_per_s": round(tokens / t_hf, 1),
             "speedup": round(t_hf / t_ours, 3), "ours_median_s": round(t_ours, 4),
             "transformers_median_s": round(t_hf, 4), "ours_first_call_s": round(first, 3),
             "repeats": repeats, "torch_threads": threads})


def bench_tree_vs_flat(config, params, prompts_n, prompt_len, leaves, segment, depth,
                       first_branching, repeats, log):
    prompts = np.random.default_rng(1).integers(0, config.vocab_size,
                                                (prompts_n, prompt_len)).tolist()
    sp = SamplingParams(temperature=1.0, max_new_tokens=segment * depth)
    tree = TreeConfig(segment_len=segment, max_depth=depth, leaves_per_prompt=leaves,
                      first_branching=first_branching, divergence=2)
    res = _alternate({
        "tree": lambda: tree_generate(config, params, prompts, tree, sp, jax.random.key(0)),
        "flat": lambda: generate(config, params, prompts, leaves, sp, jax.random.key(0),
                                 segment_len=segment),
    }, repeats)
    (t_tree, rt, _), (t_flat, rf, _) = res["tree"], res["flat"]
    log({"benchmark": "tree_vs_flat", "prompts": prompts_n, "prompt_len": prompt_len,
         "leaves_per_prompt": leaves, "segment_len": segment, "max_depth": depth,
         "first_branching": first_branching, "divergence": 2,
         "tree_decoded_tokens": rt.stats["decode_tokens"],
         "flat_decoded_tokens": rf.stats["decode_tokens"],
         "decoded_token_reduction": round(1 - rt.stats["decode_tokens"]
                                          / rf.stats["decode_tokens"], 3),
         "tree_leaf_tokens": int(rt.lengths.sum()), "flat_leaf_tokens": int(rf.lengths.sum()),
         "tree_prefill_tokens": rt.stats["prefill_tokens"],
         "flat_prefill_tokens": rf.stats["prefill_tokens"],
         "tree_median_s": round(t_tree, 4), "flat_median_s": round(t_flat, 4),
         "wall_time_reduction": round(1 - t_tree / t_flat, 3), "repeats": repeats})


def bench_prompt_sharing(config, params, prompts_n, prompt_len, group, new, repeats, log):
    prompts = np.random.default_rng(2).integers(0, config.vocab_size,
                                                (prompts_n, prompt_len)).tolist()
    sp = SamplingParams(temperature=1.0, max_new_tokens=new)
    res = _alternate({
        "shared": lambda: generate(config, params, prompts, group, sp, jax.random.key(0)),
        "unshared": lambda: generate(config, params, prompts, group, sp, jax.random.key(0),
                                     share_prompts=False),
    }, repeats)
    (t_s, rs, _), (t_u, ru, _) = res["shared"], res["unshared"]
    log({"benchmark": "prompt_sharing", "prompts": prompts_n, "prompt_len": prompt_len,
         "group": group, "new_tokens": new,
         "shared_prefill_tokens": rs.stats["prefill_tokens"],
         "unshared_prefill_tokens": ru.stats["prefill_tokens"],
         "shared_kv_pages": rs.stats["kv_pages"], "unshared_kv_pages": ru.stats["kv_pages"],
         "shared_median_s": round(t_s, 4), "unshared_median_s": round(t_u, 4),
         "speedup": round(t_u / t_s, 3), "repeats": repeats})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--preset", default="tiny", help="model preset")
    parser.add_argument("--only", default="a,b,c", help="which comparisons: a, b, c")
    parser.add_argument("--flat_shapes", default="16x32x64,64x128x256",
                        help="(a) PROMPTSxPROMPT_LENxNEW_TOKENS, comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per side")
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads")
    args = parser.parse_args(argv)

    def log(row):
        print(json.dumps(row) if args.json else
              "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)

    config = models.get_preset(args.preset)
    params = models.init(config, jax.random.key(0))
    only = set(args.only.split(","))
    if "a" in only:
        shapes = [tuple(int(x) for x in s.lower().split("x")) for s in args.flat_shapes.split(",")]
        bench_flat_vs_transformers(config, params, shapes, args.repeats, args.threads, log)
    if "b" in only:
        for first in (2, (2, 8)):
            bench_tree_vs_flat(config, params, prompts_n=4, prompt_len=32, leaves=16,
                               segment=32, depth=4, first_branching=first,
                               repeats=args.repeats, log=log)
    if "c" in only:
        bench_prompt_sharing(config, params, prompts_n=4, prompt_len=256, group=16, new=32,
                             repeats=args.repeats, log=log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
