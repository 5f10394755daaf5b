"""A step's rollouts: which prompts, how many samples each, which groups are kept.

    collector = Collector(run, sample)     # sample(prompts, n, key) -> sampling.Rollouts
    kept, stats, finish, rng = collector.collect(step, rng)
    ...                                    # dispatch device work
    finish()                               # waits for the rewards, fills kept.rewards

One step:
  1. prompts: the next batch of the seeded grain iterator, or the task
     selector's choice (`data.selector.name=bots`: Thompson draws from Beta
     pass-rate posteriors over the train pool, rl/data/selectors.py);
  2. `run.samples_per_prompt` completions each (flat or tree), submitted to the
     reward workers;
  3. DARS (`data.selector.name=dars`): once stage 1 is scored, a prompt with
     accuracy < 0.5 gets extra rollouts (`Selector.extra_rollouts`), sampled
     as one more call with the prompt repeated (its pages shared) and joined to
     its group; groups are padded to n_max rows (padding rows are invalid);
  4. dynamic sampling (`train.dynamic_sampling`, DAPO): a group whose samples
     are all correct or all wrong is dropped and more prompts are drawn, up to
     `train.dynamic_max_rounds` rounds, until `prompts_per_step` groups are kept;
  5. the selector's state is updated from the step's successes and attempts.
APRIL (`rollout.april`, flat sampling) replaces 1-4: `_collect_april` asks for
ceil(prompts_per_step × rollout.over_provision) groups (carried ones count),
stops the sampler once prompts_per_step groups have finished, trains on the
oldest finished groups and carries partial samples and surplus groups over
(rl/train/april.py); the carry and the examples drawn but not yet sampled are
checkpointed.

State for checkpoints: `data_state()` (the iterator's position) and
`selector_state` (a BOTS posterior is two float64 arrays over the train pool: the
checkpoint stores them as arrays, `rl.checkpoint.persistent.split_host`, so a pool of
a million tasks costs 16 MB, not a JSON list). A BOTS selection is a function of
(seed, step, state), so a replayed step draws the same tasks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import numpy as np

from rl.data import selectors
from rl.data.sources import example_from_json, process_batches
from rl.train import april, fission, latr_plan, multiturn, speculation
from rl.train.groups import Groups, all_alike, finish_rewards
from rl.train.scoring import submit_rollouts


class Collector:
    """Samples, scores and keeps one step's prompt groups (see the module docstring)."""

    def __init__(self, run, sample: Callable, selector: selectors.Uniform):
        cfg = run.cfg
        self.run, self.sample, self.selector = run, sample, selector
        self.data = process_batches(run.train_source, cfg.train.prompts_per_step, seed=cfg.seed)
        self.selector_state = selector.init_state()
        self.group_size = run.samples_per_prompt
        self.april = bool(cfg.rollout.april)
        # asynchronous rollouts carry unfinished samples over to the next call too
        self.carries = self.april or cfg.rollout.mode == "async"
        # rollout.kv_on_update=keep: a carried row keeps its pages (and hidden state)
        self.keep_kv = cfg.rollout.mode == "async" and cfg.rollout.kv_on_update == "keep"
        self.carry = april.Carry(run.completion_len)
        self.waiting: list = []  # examples drawn from the iterator, not yet sampled
        m = cfg.rl.multiturn
        self.fission = fission.Buffer(m.fission_capacity) if m.fission else None
        self.first = run.samples_drawn  # before DARS's extras; mc_grpo draws G + 1

    # -- state ------------------------------------------------------------------------------
    def data_state(self) -> dict:
        return self.data.get_state()

    def set_data_state(self, state: dict) -> None:
        self.data.set_state(state)

    def host_state(self) -> dict:
        out = {"data": self.data_state(), "selector": self.selector_state}  # arrays as they are
        if self.fission is not None:
            out["fission"] = self.fission.state()
        if self.carries:
            out["april"] = april.state_to_json(self.carry)
            out["april_waiting"] = [dataclasses.asdict(ex) for ex in self.waiting]
        return out

    def set_host_state(self, host: dict) -> None:
        self.set_data_state(host["data"])
        self.selector_state = (selectors.state_from_json(host["selector"])
                               if "selector" in host else self.selector.init_state())
        if self.fission is not None:
            self.fission.set_state(host.get("fission", []))
        if self.carries:
            self.carry = (april.state_from_json(host["april"]) if "april" in host
                          else april.Carry(self.run.completion_len))
            self.waiting = [example_from_json(ex) for ex in host.get("april_waiting", [])]

    # -- one step ---------------------------------------------------------------------------
    def _examples(self, step: int, round_: int) -> tuple[list, np.ndarray | None]:
        """The round's examples and, when the selector chose them, their task indices."""
        if round_ == 0:
            idx = self.selector.select(self.selector_state,
                                       selectors.step_rng(self.run.cfg.seed, step),
                                       self.run.cfg.train.prompts_per_step)
            if idx is not None:
                return [self.run.train_source[int(i)] for i in idx], idx
        return next(self.data), None

    def collect(self, step: int, rng, version: int | None = None
                ) -> tuple[Groups, dict, Callable[[], None], jax.Array]:
        """Returns (groups, stats, finish, rng); `version` is the policy version sampling
        (the update count; default step - 1, the synchronous learner's). Without dynamic
        sampling or DARS the rewards are still being scored: `finish()` waits for them and
        fills `groups.rewards` / `groups.correct` and the reward stats, so the caller can
        dispatch device work first. With either, each round is scored before the next."""
        version = step - 1 if version is None else version
        if self.april:
            fresh = max(0, april.over_provision(self.run.cfg.train.prompts_per_step,
                                                self.run.cfg.rollout.over_provision)
                        - len(self.carry.groups))
            return self._collect_carry(rng, version, fresh)
        cfg = self.run.cfg
        want = cfg.train.prompts_per_step
        dynamic = cfg.train.dynamic_sampling
        dars = self.selector.name == "dars"
        rounds = cfg.train.dynamic_max_rounds if dynamic else 1
        kept, sampled = Groups(), []
        chosen, attempts, successes = None, [], []
        for round_ in range(rounds):
            examples, idx = self._examples(step, round_)
            chosen = idx if idx is not None else chosen
            prompts = [self.run.encode_prompt(ex.prompt) for ex in examples]
            refs = [ex.reference for ex in examples]
            rng, key = jax.random.split(rng)
            rollouts = self.sample(prompts, self.first, key)
            pending = submit_rollouts(self.run, rollouts, refs)
            sampled.append((rollouts, pending, True))
            scored = pending.result() if (dynamic or dars or idx is not None) else None
            parts = [[(rollouts, np.flatnonzero(rollouts.prompt_index == p), len(sampled) - 1)]
                     for p in range(len(examples))]
            if dars:
                rng = self._dars(prompts, refs, rollouts, scored, parts, sampled, rng)
            for p, group in enumerate(parts):
                if scored is not None:
                    correct = np.concatenate([sampled[k][1].result().correct[rows]
                                              for _, rows, k in group])
                    if round_ == 0:
                        attempts.append(len(correct))
                        successes.append(int(correct.sum()))
                    if dynamic and all_alike(correct):
                        continue  # dynamic sampling: nothing to learn from this group
                if kept.num_groups < want:
                    kept.add(prompts[p], group, version, refs[p])
            if kept.num_groups >= want:
                break
        if len(kept.completions) != kept.num_groups * self.group_size:
            kept.pad(self.group_size)
        if scored is not None and attempts:
            self.selector_state = self.selector.update(
                self.selector_state, chosen, np.asarray(successes), np.asarray(attempts))
        stats: dict[str, float] = dict(self.selector.metrics(self.selector_state))
        if self.run.tree is not None:
            stats.update(tree_stats([r for r, _, whole in sampled if whole]))
        if self.run.latr is not None:
            stats.update(latr_plan.stats([r for r, _, _ in sampled]))
        if self.run.speculative is not None:
            stats.update(speculation.stats([r for r, _, _ in sampled]))
        stats.update(multiturn.episode_stats([r for r, _, _ in sampled]))
        return kept, stats, lambda: finish_rewards(kept, sampled, stats), rng

    def collect_prompts(self, prompts: list, references: list, rng, version: int):
        """Groups of `run.samples_per_prompt` samples of given prompts (token ids), e.g.
        Fission-GRPO's corrective prompts; returns what `collect` does."""
        rng, key = jax.random.split(rng)
        rollouts = self.sample(prompts, self.first, key)
        sampled = [(rollouts, submit_rollouts(self.run, rollouts, references), True)]
        kept = Groups()
        for p, prompt in enumerate(prompts):
            kept.add(prompt, [(rollouts, np.flatnonzero(rollouts.prompt_index == p), 0)],
                     version, references[p])
        stats = multiturn.episode_stats([rollouts])
        return kept, stats, lambda: finish_rewards(kept, sampled, stats), rng

    def collect_async(self, rng, version: int, max_staleness: int):
        """One call of `rollout.mode=async` under policy `version` (what `collect`
        returns): it tops the groups in flight up to ceil(prompts_per_step ×
        rollout.over_provision) with new prompts, unless a carried sample began more than
        `max_staleness` versions before `version` (then it only continues the carried
        ones), stops once `prompts_per_step` groups have finished, and carries the rest
        (their next tokens come from the next call's, newer, policy)."""
        cfg = self.run.cfg
        oldest = min((g.born for g in self.carry.groups if not g.finished), default=version)
        fresh = 0
        if version - oldest <= max_staleness:
            fresh = max(0, april.over_provision(cfg.train.prompts_per_step,
                                                cfg.rollout.over_provision)
                        - len(self.carry.groups))
        groups, stats, finish, rng = self._collect_carry(rng, version, fresh)
        stats["rollout/admitted_groups"] = fresh if stats.get("april/decoded_tokens") else 0
        return groups, stats, finish, rng

    def _collect_carry(self, rng, version: int, fresh: int):
        """A call that samples `fresh` new prompt groups beside the carried samples, under
        policy `version`, stops once prompts_per_step groups have finished, trains on the
        oldest finished ones and carries the others (APRIL; asynchronous rollouts);
        returns what `collect` does."""
        cfg, run = self.run.cfg, self.run
        target, n = cfg.train.prompts_per_step, self.first
        carry, decoded = self.carry, 0
        if carry.num_finished < target:
            while len(self.waiting) < fresh:
                self.waiting.extend(next(self.data))
            examples, self.waiting = self.waiting[:fresh], self.waiting[fresh:]
            fresh_prompts = [run.encode_prompt(ex.prompt) for ex in examples]
            resumes, budgets = april.resume_requests(carry)
            prompts = resumes + [p for p in fresh_prompts for _ in range(n)]
            budgets = np.concatenate([budgets, np.full(len(fresh_prompts) * n,
                                                       run.completion_len)])
            stop = april.stop_rule(target, april.row_groups(carry, len(fresh_prompts), n),
                                   finished=carry.num_finished)
            rng, key = jax.random.split(rng)
            keep = {} if not self.keep_kv else {"keep_partial": True,
                                                "resume": april.kept_caches(carry)}
            out = self.sample(prompts, 1, key, stop_when=stop, max_new_tokens_per_row=budgets,
                              **keep)
            decoded = int(out.stats["decode_tokens"])
            ready, carry = april.join(carry, out if resumes else None, version)
            done, unfinished = april.split_finished(
                out, fresh_prompts, [ex.reference for ex in examples], n, version,
                start=len(resumes))
            ready, pending = ready + done, carry.groups + unfinished
        else:  # enough finished groups carried over: no sampling this call
            ready, carry = april.join(carry, None, version)
            pending = carry.groups
        groups, self.carry = april.select(ready, pending, target, run.completion_len)
        rollouts, _ = april.to_rollouts(groups, run.completion_len)
        pending_rewards = submit_rollouts(run, rollouts, [g.reference for g in groups])
        kept = Groups()
        for p, g in enumerate(groups):
            kept.add(g.prompt, [(rollouts, np.flatnonzero(rollouts.prompt_index == p), 0)])
        stats = april.staleness(groups, version) | {
            "april/decoded_tokens": decoded, "april/carry_groups": len(self.carry.groups),
            "april/carry_partial_rows": sum(row.finish == april.PARTIAL
                                            for g in self.carry.groups for row in g.rows)}
        sampled = [(rollouts, pending_rewards, True)]
        return kept, stats, lambda: finish_rewards(kept, sampled, stats), rng

    def _dars(self, prompts, refs, rollouts, scored, parts, sampled, rng):
        """DARS stage 2: extra rollouts for the prompts stage 1 found hard, joined to their
        groups in `parts` (one call: the prompt repeated once per extra rollout)."""
        accuracy = np.array([scored.correct[rollouts.prompt_index == p].mean()
                             for p in range(len(prompts))])
        extra = self.selector.extra_rollouts(self.selector_state, accuracy)
        if not extra.any():
            return rng
        which = np.repeat(np.arange(len(prompts)), extra)
        rng, key = jax.random.split(rng)
        more = self.sample([prompts[p] for p in which], 1, key)
        pending = submit_rollouts(self.run, more, [refs[p] for p in which])
        sampled.append((more, pending, False))
        for p in np.flatnonzero(extra):
            parts[p].append((more, np.flatnonzero(which == p), len(sampled) - 1))
        return rng


def tree_stats(trees: list) -> dict[str, float]:
    """The tree sampler's work over a step's rounds: leaves, how they finished, re-expanded
    fallback children, and the share of leaf tokens decoded once for several leaves
    (`tree/shared_token_frac` = 1 - decoded / Σ leaf lengths)."""
    total = lambda key: sum(int(t.stats.get(key, 0)) for t in trees)
    leaf_tokens = sum(int(t.lengths.sum()) for t in trees)
    out = {"tree/leaves": sum(len(t) for t in trees),
           "tree/shared_token_frac": 1.0 - total("decode_tokens") / max(leaf_tokens, 1)}
    for key in ("finish_stop", "finish_length", "finish_repetition", "fallback_children"):
        out[f"tree/{key}"] = total(key)
    return out
