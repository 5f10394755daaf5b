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

import os
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import sampling
from models import multihost
from models.multihost import to_host
from rl.checkpoint import loop
from rl.checkpoint import persistent as checkpoint
from rl.checkpoint.faults import Faults
from rl.checkpoint.storage import orbax_coordination_barriers
from rl.train import adapters, build, evaluation, fission, multiturn, step_metrics
from rl.train import turn_update
from rl.train import learner as learner_lib
from rl.train.asynchronous import Overlap, Staleness
from rl.train.pipeline import CallFailed
from rl.train.batch import assemble
from rl.train.build import Run, export
from rl.train.collect import Collector
from rl.train.credit import Credit
from rl.train.groups import Groups
from rl.train.logs import RunLog
from rl.train.progress import Progress
from rl.train.streams import LogProbStreams


def in_memory(tree: Any, kind: str) -> Any:
    """`tree` with the same shardings in memory `kind` ("pinned_host" or "device")."""
    return jax.tree.map(lambda x: jax.device_put(x, x.sharding.with_memory_kind(kind)), tree)


class Trainer(LogProbStreams):
    def __init__(self, run: Run, params: Any, workdir: str, *, stream=None,
                 frozen: adapters.Frozen | None = None):
        cfg = run.cfg
        self.run_, self.cfg, self.workdir = run, cfg, workdir
        self.alg = run.algorithm
        # lora.rank >= 1: the base is frozen (quantized), the state's params are adapters;
        # `frozen`: one built already, shared with other trainers (rl.train.arms)
        if frozen is None and run.lora is not None:
            frozen = adapters.Frozen(run.lora, run.model_config, params, run.mesh, run.rules)
        self.frozen = frozen
        self.learner = build.learner_for(run, self.frozen.base if self.frozen else None)
        if self.frozen is not None:  # the reference is the base, adapter off: no copy
            self.ref_params = self.frozen.base if self.alg.needs_reference else None
            self.ref_checksum = self.frozen.base_checksum  # checked on resume, reference or not
            params = self.frozen.init(jax.random.key(cfg.seed + 3))
        else:
            self.ref_params = (jax.tree.map(jnp.copy, params) if self.alg.needs_reference
                               else None)
            # a resume rebuilds the reference from the config: this checks it is the same
            self.ref_checksum = (checkpoint.checksums(self.ref_params)
                                 if self.ref_params is not None else None)
        self.offload = bool(cfg.rl.reference.offload) and self.ref_params is not None
        if self.offload:  # rl.reference.offload: in host memory between uses
            self.ref_params = in_memory(self.ref_params, "pinned_host")
        self.state = self.learner.init_state(params, jax.random.key(cfg.seed + 1))
        self.copies = adapters.Copies(self.frozen) if self.frozen is not None else None
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
        self.progress = Progress(cfg, run.model_config.vocab_size, self.warnings)
        self.faults = Faults(cfg.fault)
        self.total_steps = cfg.train.steps
        self.checkpoint_config = checkpoint.config_dict(cfg)
        self.credit = Credit(self.alg, run.tree, self.rows, run.completion_len)
        # rollout.mode one_step_off / async: the sampler runs ahead in a thread
        # benchmarks/async.py: (phase, start, end) of each step's phases (perf_counter)
        self.timeline: list[tuple[str, float, float]] | None = None
        self.version = 0  # steps done: the policy after step s is version s
        self.call = 0     # the rollout call (batch) the running step trains on
        self.overlap = Overlap(self) if cfg.rollout.mode != "sync" else None
        # the staleness histogram's last bin: the sampler's lag (older tokens: carried)
        self.staleness_cap = max(1, self.overlap.lag if self.overlap is not None else 1)
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
        rollout = (self.collector.host_state() if self.overlap is None
                   else {"rollout": self.overlap.host_state(self.version)})
        return rollout | self.progress.state() | {"version": self.version,
                                                  "reference": self.ref_checksum}

    def set_host_state(self, host: dict) -> None:
        if host["reference"] != self.ref_checksum:
            raise checkpoint.CheckpointError(
                "the reference policy rebuilt from the config differs from the one the "
                "checkpointed run used (did the weights in model.hf_path or DIR/sft change?)")
        self.version = int(host.get("version", int(self.state.step)))  # absent before 3
        if self.overlap is None:
            self.collector.set_host_state(host)
        else:
            self.overlap.set_host_state(host["rollout"])
        self.progress.set_state(host)

    def data_state(self) -> dict:
        """Where the data goes on after the step that just ran (`rl.checkpoint.loop` skips
        a failed step's batch with it): the iterator's position, or, with the sampler
        ahead, the batch (call) to drop."""
        if self.overlap is None:
            return self.collector.data_state()
        return {"drop": self.call}

    def set_data_state(self, state: dict) -> None:
        if self.overlap is None:
            self.collector.set_data_state(state)
        else:
            self.overlap.drop(int(state["drop"]))

    def rolled_back(self, skips: dict) -> None:
        """`rl.checkpoint.loop`'s rollback, after the state is restored: the batches the
        replay will skip, known before the sampler starts again."""
        if self.overlap is not None:
            for position in skips.values():
                if "drop" in position:
                    self.overlap.drop(int(position["drop"]))

    # -- rollouts ---------------------------------------------------------------------------
    def _sample(self, prompts: list[list[int]], n: int, rng, **flat) -> sampling.Rollouts:
        """`n` samples of each prompt (flat, with `sampling.generate`'s `flat` options), or
        the tree's leaves (n unused)."""
        run, s = self.run_, self.cfg.sampling
        # the rollout thread samples with the version its call started under
        params, act = ((self.sampler_params(), run.act) if self.overlap is None
                       else (self.overlap.params, run.rollout_act))
        if self.overlap is not None and self.frozen is not None:  # the version's adapters
            params, self.overlap.mark = self.copies.rollout(params, self.overlap.base,
                                                            act.mesh)
        if self.overlap is not None and run.tree is None:  # a stop ends the call early
            flat["stop_when"] = self.overlap.interrupt(flat.get("stop_when"))
        if run.env is not None:  # multi-turn episodes (sync, one device: checked)
            return multiturn.generate(run, params, prompts, n, run.sampling_params, rng)
        if run.tree is not None:
            return sampling.tree_generate(run.model_config, params, prompts,
                                          run.tree, run.sampling_params, rng,
                                          decode=run.tokenizer.decode,
                                          stop_text=run.stop_text, sharding=act)
        latr = run.latr.at(self.version, n) if run.latr is not None and n > 1 else None
        if latr is not None:  # rl.train.latr_plan refuses the runs that pass `flat`
            return sampling.latr_generate(run.model_config, params, prompts, n,
                                          run.sampling_params, rng, latr,
                                          page_size=s.page_size, segment_len=s.segment_len,
                                          exempt=run.latr.exempt)
        return sampling.generate(run.model_config, params, prompts, n,
                                 run.sampling_params, rng, page_size=s.page_size,
                                 segment_len=s.segment_len, sharding=act,
                                 speculative=run.speculative,
                                 draft_model=run.draft_model and run.draft_model(params),
                                 **flat)

    def policy(self) -> Any:
        """The policy's params: the state's, or with LoRA the base with its adapters."""
        return self.learner.policy(self.state.params)

    def sampler_params(self) -> Any:
        """The params the sampler runs: the policy, or with LoRA its sampler copy (merged
        or factored; `rl.train.adapters.Copies`), made once per update."""
        return self.state.params if self.copies is None else self.copies.sync(self.state)

    def check_sync(self, stats: dict) -> dict:
        """LoRA: the adapters the batch was sampled with are the learner's of that version
        (`rl.train.adapters.Frozen.check_sync`; raises SyncError). A batch restored from a
        checkpoint, made before this process published its version, is not checked."""
        if self.frozen is None:
            return {}
        if self.overlap is None:
            return self.frozen.check_sync(self.copies.sampled,
                                          self.frozen.checksum(self.state.params))
        version = int(stats.get("rollout/sampler_version", -1))
        learner = self.overlap.published.get(version)
        if learner is None or "lora/sampler_checksum" not in stats:
            return {}
        return self.frozen.check_sync(stats["lora/sampler_checksum"], learner)

    def reference(self):
        """The reference params on the devices (None without a reference): a fresh device
        copy of the host-memory ones with `rl.reference.offload`."""
        if not self.offload:
            return self.ref_params
        return in_memory(self.ref_params, "device")

    # -- warnings -----------------------------------------------------------------------------
    def warn(self, text: str) -> None:
        self.progress.warn(text)

    def check_progress(self, step: int, metrics: dict) -> None:
        """`rl.train.progress.Progress.check`: warns when the run cannot learn."""
        self.progress.check(step, metrics)

    # -- one step -----------------------------------------------------------------------------
    def collect(self, step: int) -> tuple[Groups, dict, Any]:
        """The step's groups, rollout stats and the `finish()` that fills their rewards:
        sampled now (sync), or the batch the rollout thread made ahead (rewards done)."""
        start = time.perf_counter()
        if self.overlap is None:
            self.call = step
            groups, stats, finish_rewards, self.rng = self.collector.collect(step, self.rng)
            self.mark("sample", start)
            return groups, stats, finish_rewards
        self.call = self.overlap.next_call()  # a failed call is the one to drop
        try:
            groups, stats, (started, ended) = self.overlap.take(self.call)
        except CallFailed as e:
            self.call = e.call
            raise
        self.mark("sample", started, ended)
        self.mark("wait_batch", start)
        return groups, stats, lambda: None

    def mark(self, phase: str, start: float, end: float | None = None) -> None:
        """Records a phase's interval on the timeline (when one is kept)."""
        if self.timeline is not None:
            self.timeline.append((phase, start, time.perf_counter() if end is None else end))

    def publish(self) -> None:
        """The policy after this step is the next version (async: the sampler's)."""
        self.version += 1
        if self.overlap is not None:
            start = time.perf_counter()
            self.overlap.publish(self.version, self.state.params)
            self.mark("weights", start)

    def step(self, step: int = 0) -> dict[str, float]:
        """One RL step (`step` numbers it for the warnings and `config.fault`)."""
        t0 = time.perf_counter()
        self.version = step - 1  # the steps before this one
        groups, stats, finish_rewards = self.collect(step)
        self.faults.after_rollout(step)
        if not groups.num_groups:  # nothing to learn from: no update (not even momentum)
            finish_rewards()
            self.publish()
            if self.overlap is not None:
                self.overlap.pump()
            elapsed = time.perf_counter() - t0
            metrics = stats | {"batch/rows": 0, "update/skipped": 1, "time/rollout": elapsed,
                               "time/step": elapsed}
            self.check_progress(step, metrics)
            return metrics
        metrics = self.update(step, groups, stats, finish_rewards, t0)
        if self.collector.fission is not None:
            metrics |= fission.after_step(self, step, groups)
        self.check_progress(step, metrics)
        return metrics

    def update(self, step: int, groups: Groups, stats: dict, finish_rewards, t0: float) -> dict:
        """The update on `groups` (their rewards filled by `finish_rewards()` once the
        device work is dispatched); returns the step's metrics."""
        run, cfg = self.run_, self.cfg
        if self.copies is not None:  # a merged LoRA copy is not kept through the update
            self.copies.drop()
        seqs = assemble(groups.prompts, groups.completions, group_size=self.samples,
                        groups=cfg.train.prompts_per_step, completion_len=run.completion_len,
                        sampler_logp=groups.logp, row_valid=groups.valid,
                        versions=groups.versions, loss_masks=groups.loss_masks)
        t1 = time.perf_counter()
        # tokens go to the device once: scored here, then reused by the update
        sequences = self.learner.place_arrays(seqs.learner_inputs())
        # dispatched first (asynchronously), so the device scores while the reward
        # workers finish; np.asarray below waits for the device
        old_logp = self.proximal(seqs, sequences)
        reference = self.reference()
        ref_logp = (self.learner.score(reference, sequences)[0]
                    if reference is not None else None)
        divergence = (self.learner.js(self.policy(), reference, sequences)
                      if self.uses_js else None)
        del reference  # an offloaded reference's device copy is freed once these ran
        t_wait = time.perf_counter()
        finish_rewards()
        t_rewards = time.perf_counter()
        shaping = self.credit.shape_rewards(groups)
        old_logp = self.fresh_from_sampler(seqs, to_host(old_logp))  # a collective
        ref_logp = np.zeros_like(old_logp) if ref_logp is None else to_host(ref_logp)
        t2 = time.perf_counter()
        adv, grad_mask, weight, kl_mean = self.credit(groups, seqs, old_logp, ref_logp,
                                                      step=step, divergence=divergence)
        if self.faults.poison(step):
            adv = np.where(grad_mask, np.float32("nan"), adv)
        batch = sequences | self.learner.place_arrays(
            self.update_inputs(seqs, grad_mask, adv, old_logp, ref_logp))
        learner_lib.check_batch(batch)
        turn_metrics = self.check_sync(stats)
        if multiturn.update_of(cfg.rl.multiturn) == "seeupo":
            self.state, learner_metrics, turn_metrics = turn_update.for_trainer(
                self, seqs, sequences, grad_mask, adv, old_logp, ref_logp)
        else:
            self.state, learner_metrics = self.learner.train_step(self.state, batch)
        self.publish()
        if self.overlap is not None:
            self.overlap.pump()  # several processes: the sampler's calls, during the update
        learner_metrics = to_host(learner_metrics)
        t3 = time.perf_counter()
        self.mark("score", t1, t2)
        self.mark("update", t2, t3)

        metrics = (dict(stats) | shaping | turn_metrics
                   | self.credit.reweight_metrics(seqs, grad_mask, weight, divergence)
                   | step_metrics.learner(learner_metrics, self.alg, kl_mean)
                   | step_metrics.batch(groups, adv, grad_mask))
        if self.overlap is not None or cfg.rollout.april:
            metrics |= Staleness.of(groups, self.version - 1).metrics(self.staleness_cap)
        metrics.update({
            "time/rollout": t1 - t0, "time/reference": t2 - t1, "time/update": t3 - t2,
            "time/reward_wait": t_rewards - t_wait,
            "time/step": t3 - t0, "perf/tokens_per_s": stats["generated_tokens"] / (t3 - t0),
        })
        return metrics

    # -- the loop -----------------------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        start = time.perf_counter()
        metrics = evaluation.evaluate(self.run_, self.sampler_params(), self.eval_rng)
        if metrics:
            metrics["time/eval"] = time.perf_counter() - start
        return metrics

    def export(self, name: str) -> str:
        path = os.path.join(self.workdir, name)
        if self.frozen is None:
            return export(path, self.run_, self.state.params)
        # LoRA: the merged model, and the adapter alone in PATH/adapter (PEFT)
        return export(path, self.run_, self.frozen.merged(self.state.params), self.state.params)

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

    def learner_devices(self) -> list | None:
        """The devices of this thread's host collectives: the learner's when the sampler
        has devices of its own and runs at the same time (`models.multihost.scope`)."""
        if self.overlap is None or self.overlap.shared_devices:
            return None
        return list(self.run_.mesh.devices.flat)

    def run(self) -> dict:
        """All steps (resumed from DIR/checkpoints when it has any; `rl.checkpoint.loop.fit`).
        Returns {"before", "after"} held-out metrics plus "resumed_from" (a step) and
        "finished" (the checkpoints were already at `train.steps`: nothing ran)."""
        if self.learner_devices() is not None and multihost.process_count() > 1:
            orbax_coordination_barriers()
        try:
            with multihost.scope(self.learner_devices()):
                return loop.fit(self, directory=os.path.join(self.workdir, "checkpoints"),
                                section=self.cfg.checkpoint, stream=self.warnings)
        finally:
            if self.overlap is not None:
                self.overlap.stop()
            self.log.close()
