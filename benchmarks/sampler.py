"""Generation benchmarks, each comparison side by side in one process.

(a) flat decode tokens/s vs transformers `generate` on identical weights
    (greedy, every row forced to the full length; tokens cross-checked), ours with
    the layers scanned (the default) and unrolled (`scan_layers=False`);
(b) tree vs flat sampling at equal leaves per prompt and equal max length:
    tokens decoded, prefill tokens, wall time;
(c) G samples per prompt with and without prompt-page sharing;
(d) long prompts: G = 16 samples of 4 prompts of 1,024 tokens, 256 new
    tokens (`--long_preset`, default small): page attention that reads the
    shared prompt once per group ("shared_prefix") vs the former per-row
    dense-view decode ("dense_view") vs transformers `generate`; tokens/s
    (prefill included on every side) and peak memory;
(e) speculative decoding vs plain decoding on a long-answer shape (`--spec_shape`,
    default 2 prompts x 1,024 new tokens on `small`), per drafter (`--spec_drafters`):
    n-gram drafts, a small model (`tiny`, random weights) and the policy's own first
    layer; greedy (the tokens must match plain decoding's; a random model's repetitive
    text gets n-gram drafts accepted) and temperature 1.

    python benchmarks/sampler.py --json
    python benchmarks/sampler.py --only=a --flat_shapes=16x32x64
    python benchmarks/sampler.py --only=d --repeats=1

Peak memory (d) is measured the same way for every engine: the growth of the
process's resident-set high-water mark (VmHWM, reset through
/proc/self/clear_refs after the warm-up call) over the resident set before a
timed call. For our engines `xla_decode_bytes` adds XLA's own account of the
decode program (arguments + outputs + temporaries - donated aliases), and
`kv_decode_bytes` that less `weight_bytes` (the params and the fused weight
copy, identical in both): the page pool and decode's working memory.

Timed repeats alternate between the compared sides after one warm-up call
each (the warm-up compiles); the median is reported.
"""

from __future__ import annotations

import argparse
import dataclasses
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
from sampling import SamplingParams, SpecConfig, TreeConfig, generate, tree_generate


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

        def ours_with(config, prompts=prompts, sp=sp):
            return lambda: generate(config, params, prompts.tolist(), 1, sp, jax.random.key(0))

        def theirs(ids=ids, new=new):
            with torch.inference_mode():
                return hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                                   min_new_tokens=new, do_sample=False, pad_token_id=0)

        res = _alternate({"ours": ours_with(config),
                          "unrolled": ours_with(config.replace(scan_layers=False)),
                          "transformers": theirs}, repeats)
        (t_ours, ro, first), (t_hf, out, _) = res["ours"], res["transformers"]
        t_unrolled, ru, first_unrolled = res["unrolled"]
        match = float((ro.tokens == out[:, prompt_len:].numpy()).mean())
        tokens = batch * new
        log({"benchmark": "flat_decode_vs_transformers", "batch": batch,
             "prompt_len": prompt_len, "new_tokens": new, "greedy_token_match": match,
             "unrolled_token_match": float((ru.tokens == out[:, prompt_len:].numpy()).mean()),
             "ours_tokens_per_s": round(tokens / t_ours, 1),
             "unrolled_tokens_per_s": round(tokens / t_unrolled, 1),
             "transformers_tokens_per_s": round(tokens / t_hf, 1),
             "speedup": round(t_hf / t_ours, 3), "unrolled_speedup": round(t_hf / t_unrolled, 3),
             "ours_median_s": round(t_ours, 4), "unrolled_median_s": round(t_unrolled, 4),
             "transformers_median_s": round(t_hf, 4), "ours_first_call_s": round(first, 3),
             "unrolled_first_call_s": round(first_unrolled, 3),
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


def _rss_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _peak_growth(fn):
    """(seconds, output, peak resident-set growth in bytes) of one call of `fn`."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident set
    before = _rss_bytes("VmRSS")
    t, out = _timed(fn)
    return t, out, _rss_bytes("VmHWM") - before


def _xla_decode_bytes(attention: str, run) -> int:
    """XLA's buffer-assignment peak of the last decode program `run()` calls."""
    from sampling import engine
    seen = []
    real = engine.decode

    def spy(*args):
        seen.append(args)
        return real(*args)

    engine.decode = spy
    try:
        run()
    finally:
        engine.decode = real
    (config, params, cache, state, rng, call, limit, sampling, steps, stop_ids, *_) = seen[-1]
    program = jax.jit(engine._decode, static_argnums=(0, 7, 8, 9, 10, 11), donate_argnums=(2,))
    stats = program.lower(config, params, cache, state, rng, np.int32(call), limit, sampling,
                          steps, stop_ids, attention, None).compile().memory_analysis()
    return int(stats.argument_size_in_bytes + stats.output_size_in_bytes
               - stats.alias_size_in_bytes + stats.temp_size_in_bytes)


def bench_long_prompt_decode(config, params, preset, prompts_n, prompt_len, group, new, repeats,
                             threads, log):
    import torch
    import transformers

    torch.set_num_threads(threads)
    prompts = np.random.default_rng(3).integers(0, config.vocab_size, (prompts_n, prompt_len))
    sp = SamplingParams(temperature=1.0, max_new_tokens=new)
    with tempfile.TemporaryDirectory() as tmp:
        models.save_pretrained(tmp, config, params)
        hf = transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
    ids = torch.tensor(prompts)

    def ours(attention):
        return lambda: generate(config, params, prompts.tolist(), group, sp, jax.random.key(0),
                                attention=attention)

    def theirs():
        torch.manual_seed(0)
        with torch.inference_mode():
            return hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new,
                               min_new_tokens=new, do_sample=True, temperature=1.0, top_k=0,
                               num_return_sequences=group, pad_token_id=0)

    engines = {"shared_prefix": ours("shared_prefix"), "dense_view": ours("dense_view"),
               "transformers": theirs}
    for fn in engines.values():
        fn()  # warm-up: compiles
    times = {name: [] for name in engines}
    peaks = {name: [] for name in engines}
    for _ in range(repeats):
        for name, fn in engines.items():
            t, _, peak = _peak_growth(fn)
            times[name].append(t)
            peaks[name].append(peak)
    tokens = prompts_n * group * new
    # the decode program's weights, the same in both of our engines: the params
    # and the fused q|k|v, gate|up copy it builds (models.fuse_layers)
    c = config
    fused = c.num_layers * c.hidden_size * ((c.num_heads + 2 * c.num_kv_heads) * c.head_dim
                                            + 2 * c.mlp_dim) * np.dtype(c.compute_dtype).itemsize
    weights = int(sum(x.nbytes for x in jax.tree.leaves(params))) + fused
    for name in engines:
        row = {"benchmark": "long_prompt_decode", "engine": name,
               "tokens_per_s": round(tokens / statistics.median(times[name]), 1),
               "peak_bytes": int(statistics.median(peaks[name])),
               "median_s": round(statistics.median(times[name]), 3),
               "prompts": prompts_n, "prompt_len": prompt_len, "group": group,
               "new_tokens": new, "preset": preset,
               "repeats": repeats}
        if name != "transformers":
            row["xla_decode_bytes"] = _xla_decode_bytes(name, engines[name])
            row["weight_bytes"] = weights
            row["kv_decode_bytes"] = row["xla_decode_bytes"] - weights
        log(row)


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


def drafter_of(name: str, config, params):
    """(e) a drafter by name -> (its label, SpecConfig fields, draft_model or None): "ngram";
    a preset name (a random model of that preset); "layers:N" (the policy's first N
    layers and its head: self-speculation)."""
    if name == "ngram":
        return "ngram", {}, None
    if name.startswith("layers:"):
        count = int(name.split(":")[1])
        return name, {"drafter": "model"}, (
            dataclasses.replace(config, num_layers=count),
            dict(params, layers=jax.tree.map(lambda x: x[:count], params["layers"])))
    draft_config = models.get_preset(name)
    return name, {"drafter": "model"}, (draft_config, models.init(draft_config,
                                                                  jax.random.key(1)))


def bench_speculative(config, params, preset, shape, draft_len, temperature, repeats, log,
                      drafter=("ngram", {}, None)):
    """(e) speculative decoding vs plain decoding, same prompts and key; `drafter` from
    `drafter_of`."""
    prompts_n, prompt_len, new = shape
    prompts = np.random.default_rng(3).integers(0, config.vocab_size,
                                                (prompts_n, prompt_len)).tolist()
    sp = SamplingParams(temperature=temperature, max_new_tokens=new)
    label, fields, draft_model = drafter
    spec = SpecConfig(draft_len=draft_len, **fields)
    res = _alternate({
        "plain": lambda: generate(config, params, prompts, 1, sp, jax.random.key(0),
                                  segment_len=256),
        "speculative": lambda: generate(config, params, prompts, 1, sp, jax.random.key(0),
                                        segment_len=256, speculative=spec,
                                        draft_model=draft_model),
    }, repeats)
    (t_p, rp, _), (t_s, rs, _) = res["plain"], res["speculative"]
    s = rs.stats
    log({"benchmark": "speculative_vs_plain", "preset": preset, "prompts": prompts_n,
         "prompt_len": prompt_len, "new_tokens": new, "temperature": temperature,
         "drafter": label, "draft_len": draft_len,
         "token_match": float((rs.tokens == rp.tokens).mean()),
         "plain_tokens_per_s": round(int(rp.lengths.sum()) / t_p, 1),
         "speculative_tokens_per_s": round(int(rs.lengths.sum()) / t_s, 1),
         "speedup": round((rs.lengths.sum() / t_s) / (rp.lengths.sum() / t_p), 3),
         "tokens_per_forward": round(s["spec/tokens"] / max(s["spec/row_forwards"], 1), 2),
         "acceptance": round(s["spec/accepted"] / max(s["spec/proposed"], 1), 3),
         "plain_median_s": round(t_p, 3), "speculative_median_s": round(t_s, 3),
         "repeats": repeats})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--preset", default="tiny", help="model preset")
    parser.add_argument("--only", default="a,b,c,d,e", help="which comparisons: a, b, c, d, e")
    parser.add_argument("--long_preset", default="small", help="(d) model preset")
    parser.add_argument("--flat_shapes", default="16x32x64,64x128x256",
                        help="(a) PROMPTSxPROMPT_LENxNEW_TOKENS, comma-separated")
    parser.add_argument("--spec_preset", default="small", help="(e) model preset")
    parser.add_argument("--spec_shape", default="2x32x1024",
                        help="(e) PROMPTSxPROMPT_LENxNEW_TOKENS, one sample per prompt")
    parser.add_argument("--draft_len", type=int, default=8,
                        help="(e) drafted tokens per forward, n-gram drafter")
    parser.add_argument("--spec_drafters", default="ngram,tiny,layers:1",
                        help="(e) drafters: ngram, a preset name (a random model of it), "
                             "layers:N (the policy's first N layers), comma-separated")
    parser.add_argument("--model_draft_len", type=int, default=4,
                        help="(e) drafted tokens per forward, model drafters")
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
    if "d" in only:
        long_config = models.get_preset(args.long_preset)
        long_params = models.init(long_config, jax.random.key(0))
        bench_long_prompt_decode(long_config, long_params, args.long_preset, prompts_n=4,
                                 prompt_len=1024, group=16, new=256, repeats=args.repeats,
                                 threads=args.threads, log=log)
    if "e" in only:
        spec_config = models.get_preset(args.spec_preset)
        spec_params = models.init(spec_config, jax.random.key(0))
        shape = tuple(int(x) for x in args.spec_shape.lower().split("x"))
        for name in args.spec_drafters.split(","):
            drafter = drafter_of(name, spec_config, spec_params)
            k = args.draft_len if name == "ngram" else args.model_draft_len
            for temperature in (0.0, 1.0):
                bench_speculative(spec_config, spec_params, args.spec_preset, shape, k,
                                  temperature, args.repeats, log, drafter)
    return 0


if __name__ == "__main__":
    sys.exit(main())
