"""Two-model scoring throughput: `rl.analysis.score_pair` vs a plain forward of both models.

`score_pair` runs both models over the same tokens and reduces their logits to
per-position statistics (log-probs, entropies, KL both ways, JS, ranks, top-k);
the baseline is what any analysis must do at least: `models.apply` of each
model, logits out. Both are jitted, the statistics are checked against the
baseline's logits before timing, timed repeats alternate between the two so
drift on a shared machine hits both, and the medians are reported with their
ratio (scoring / forward: 1.0 = the statistics are free).

    python benchmarks/analysis.py --json
    python benchmarks/analysis.py --preset=small --shape=4x2048 --repeats=7
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import models  # noqa: E402
from rl.analysis import scoring  # noqa: E402


def bench(preset: str, batch: int, seq: int, repeats: int, options, log) -> dict:
    config = models.get_preset(preset)
    pa = models.init(config, jax.random.key(0))
    pb = models.init(config, jax.random.key(1))
    tokens = jnp.asarray(np.random.RandomState(2).randint(0, config.vocab_size, (batch, seq)),
                         jnp.int32)

    @jax.jit
    def forward(pa, pb, tokens):
        return models.apply(config, pa, tokens), models.apply(config, pb, tokens)

    def run_forward():
        start = time.perf_counter()
        jax.block_until_ready(forward(pa, pb, tokens))
        return time.perf_counter() - start

    def run_score():
        start = time.perf_counter()
        jax.block_until_ready(scoring.score_pair(config, pa, config, pb, tokens, None, options))
        return time.perf_counter() - start

    # Correctness first: the scored log-probs are those of the forward's logits.
    la, _ = forward(pa, pb, tokens)
    want = jnp.take_along_axis(jax.nn.log_softmax(la[:, :-1]), tokens[:, 1:, None], -1)[..., 0]
    got = scoring.score_pair(config, pa, config, pb, tokens, None, options)["logp_a"][:, 1:]
    err = float(jnp.max(jnp.abs(got - want)))
    if err > 1e-4:
        raise SystemExit(f"score_pair disagrees with models.apply by {err}")
    log(f"{preset} {batch}x{seq}: compile + warm-up")
    for fn in (run_forward, run_score):
        fn()
        fn()
    times = {"forward": [], "score": []}
    for i in range(repeats):
        times["forward"].append(run_forward())
        times["score"].append(run_score())
        log(f"  repeat {i + 1}/{repeats}: forward {times['forward'][-1]:.3f}s "
            f"score {times['score'][-1]:.3f}s")
    fwd, score = statistics.median(times["forward"]), statistics.median(times["score"])
    ratios = [s / f for s, f in zip(times["score"], times["forward"], strict=True)]
    return {"preset": preset, "batch": batch, "seq": seq, "tokens": batch * seq,
            "vocab": config.vocab_size, "options": dataclasses.asdict(options),
            "forward_s": fwd, "score_s": score, "ratio": score / fwd,
            "ratio_pairs_median": statistics.median(ratios), "max_logp_err": err,
            "score_tokens_per_s": batch * seq / score}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--shape", default="4x2048", help="batch x sequence length")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--vocab_chunk", type=int, default=scoring.ScoreOptions.vocab_chunk)
    parser.add_argument("--position_chunk", type=int,
                        default=scoring.ScoreOptions.position_chunk)
    parser.add_argument("--json", action="store_true", help="print one JSON line at the end")
    args = parser.parse_args()
    batch, seq = (int(x) for x in args.shape.lower().split("x"))
    options = scoring.ScoreOptions(vocab_chunk=args.vocab_chunk,
                                   position_chunk=args.position_chunk)
    row = bench(args.preset, batch, seq, args.repeats, options,
                lambda m: print(m, file=sys.stderr))
    print(f"{row['preset']} {batch}x{seq}: forward of both {row['forward_s']:.3f}s, "
          f"score_pair {row['score_s']:.3f}s, ratio {row['ratio']:.2f} "
          f"({row['score_tokens_per_s']:.0f} tokens/s)")
    if args.json:
        print(json.dumps(row))


if __name__ == "__main__":
    main()
