"""One RL step on workload W1, timed: the first step (compile included) and the steady step.

W1: the Qwen2-shaped `tiny` preset (4.07M params: vocab 512, hidden 256, 4
layers, 4 heads, 2 KV heads, MLP 1024, tied embeddings, fp32), 4 prompts ×
4 samples × 64 new tokens at temperature 0.9, a frozen reference model with
β = 0.04 (k3 KL in the loss), AdamW lr 1e-5, one optimizer step per batch.
Prompts are countdown problems through the byte tokenizer; completions of the
random-init policy run to the full 64 tokens (eos is sampled rarely), so each
step decodes 1,024 tokens. A step is what `rl.train.trainer.Trainer.step` does:
sample + verify (rollout), reference log-probs (reference), advantages and
the jitted train step (update), each timed to completion.

    python benchmarks/rl_step.py --json
    python benchmarks/rl_step.py --steps 30 --max_new_tokens 64
    python benchmarks/rl_step.py --json --compilation_cache /tmp/w1_cache   # twice: 2nd is warm
    python benchmarks/rl_step.py --json --remat none     # keep every layer activation

Layers are rematerialised in the backward pass (`--remat full`, the
default here): on this CPU recomputing a layer is cheaper than writing and
re-reading its saved activations (update 0.156 vs 0.169 s, interleaved A/B).
XLA_FLAGS gets the config's `cpu_xla_flags` as in the launch/ entry points.

The first step includes every compile. Without `--compilation_cache` that is
a cold start; with it (what the launch/ entry points enable by default), a
process whose programs are already in the cache loads them instead. Each row
says which: compilation_cache = off | cold (empty dir) | warm.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from configs import base, variants


def w1_config(max_new_tokens: int = 64, remat: str = "full"):
    cfg = base.build("tiny")
    cfg.model.remat = remat
    variants.apply(cfg, "grpo")
    cfg.rl.loss.agg = "token_mean"
    cfg.rl.kl.kind, cfg.rl.kl.coef = "k3", 0.04
    cfg.data.task.name = "countdown"
    cfg.sampling.n = 4
    cfg.sampling.temperature = 0.9
    cfg.sampling.max_new_tokens = max_new_tokens
    cfg.train.prompts_per_step = 4
    cfg.train.epochs = cfg.train.minibatches = 1
    cfg.optim.lr = 1e-5
    cfg.mesh.data = 1
    cfg.lock()
    return cfg


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--steps", type=int, default=20, help="steps after the first")
    parser.add_argument("--max_new_tokens", type=int, default=64)
    parser.add_argument("--remat", default="full", choices=("none", "dots", "full"),
                        help="per-layer rematerialisation in the backward pass")
    parser.add_argument("--compilation_cache", default="",
                        help="JAX persistent compilation cache directory ('' = off)")
    args = parser.parse_args(argv)

    cfg = w1_config(args.max_new_tokens, args.remat)
    start = time.perf_counter()
    import jax  # noqa: F401  (import time is not part of the first step)

    from launch import runtime
    from rl.train import build
    from rl.train.trainer import Trainer

    runtime.configure_xla(cfg.cpu_xla_flags)  # as the launch/ entry points do

    cache = "off"
    if args.compilation_cache:
        path = os.path.expanduser(args.compilation_cache)
        cache = "warm" if os.path.isdir(path) and os.listdir(path) else "cold"
        runtime.enable_compilation_cache(path)

    with tempfile.TemporaryDirectory() as workdir:
        run = build.resolve(cfg, workdir)
        params = build.init_params(run)
        trainer = Trainer(run, params, workdir, stream=io.StringIO())
        setup = time.perf_counter() - start
        steps = [trainer.step() for _ in range(args.steps + 1)]
        trainer.log.close()
    keys = ("time/step", "time/rollout", "time/reference", "time/update")
    first = {k: steps[0][k] for k in keys}
    steady = {k: statistics.median(s[k] for s in steps[1:]) for k in keys}
    tokens = statistics.median(s["generated_tokens"] for s in steps[1:])
    rows = [
        {"workload": "W1", "phase": "first_step", **first, "setup_s": setup,
         "compilation_cache": cache, "remat": args.remat,
         "xla_flags": os.environ.get("XLA_FLAGS", "")},
        {"workload": "W1", "phase": f"steady_median_of_{args.steps}", **steady,
         "generated_tokens": tokens, "params_M": run.model_config.num_params() / 1e6,
         "final_kl": steps[-1].get("kl")},
    ]
    for row in rows:
        if args.json:
            print(json.dumps(row))
        else:
            print("  ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                            for k, v in row.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
