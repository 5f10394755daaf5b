"""The RL loop: prompts -> rollouts -> rewards -> advantages -> filter -> update -> eval.

    run = rl.train.build.resolve(cfg, workdir)
    trainer = Trainer(run, rl.train.build.init_params(run), workdir)
    summary = trainer.run()      # {"before": {...}, "after": {...}} held-out metrics

One step (`Trainer.step`):
  1. take `prompts_per_step` prompts from the seeded grain iterator;
  2. sample `n` completions each (flat) or a tree of leaves (tree), with the
     sampler's log-probs;
  3. score them with the verifier; with `train.dynamic_sampling` (DAPO) drop
     groups whose rewards all agree and sample more prompts, up to
     `dynamic_max_rounds` rounds, to refill the batch;
  4. reference log-probs (when the algorithm has a reference), π_old
     (`train.old_logp`: the sampler's or recomputed), a KL penalty in the
     reward (`rl.kl.in_reward`);
  5. advantages (`rl.algorithms.advantages`), the gradient mask (mc_grpo), reweighting
     (`rl.reweight`, fipo inside the loss);
  6. `Learner.train_step` (epochs × minibatches optimizer steps, compiled).
Held-out eval (greedy accuracy, pass@k) runs before training, every
`eval_every` steps and at the end. Logs: DIR/metrics.jsonl, DIR/tensorboard,
a console progress line. Batch shapes are fixed (padding rows are masked),
so after the first step nothing recompiles unless the prompt-length bucket
changes.

`run` drives the steps through `rl.checkpoint.loop.fit`: resume from DIR/checkpoints,
in-memory snapshots with rollback of failed steps, persistent checkpoints,
preemption. The Trainer is its job: `get_state`/`set_state` (params,
optimizer state, update counter, every PRNG key) and `host_state` (data
position, warning counters, the reference policy's checksum).
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import sampling
from models.multihost import to_host
from rl.checkpoint import loop
from rl.checkpoint import persistent as checkpoint
from rl.checkpoint.faults import Faults
from rl.train import evaluation
from rl.train import learner as learner_lib
from rl.train.batch import assemble
from rl.train.build import Run, export
from rl.train.collect import Collector
from rl.train.credit import Credit
from rl.train.groups import Groups
from rl.train.logs import RunLog

ZERO_REWARD_STEPS = 10  # all-zero rewards over this many first steps -> a warning
# a policy whose mean token entropy was once below STRUCTURED × ln V (ln V: a uniform
# policy's) and is now above COLLAPSED × ln V has collapsed (a random init starts near
# uniform and says nothing)
COLLAPSED_ENTROPY, STRUCTURED_ENTROPY = 0.9, 0.6


def in_memory(tree: Any, kind: str) -> Any:
    """`tree` with the same shardings in memory `kind` ("pinned_host" or "device")."""
    return jax.tree.map(lambda x: jax.device_put(x, x.sharding.with_memory_kind(kind)), tree)


def optimizer_for(cfg) -> Any:
    o, t = cfg.optim, cfg.train
    return learner_lib.make_optimizer(
        o.lr, total_steps=t.steps * t.epochs * t.minibatches, schedule=o.schedule,
        warmup_steps=o.warmup_steps, b1=o.b1, b2=o.b2, eps=o.eps,
        weight_decay=o.weight_decay, grad_clip=o.grad_clip, end_lr_fraction=o.end_lr_fraction)


class Trainer:
    def __init__(self, run: Run, params: Any, workdir: str, *, stream=None):
        cfg = run.cfg
        self.run_, self.cfg, self.workdir = run, cfg, workdir
        self.alg = run.algorithm
        self.learner = learner_lib.Learner(
            run.model_config, self.alg, optimizer_for(cfg), run.act, epochs=cfg.train.epochs,
            minibatches=cfg.train.minibatches, temperature=run.sampling_params.temperature,
            logits_chunk=min(cfg.train.logits_chunk, run.completion_len))
        self.ref_params = (jax.tree.map(jnp.copy, params) if self.alg.needs_reference
                           else None)
        # a resume rebuilds the reference from the config: this checks it is the same one
        self.ref_checksum = (checkpoint.checksums(self.ref_params)
                             if self.ref_params is not None else None)
        self.offload = bool(cfg.rl.reference.offload) and self.ref_params is not None
        if self.offload:  # rl.reference.offload: in host memory between uses
            self.ref_params = in_memory(self.ref_params, "pinned_host")
        self.state = self.learner.init_state(params, jax.random.key(cfg.seed + 1))
        self.collector = Collector(run, self._sample, run.selector)
        self.samples = run.samples_per_prompt
        self.rows = cfg.train.prompts_per_step * self.samples
        # on the mesh (replicated), like every other leaf of the state: a restored
        # snapshot or checkpoint puts them back exactly there
        self.rng, self.eval_rng = learner_lib.on_mesh(
            (jax.random.key(cfg.seed), jax.random.key(cfg.seed + 2)), run.act)
        self.log = RunLog(workdir, cfg.train.steps, stream=stream, every=cfg.train.log_every,
                          tensorboard=cfg.train.tensorboard)
        self.warnings = sys.stderr if stream is None else stream
        self.zero_reward_steps = 0  # consecutive steps from the start with every reward 0
        self.empty_steps = 0        # steps whose dynamic sampling kept no group
        self.collapsed_steps = 0    # steps whose policy was near uniform (COLLAPSED_ENTROPY)
        self.entropy_min = None     # the lowest mean token entropy so far
        self.faults = Faults(cfg.fault)
        self.total_steps = cfg.train.steps
        self.checkpoint_config = checkpoint.config_dict(cfg)
        self.credit = Credit(self.alg, run.tree, self.rows, run.completion_len)
        self.uses_js = (self.alg.reweight == "divergence_weighted"
                        and self.alg.reweight_options.get("divergence", "js") == "js")

    # -- the job's state (rl.checkpoint.loop) ------------------------------------------------------------
    def get_state(self) -> dict:
        s = self.state
        return {"params": s.params, "opt_state": s.opt_state, "update_step": s.step,
                "learner_rng": s.rng, "rng": self.rng, "eval_rng": self.eval_rng}

    def set_state(self, tree: dict) -> None:
        self.state = learner_lib.TrainState(tree["params"], tree["opt_state"],
                                            tree["update_step"], tree["learner_rng"])
        self.rng, self.eval_rng = tree["rng"], tree["eval_rng"]

    def host_state(self) -> dict:
        return self.collector.host_state() | {
            "zero_reward_steps": self.zero_reward_steps, "empty_steps": self.empty_steps,
            "collapsed_steps": self.collapsed_steps, "entropy_min": self.entropy_min,
            "reference": self.ref_checksum}

    def set_host_state(self, host: dict) -> None:
        if host["reference"] != self.ref_checksum:
            raise checkpoint.CheckpointError(
                "the reference policy rebuilt from the config differs from the one the "
                "checkpointed run used (did the weights in model.hf_path or DIR/sft change?)")
        self.collector.set_host_state(host)
        self.zero_reward_steps, self.empty_steps = host["zero_reward_steps"], host["empty_steps"]
        self.collapsed_steps = host.get("collapsed_steps", 0)  # absent before format 2
        self.entropy_min = host.get("entropy_min")

    def data_state(self) -> dict:
        return self.collector.data_state()

    def set_data_state(self, state: dict) -> None:
        self.collector.set_data_state(state)

    # -- rollouts ---------------------------------------------------------------------------
    def _sample(self, prompts: list[list[int]], n: int, rng, **flat) -> sampling.Rollouts:
        """`n` samples of each prompt (flat, with `sampling.generate`'s `flat` options), or
        the tree's leaves (n unused)."""
        run, s = self.run_, self.cfg.sampling
        if run.tree is not None:
            return sampling.tree_generate(run.model_config, self.state.params, prompts,
                                          run.tree, run.sampling_params, rng,
                                          decode=run.tokenizer.decode,
                                          stop_text=run.stop_text, sharding=run.act)
        return sampling.generate(run.model_config, self.state.params, prompts, n,
                                 run.sampling_params, rng, page_size=s.page_size,
                                 segment_len=s.segment_len, sharding=run.act, **flat)

    def reference(self):
        """The reference params on the devices (None without a reference): a fresh device
        copy of the host-memory ones with `rl.reference.offload`."""
        if not self.offload:
            return self.ref_params
        return in_memory(self.ref_params, "device")

    # -- warnings -----------------------------------------------------------------------------
    def warn(self, text: str) -> None:
        print(f"warning: {text}", file=self.warnings, flush=True)

    def check_progress(self, step: int, metrics: dict) -> None:
        """Warns when the run cannot learn: every reward 0 over its first steps, a step
        whose dynamic sampling kept no group (its update is skipped), or a policy whose
        token distribution has collapsed towards uniform (e.g. a learning rate far too
        high: it samples noise and no update brings it back)."""
        self.check_collapse(step, metrics.get("entropy"))
        if self.zero_reward_steps == step - 1 and metrics.get("sampled/all_zero"):
            self.zero_reward_steps = step
            if step == min(ZERO_REWARD_STEPS, self.cfg.train.steps):
                self.warn(
                    f"every sampled completion scored 0 over the first {step} steps: with "
                    "identical rewards every advantage is 0 and the policy does not change. "
                    "Start from a policy that sometimes succeeds (train.warm_start=sft for "
                    "procedural tasks, or model.hf_path), or make the task easier")
        if metrics.get("batch/rows") == 0:
            self.empty_steps += 1
            if self.empty_steps == 1 or self.empty_steps % 10 == 0:
                self.warn(
                    f"step {step}: dynamic sampling kept no group ({self.empty_steps} such "
                    f"steps so far): in all {metrics['dynamic/rounds']} rounds every prompt's "
                    "samples scored alike (all right or all wrong), so there is nothing to "
                    "learn and the update was skipped. Raise train.dynamic_max_rounds or "
                    "sampling.n, or use a task nearer the policy's level")

    def check_collapse(self, step: int, entropy: float | None) -> None:
        """The collapse warning of `check_progress` (the first step, then every 50th)."""
        if entropy is None:
            return
        uniform = math.log(self.run_.model_config.vocab_size)
        lowest = entropy if self.entropy_min is None else min(self.entropy_min, entropy)
        self.entropy_min = lowest
        if lowest >= STRUCTURED_ENTROPY * uniform or entropy < COLLAPSED_ENTROPY * uniform:
            return
        self.collapsed_steps += 1
        if self.collapsed_steps == 1 or self.collapsed_steps % 50 == 0:
            self.warn(
                f"step {step}: the policy's mean token entropy is {entropy:.2f} nats, "
                f"{entropy / uniform:.0%} of a uniform distribution over its "
                f"{self.run_.model_config.vocab_size} tokens, up from {lowest:.2f} "
                f"({self.collapsed_steps} such steps so far): it has collapsed and samples "
                f"noise. Lower optim.lr (now {self.cfg.optim.lr:g}) or raise "
                "optim.warmup_steps, and start again")

    # -- one step -----------------------------------------------------------------------------
    def step(self, step: int = 0) -> dict[str, float]:
        """One RL step (`step` numbers it for the warnings and `config.fault`)."""
        run, cfg = self.run_, self.cfg
        t0 = time.perf_counter()
        groups, stats, finish_rewards, self.rng = self.collector.collect(step, self.rng)
        self.faults.after_rollout(step)
        if not groups.num_groups:  # nothing to learn from: no update (not even momentum)
            finish_rewards()
            elapsed = time.perf_counter() - t0
            metrics = stats | {"batch/rows": 0, "update/skipped": 1, "time/rollout": elapsed,
                               "time/step": elapsed}
            self.check_progress(step, metrics)
            return metrics
        seqs = assemble(groups.prompts, groups.completions, group_size=self.samples,
                        groups=cfg.train.prompts_per_step, completion_len=run.completion_len,
                        sampler_logp=groups.logp, row_valid=groups.valid)
        t1 = time.perf_counter()
        # tokens go to the device once: scored here, then reused by the update
        sequences = self.learner.place_arrays(seqs.learner_inputs())
        # dispatched first (asynchronously), so the device scores while the reward
        # workers finish; np.asarray below waits for the device
        old_logp = (self.learner.score(self.state.params, sequences)[0]
                    if self.run_.old_logp == "recompute" else seqs.sampler_logp)
        reference = self.reference()
        ref_logp = (self.learner.score(reference, sequences)[0]
                    if reference is not None else None)
        divergence = (self.learner.js(self.state.params, reference, sequences)
                      if self.uses_js else None)
        del reference  # an offloaded reference's device copy is freed once these ran
        t_wait = time.perf_counter()
        finish_rewards()
        t_rewards = time.perf_counter()
        shaping = self.credit.shape_rewards(groups)
        old_logp = to_host(old_logp)  # gathered from every process (a collective)
        ref_logp = np.zeros_like(old_logp) if ref_logp is None else to_host(ref_logp)
        t2 = time.perf_counter()
        adv, grad_mask, weight, kl_mean = self.credit(groups, seqs, old_logp, ref_logp,
                                                      step=step, divergence=divergence)
        if self.faults.poison(step):
            adv = np.where(grad_mask, np.float32("nan"), adv)
        update = {"mask": grad_mask, "advantages": adv, "old_logp": old_logp,
                  "ref_logp": ref_logp}
        if self.run_.old_logp == "recompute" and self.alg.loss_options.get("tis_cap"):
            update["behavior_logp"] = seqs.sampler_logp
        batch = sequences | self.learner.place_arrays(update)
        learner_lib.check_batch(batch)
        self.state, learner_metrics = self.learner.train_step(self.state, batch)
        learner_metrics = to_host(learner_metrics)
        t3 = time.perf_counter()

        metrics = (dict(stats) | shaping
                   | self.credit.reweight_metrics(seqs, grad_mask, weight, divergence)
                   | self.learner_metrics(learner_metrics, kl_mean)
                   | batch_metrics(groups, adv, grad_mask))
        metrics.update({
            "time/rollout": t1 - t0, "time/reference": t2 - t1, "time/update": t3 - t2,
            "time/reward_wait": t_rewards - t_wait,
            "time/step": t3 - t0, "perf/tokens_per_s": stats["generated_tokens"] / (t3 - t0),
        })
        self.check_progress(step, metrics)
        return metrics

    def learner_metrics(self, learner_metrics: dict, kl_mean: float) -> dict[str, float]:
        """The update's metrics as learner/*, the headline ones also without the prefix,
        and the KL when it is in the reward (the loss then has no KL term to log)."""
        out = {f"learner/{k}": float(v) for k, v in learner_metrics.items()}
        for key in ("kl", "entropy", "grad_norm", "clip_frac_low", "clip_frac_high"):
            if f"learner/{key}" in out:
                out[key] = out[f"learner/{key}"]
        if self.alg.kl_in_reward and self.alg.kl_coef > 0:
            out["kl"] = out["kl/in_reward"] = float(kl_mean)
            out["kl/reward_penalty"] = -self.alg.kl_coef * float(kl_mean)
        return out

    # -- the loop -----------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        start = time.perf_counter()
        metrics = evaluation.evaluate(self.run_, self.state.params, self.eval_rng)
        if metrics:
            metrics["time/eval"] = time.perf_counter() - start
        return metrics

    def export(self, name: str) -> str:
        return export(os.path.join(self.workdir, name), self.run_, self.state.params)

    def eval_due(self, step: int) -> bool:
        every = self.cfg.train.eval_every
        return bool(every and step % every == 0) or step == self.total_steps

    def after_step(self, step: int) -> None:
        """Hugging Face exports: DIR/exports/step_N every `train.export_every`, DIR/final
        (and `fault.kill_after_step`)."""
        self.faults.after_step(step)
        every = self.cfg.train.export_every
        if every and step % every == 0 and step < self.total_steps:
            self.export(os.path.join("exports", f"step_{step}"))
        if step == self.total_steps:
            self.export("final")

    def run(self) -> dict:
        """All steps (resumed from DIR/checkpoints when it has any; `rl.checkpoint.loop.fit`).
        Returns {"before", "after"} held-out metrics plus "resumed_from" (a step) and
        "finished" (the checkpoints were already at `train.steps`: nothing ran)."""
        try:
            return loop.fit(self, directory=os.path.join(self.workdir, "checkpoints"),
                            section=self.cfg.checkpoint, stream=self.warnings)
        finally:
            self.log.close()


def batch_metrics(groups: Groups, adv: np.ndarray, grad_mask: np.ndarray) -> dict[str, float]:
    """Rewards, accuracy and lengths of the step's real rows (DARS pads its groups with
    invalid rows), and the mean |advantage| over the trained tokens."""
    real = np.asarray(groups.valid, bool)
    n = int(real.sum())
    rewards = np.asarray(groups.rewards, np.float32)[real]
    correct = np.asarray(groups.correct, bool)[real]
    lengths = np.array([len(c) for c in groups.completions])[real] if n else np.zeros(1)
    return {
        "reward/mean": float(rewards.mean()) if n else 0.0,
        "reward/std": float(rewards.std()) if n else 0.0,
        "accuracy": float(np.mean(correct)) if n else 0.0,
        "response_length/mean": float(lengths.mean()),
        "response_length/max": int(lengths.max()),
        "response_length/truncated_frac": (float(np.mean(np.asarray(groups.truncated)[real]))
                                           if n else 0.0),
        "batch/rows": n, "update/skipped": 0,
        "advantage/abs_mean": float(np.abs(adv[grad_mask]).mean()) if grad_mask.any() else 0.0,
    }
