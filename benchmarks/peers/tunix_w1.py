"""Workload W1 on tunix's GRPO learner, for a side-by-side with benchmarks/rl_step.py.

Runs in its own virtualenv (tunix is never a dependency of this project):

    python3 -m venv /tmp/tunix && /tmp/tunix/bin/pip install google-tunix
    /tmp/tunix/bin/python benchmarks/peers/tunix_w1.py --steps 1 --json
    /tmp/tunix/bin/python benchmarks/peers/tunix_w1.py --steps 21 --json

W1 as in benchmarks/rl_step.py: tunix's own Qwen2 (4 layers, hidden 256,
4 heads, 2 KV heads, head_dim 64, MLP 1024, vocab 512, tied embeddings,
fp32, random init), 4 countdown prompts per step × 4 generations × 64 new
tokens at temperature 0.9 on the `vanilla` rollout engine, a reference model
with β = 0.04, AdamW lr 1e-5, one optimizer step per batch. Prompts are the
same countdown strings through a byte tokenizer (ids 3..258; pad 0, bos 1,
eos 2); the reward is 0 for every completion, which is what the random-init
policy earns on W1 in our run too. tunix's loop has no per-step timer, so a
run reports its whole `train()` wall time: the first step is `--steps 1`,
and the steady step is (T(21) - T(1)) / 20 from two runs.
"""

from __future__ import annotations

import argparse
import json
import time

from w1_prompts import countdown_prompts


class ByteTokenizer:
    """The methods tunix's tokenizer adapter asks for."""

    def encode(self, text, **kwargs):
        return [1] + [b + 3 for b in str(text).encode()]

    def decode(self, ids, **kwargs):
        return bytes(i - 3 for i in ids if 3 <= i < 259).decode(errors="replace")

    def bos_id(self):
        return 1

    def eos_id(self):
        return 2

    def pad_id(self):
        return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=21)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    start = time.perf_counter()

    import grain.python as grain
    import jax
    import numpy as np
    import optax
    from flax import nnx
    from tunix.models.qwen2 import model as qwen2
    from tunix.rl import rl_cluster as rlc
    from tunix.rl.grpo import grpo_learner as grpo
    from tunix.rl.rollout import base_rollout

    config = qwen2.ModelConfig(num_layers=4, vocab_size=512, embed_dim=256, hidden_dim=1024,
                               num_heads=4, head_dim=64, num_kv_heads=2, rope_theta=10000,
                               norm_eps=1e-6, use_tied_embedding=True)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))
    with mesh:
        actor = qwen2.Qwen2(config, rngs=nnx.Rngs(0))
        reference = qwen2.Qwen2(config, rngs=nnx.Rngs(0))
    params = sum(x.size for x in jax.tree.leaves(nnx.state(actor, nnx.Param)))
    cluster = rlc.RLCluster(
        actor=actor, reference=reference, tokenizer=ByteTokenizer(),
        cluster_config=rlc.ClusterConfig(
            role_to_mesh={rlc.Role.ACTOR: mesh, rlc.Role.REFERENCE: mesh,
                          rlc.Role.ROLLOUT: mesh},
            rollout_engine="vanilla", offload_to_cpu=False,
            training_config=rlc.RLTrainingConfig(
                actor_optimizer=optax.adamw(1e-5), eval_every_n_steps=10**6,
                max_steps=args.steps),
            rollout_config=base_rollout.RolloutConfig(
                max_tokens_to_generate=64, max_prompt_length=64, kv_cache_size=512,
                temperature=0.9, top_p=1.0)))

    def reward(prompts, completions, **kwargs):
        return [0.0] * len(completions)

    learner = grpo.GRPOLearner(
        rl_cluster=cluster, reward_fns=reward,
        algo_config=grpo.GRPOConfig(num_generations=4, num_iterations=1, beta=0.04))
    prompts = countdown_prompts(4 * (args.steps + 2))
    dataset = (grain.MapDataset.source(prompts).batch(4)
               .map(lambda x: {"prompts": list(x), "answer": list(x)}))
    setup = time.perf_counter() - start
    t0 = time.perf_counter()
    learner.train(dataset)
    total = time.perf_counter() - t0
    row = {"peer": "tunix", "workload": "W1", "steps": args.steps, "train_s": total,
           "setup_s": setup, "params_M": params / 1e6}
    print(json.dumps(row) if args.json else row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
