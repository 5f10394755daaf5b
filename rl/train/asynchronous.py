"""`rollout.mode = one_step_off | async`: the trainer's sampler side, run ahead of the learner.

    overlap = Overlap(trainer)                 # the trainer's collector, in a thread
    groups, stats, version = overlap.take(step)  # the batch step `step` trains on
    overlap.publish(state)                     # after the update: the new policy version
    host = overlap.host_state(version)         # the checkpoint's part (batches and state)

The sampler makes one call per step (`rl.train.pipeline`). Call c samples batch c under
policy version max(0, c - 1 - lag): `one_step_off` has lag 1 and samples each batch whole
(the synchronous collector, one version behind); `async` has lag η =
`rollout.max_staleness` (AReaL's admission rule: the prompts of batch c start once the
learner has reached version c - 1 - η) and stops each call as soon as `prompts_per_step`
groups have finished; the samples still decoding are carried into the next call, which
continues them under its newer version (an in-flight update at a decode-segment
boundary; `rl.train.collect.Collector.collect_async`). While a carried sample began more
than η versions before the call's, the call admits no new prompts. η = 0 is the
synchronous schedule through this machinery.

The sampler's weights: with `mesh.rollout_devices` = K > 0 it runs on its own devices (the
run's last K, `Run.rollout_act`) and each version moves there with a resharding
`jax.device_put` right after the update; with K = 0 it shares the learner's devices and
each version is a copy (the update donates the learner's buffers). The versions a call
may still need are kept until it starts: at most lag + 1 copies of the parameters.

Every token records the version that sampled it (`Groups.versions`): the learner's
off-policy objective and the staleness metrics read them.
"""

from __future__ import annotations

import copy
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from models import multihost
from models import sharding as sharding_lib
from rl.train.groups import Groups
from rl.train.pipeline import Pipeline, Produced, Weights

GROUP_FIELDS = ("prompts", "completions", "logp", "rewards", "correct", "group_ids", "paths",
                "truncated", "rows", "valid", "versions")
# not stored: multi-turn rows (their loss masks and episode records) never run
# asynchronously (rl.train.multiturn.check), and Fission-GRPO's references are read
# right after the update; restored batches have None for each


def lag_of(cfg) -> int:
    """How many versions the sampler runs behind the learner (0 = synchronous)."""
    mode = cfg.rollout.mode
    if mode == "sync":
        return 0
    if mode == "one_step_off":
        return 1
    return int(cfg.rollout.max_staleness)


def groups_to_state(groups: Groups) -> dict:
    """A produced batch's groups as JSON and NumPy arrays (what a checkpoint stores)."""
    out = {}
    for name in GROUP_FIELDS:
        value = getattr(groups, name)
        if name in ("logp", "versions", "paths"):
            out[name] = [np.asarray(v) for v in value]
        elif name == "rows":
            out[name] = [[int(a), int(b)] for a, b in value]
        elif name in ("prompts", "completions"):
            out[name] = [[int(t) for t in v] for v in value]
        else:
            out[name] = [v.item() if isinstance(v, np.generic) else v for v in value]
    return out


def groups_from_state(state: dict) -> Groups:
    """Inverse of `groups_to_state`."""
    fields = dict(state)
    fields["logp"] = [np.asarray(v, np.float32) for v in fields["logp"]]
    fields["versions"] = [np.asarray(v, np.int32) for v in fields["versions"]]
    fields["paths"] = [np.asarray(v, np.int32) for v in fields["paths"]]
    fields["rows"] = [tuple(r) for r in fields["rows"]]
    rows, groups = len(fields["completions"]), len(fields["prompts"])
    return Groups(**fields, references=[None] * groups, loss_masks=[None] * rows,
                  episodes=[None] * rows)


class Overlap:
    """The sampler side of a trainer in `one_step_off` / `async` mode (module doc)."""

    def __init__(self, trainer):
        self.trainer = trainer
        cfg = trainer.cfg
        self.mode, self.lag = cfg.rollout.mode, lag_of(cfg)
        self.max_staleness = int(cfg.rollout.max_staleness)
        run = trainer.run_
        self.act = run.rollout_act
        self.shared_devices = self.act is run.act
        self.shardings = sharding_lib.param_shardings(run.model_config, self.act.mesh,
                                                      run.rules)
        # LoRA: a version is its adapters alone (megabytes); the sampler keeps its own copy
        # of the frozen base, and each version's checksum is kept to check the batches
        self.base, self.published, self.mark = None, {}, None
        if trainer.frozen is not None:
            self.base, self.shardings = (
                (trainer.frozen.base, None) if self.shared_devices
                else trainer.frozen.on_mesh(self.act.mesh))
        self.weights = Weights()
        devices = None if self.shared_devices else list(self.act.mesh.devices.flat)
        # the calls the final checkpoint holds too (the lag's worth past the last step):
        # a rerun with more steps then continues with the versions a longer run has
        self.pipeline = Pipeline(self._produce, self.weights, self.lag,
                                 last_call=lambda: trainer.total_steps + self.lag + len(
                                     self.pipeline.dropped),
                                 skip=self._skip, context=lambda: multihost.scope(devices),
                                 threaded=multihost.process_count() == 1)
        self.rng = np.asarray(jax.random.key_data(trainer.rng))  # the sampler's key data
        self.started = False
        self.restore: dict | None = None  # a restored rollout state, started lazily
        self.params = None  # the version the running call samples with (rollout thread)
        self.waited = 0.0  # the sampler's waits for versions, up to the last take

    # -- the rollout thread -----------------------------------------------------------------------
    def _produce(self, call: int, params, version: int) -> Produced:
        """Call `call` under `version`: the collector's batch, its rewards scored."""
        collector = self.trainer.collector
        self.params = params
        rng = jax.random.wrap_key_data(jnp.asarray(self.rng))
        if self.mode == "async" and self.max_staleness > 0:
            groups, stats, finish, rng = collector.collect_async(rng, version,
                                                                 self.max_staleness)
        else:
            groups, stats, finish, rng = collector.collect(call, rng, version)
        finish()  # fills `stats` in place
        if self.mark is not None:  # LoRA: the checksum of the adapters this call ran
            stats["lora/sampler_checksum"] = float(self.mark)
        self.rng = np.asarray(jax.random.key_data(rng))
        state = copy.deepcopy(collector.host_state()) | {"rng": self.rng.copy()}
        return Produced({"groups": groups_to_state(groups), "stats": stats}, state, version)

    def _skip(self, call: int) -> dict:
        """A dropped call: one batch of prompts is drawn and set aside (its failure may
        have come from them); nothing is sampled, the carried samples stay carried."""
        collector = self.trainer.collector
        next(collector.data)
        return copy.deepcopy(collector.host_state()) | {"rng": self.rng.copy()}

    def interrupt(self, stop_when):
        """A sampler's `stop_when` that also ends a call at its next segment boundary once
        the pipeline is stopping (the call's output is then discarded)."""
        return lambda done: self.pipeline.stopping or (stop_when is not None
                                                        and stop_when(done))

    # -- the learner's side ---------------------------------------------------------------------
    def _ensure_started(self) -> None:
        if self.started:
            return
        version = self.trainer.version
        if self.restore is None:
            state = copy.deepcopy(self.trainer.collector.host_state()) | {"rng": self.rng}
            self.pipeline.start(1, state, floor=version)
        else:
            r = self.restore
            ready = {int(c): Produced(p["batch"], {}, int(p["version"]))
                     for c, p in r["queue"].items()}
            self.pipeline.start(int(r["through"]) + 1, r["state"], ready, r["dropped"],
                                int(r["taken"]), floor=version)
            self.restore = None
        self.started = True
        self._put(version, self.trainer.state.params)

    def next_call(self) -> int:
        """The call the next step trains on."""
        self._ensure_started()
        return self.pipeline.next_to_take()

    def take(self, call: int) -> tuple[Groups, dict, tuple[float, float]]:
        """(groups, stats, when the call started and ended) of call `call` (`next_call`)."""
        out = self.pipeline.take(call)
        waited, self.waited = self.weights.waited_s - self.waited, self.weights.waited_s
        stats = dict(out.batch["stats"]) | {
            "rollout/sampler_version": out.version, "time/sampler_wait": waited,
            "time/sampler_call": out.ended - out.started}
        return groups_from_state(out.batch["groups"]), stats, (out.started, out.ended)

    def publish(self, version: int, params) -> None:
        """Version `version` for the sampler: a copy on its devices (module doc)."""
        self._ensure_started()
        self._put(version, params)

    def _put(self, version: int, params) -> None:
        if self.trainer.frozen is not None:
            self.published = {v: c for v, c in self.published.items() if v > version - 64}
            self.published[version] = self.trainer.frozen.checksum(params)
        if self.shared_devices:
            moved = jax.tree.map(jnp.copy, params)
        else:
            moved = multihost.reshard(params, self.shardings)
        self.weights.publish(version, moved)

    def pump(self) -> None:
        """With several processes, the calls the latest computed version allows, made now
        (after the update is dispatched: they run while it does). One process: nothing."""
        self._ensure_started()
        self.pipeline.pump(self.trainer.version - 1)

    def drop(self, call: int) -> None:
        """Batch `call` is skipped (its step failed): registered before the thread
        restarts when a restored state is pending."""
        if self.restore is not None:
            self.restore["dropped"] = sorted(set(self.restore["dropped"]) | {call})
        else:
            self.pipeline.drop(call)

    def host_state(self, version: int) -> dict:
        """What a checkpoint at learner `version` holds of the sampler: the batches made for
        the steps after it and the rollout's state after the last of them (a restored
        state not yet started: itself)."""
        if self.restore is not None:
            return copy.deepcopy(self.restore)
        self._ensure_started()
        ready, state, through = self.pipeline.capture(self.pipeline.through(version - 1))
        return {"mode": self.mode, "lag": self.lag, "taken": self.pipeline.taken,
                "dropped": sorted(self.pipeline.dropped), "through": through, "state": state,
                "queue": {str(c): {"batch": p.batch, "version": p.version}
                          for c, p in sorted(ready.items())}}

    def set_host_state(self, host: dict) -> None:
        """Restores a `host_state` (the thread restarts at the next use, after the
        learner's state is back: it publishes the restored parameters first)."""
        if host.get("mode") != self.mode or int(host.get("lag", -1)) != self.lag:
            raise ValueError(f"the checkpoint's rollout ({host.get('mode')}, lag "
                             f"{host.get('lag')}) is not this run's ({self.mode}, lag {self.lag})")
        self.pipeline.stop()
        self.trainer.collector.set_host_state(host["state"])
        self.rng = np.asarray(host["state"]["rng"], np.uint32)
        self.restore = copy.deepcopy(host)
        self.started = False

    def stop(self) -> None:
        self.pipeline.stop()
        self.started = False


@dataclasses.dataclass
class Staleness:
    """Per-token staleness of a batch: the learner's version minus the sampling version."""

    ages: np.ndarray  # [tokens] int

    @classmethod
    def of(cls, groups: Groups, learner_version: int) -> Staleness:
        ages = [learner_version - np.asarray(v) for v, ok in zip(groups.versions, groups.valid,
                                                                  strict=True) if ok]
        return cls(np.concatenate(ages + [np.zeros(0, np.int64)]))

    def metrics(self, cap: int) -> dict[str, float]:
        """Mean, max, and the fraction of tokens at each age 0..cap (the last bin: cap or
        more): the staleness histogram."""
        if np.any(self.ages < 0):
            raise ValueError("a token was sampled by a version newer than the learner's")
        if not self.ages.size:
            return {"staleness/mean": 0.0, "staleness/max": 0}
        out = {"staleness/mean": float(self.ages.mean()), "staleness/max": int(self.ages.max())}
        counts = np.bincount(np.minimum(self.ages, cap), minlength=cap + 1)
        for age, count in enumerate(counts):
            out[f"staleness/frac_{age}"] = float(count / self.ages.size)
        return out
