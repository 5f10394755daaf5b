"""Workload W1 on TRL's GRPOTrainer (PyTorch, CPU), for a side-by-side with
benchmarks/rl_step.py, on the very same weights.

Runs in its own virtualenv (TRL and torch are never dependencies of this project):

    python3 -m venv /tmp/trl
    /tmp/trl/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    /tmp/trl/bin/pip install trl transformers
    .venv/bin/python benchmarks/peers/export_w1.py /tmp/w1_hf      # our W1 init, as HF
    /tmp/trl/bin/python benchmarks/peers/trl_w1.py /tmp/w1_hf --json

W1: the exported `tiny` policy (4.07M params, tied embeddings, fp32) and its
byte tokenizer, 4 countdown prompts per step × 4 generations × 64 new tokens
(min = max, as our random-init policy runs every completion to full length)
at temperature 0.9, β = 0.04 with a reference model, AdamW lr 1e-5, one
optimizer step per generation batch. The reward is 0 for every completion,
which is what the random-init policy earns on W1 in our run too. A step is
TRL's `training_step` (generation, reference and policy log-probs, loss,
backward, optimizer step), timed by a callback from step begin to step end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

from w1_prompts import countdown_prompts


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("--steps", type=int, default=21)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    class Timer(TrainerCallback):
        def __init__(self):
            self.times, self._start = [], None

        def on_step_begin(self, *a, **k):
            self._start = time.perf_counter()

        def on_step_end(self, *a, **k):
            self.times.append(time.perf_counter() - self._start)

    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    model = AutoModelForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32)
    data = Dataset.from_dict({"prompt": countdown_prompts(4 * (args.steps + 2))})

    def reward(completions, **kwargs):
        return [0.0] * len(completions)

    timer = Timer()
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out, learning_rate=1e-5, per_device_train_batch_size=16,
            num_generations=4, max_completion_length=64, temperature=0.9, beta=0.04,
            max_steps=args.steps, logging_steps=10**6, save_strategy="no", report_to="none",
            use_cpu=True, bf16=False, seed=0, shuffle_dataset=False,
            gradient_checkpointing=False,  # TRL turns it on by default; W1 has no remat
            generation_kwargs={"min_new_tokens": 64})
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=config, train_dataset=data,
                              processing_class=tokenizer, callbacks=[timer])
        trainer.train()
    steady = timer.times[1:]
    row = {"peer": "trl", "workload": "W1", "first_step_s": timer.times[0],
           "steady_median_s": statistics.median(steady), "steady_n": len(steady),
           "torch_threads": torch.get_num_threads(),
           "params_M": sum(p.numel() for p in model.parameters()) / 1e6}
    print(json.dumps(row) if args.json else row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
