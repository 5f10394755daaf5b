"""Forward throughput of `models.apply` against transformers, side by side.

Both frameworks run the same weights in one process: the JAX model is
initialised here, exported with `models.save_pretrained`, and loaded by
`transformers.AutoModelForCausalLM` (fp32, its default `sdpa` attention,
`torch.inference_mode`). Before timing, the two logits are compared, so the
benchmark cannot silently compare different models. Timed repeats alternate
between the two frameworks so drift on a shared machine hits both equally;
the reported figure is the median.

    python benchmarks/forward.py --json
    python benchmarks/forward.py --presets=small --shapes=4x512 --repeats=20
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
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import models  # noqa: E402


def _parse_shapes(text: str) -> list[tuple[int, int]]:
    shapes = []
    for item in text.split(","):
        b, t = item.lower().split("x")
        shapes.append((int(b), int(t)))
    return shapes


def bench_preset(preset: str, shapes, repeats: int, threads: int, log) -> list[dict]:
    import torch
    import transformers

    torch.set_num_threads(threads)
    config = models.get_preset(preset)
    params = models.init(config, jax.random.key(0))
    with tempfile.TemporaryDirectory() as tmp:
        models.save_pretrained(tmp, config, params)
        hf = transformers.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
    fwd = jax.jit(models.apply, static_argnums=0)
    rows = []
    for batch, seq in shapes:
        tokens = np.random.RandomState(1).randint(0, config.vocab_size, (batch, seq))
        tokens_j = jnp.asarray(tokens)
        tokens_t = torch.tensor(tokens)

        def run_jax():
            start = time.perf_counter()
            out = fwd(config, params, tokens_j).block_until_ready()
            return time.perf_counter() - start, out

        def run_torch():
            start = time.perf_counter()
            with torch.inference_mode():
                out = hf(tokens_t).logits
            return time.perf_counter() - start, out

        compile_s, ours = run_jax()
        _, ref = run_torch()
        diff = float(np.abs(np.asarray(ours) - ref.numpy()).max())
        if diff > 1e-3:
            raise SystemExit(f"{preset} {batch}x{seq}: logits differ by {diff}; not comparable")
        t_jax, t_torch = [], []
        for _ in range(repeats):
            t_jax.append(run_jax()[0])
            t_torch.append(run_torch()[0])
        ours_s, ref_s = statistics.median(t_jax), statistics.median(t_torch)
        row = {
            "benchmark": "forward", "preset": preset, "params": config.num_params(),
            "batch": batch, "seq": seq, "dtype": "float32",
            "ours_tokens_per_s": round(batch * seq / ours_s, 1),
            "transformers_tokens_per_s": round(batch * seq / ref_s, 1),
            "speedup": round(ref_s / ours_s, 3),
            "ours_median_ms": round(ours_s * 1e3, 2), "transformers_median_ms": round(ref_s * 1e3, 2),
            "ours_first_call_s": round(compile_s, 3), "max_abs_logit_diff": diff,
            "repeats": repeats, "torch_threads": threads,
            "versions": {"jax": jax.__version__, "torch": torch.__version__,
                         "transformers": transformers.__version__},
        }
        log(row)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object per line")
    parser.add_argument("--presets", default="tiny,small", help="comma-separated model presets")
    parser.add_argument("--shapes", default="8x128,4x512",
                        help="comma-separated BATCHxSEQ token shapes")
    parser.add_argument("--repeats", type=int, default=10, help="timed repeats per framework")
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="torch intra-op threads (XLA uses every core)")
    args = parser.parse_args(argv)

    def log(row):
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(f"{row['preset']:>6} B{row['batch']:<3} T{row['seq']:<5} "
                  f"ours {row['ours_tokens_per_s']:>10.0f} tok/s  transformers "
                  f"{row['transformers_tokens_per_s']:>10.0f} tok/s  speedup "
                  f"{row['speedup']:.2f}x  (first call {row['ours_first_call_s']:.2f}s)",
                  flush=True)

    for preset in args.presets.split(","):
        bench_preset(preset.strip(), _parse_shapes(args.shapes), args.repeats, args.threads, log)
    return 0


if __name__ == "__main__":
    sys.exit(main())
