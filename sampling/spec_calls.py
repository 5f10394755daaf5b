"""The host side of speculative decoding in `flat.generate`: per segment, a speculative
call (`sampling.spec_decode.decode`) or a plain one, and the rows' texts the n-gram
drafter reads; with a drafter model (`sampling.spec_model`) the prefill and plain calls
that keep its cache in step with the policy's."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from sampling import engine, spec_decode, spec_model
from sampling.params import SamplingParams
from sampling.spec_decode import SpecConfig, Texts


def wire(config, params, prompts, n, sp, spec, draft_model, model, prefill, decode,
         kept: bool):
    """(prefill, decode, the models' configs) of a speculative `flat.generate` call, whose
    own prefill and decode are `prefill` and `decode`; model = (config, params, rng,
    stop_ids, sharding). ValueError for what it cannot serve (`kept`: arms, resumed rows
    or kept caches)."""
    if kept:
        raise ValueError("speculative decoding runs without arms, resumed rows or kept caches")
    drafter = None
    if (spec.drafter == "model") != (draft_model is not None):
        raise ValueError(f"speculative drafter={spec.drafter!r} takes "
                         f"{'a' if spec.drafter == 'model' else 'no'} draft_model")
    if draft_model is not None:
        spec_model.check(config, draft_model[0])
        drafter = tuple(draft_model)
        prefill = spec_model.prefill(((config, params), drafter), model[4])
        decode = spec_model.plain_decode(model, drafter, sp)
    calls = Calls(engine.check_prompts(config, prompts), n, sp, spec, model, decode, drafter)
    return prefill, calls, (config,) + (() if drafter is None else (drafter[0],))


class Calls:
    """`flat.generate`'s decode with speculation: each decode call runs speculatively when
    `spec.runs` its running rows (and the last speculative call paid), else by `plain`
    (`decode(cache, state, seg, limit, steps)`); the rows' texts (the drafter's input) and
    the counts (`stats`) follow the calls.

    prompts: the call's prompts (token lists); n samples each. A device row holds sample
    `RowState.ids[row]` (its index, rows in item order without batch shards) unless it
    is padding (done from the first call on). model: (config, params, rng, stop_ids,
    sharding) as `engine.decode` takes them. drafter: (draft_config, draft_params) of
    `drafter="model"` (None for "ngram"); the calls' caches and hidden states are then
    (policy's, drafter's) and `plain` feeds both (`spec_model.plain_decode`).
    """

    def __init__(self, prompts: list[list[int]], n: int, sampling: SamplingParams,
                 spec: SpecConfig, model: tuple, plain, drafter: tuple | None = None):
        self.prompts, self.n, self.sampling, self.spec = prompts, n, sampling, spec
        self.max_new = sampling.max_new_tokens
        self.model, self.plain, self.drafter = model, plain, drafter
        self.texts: dict | None = None
        self.paid = True  # the last speculative call kept min_tokens_per_forward
        self.stats = {"spec/calls": 0, "spec/tokens": 0, "spec/row_forwards": 0,
                      "spec/proposed": 0, "spec/accepted": 0}

    def _start(self, state) -> None:
        rows = state.pages.row_group.shape[0]
        items = np.arange(rows) if state.ids is None else np.asarray(state.ids)
        real = ~np.asarray(state.done)
        row_of = np.full(len(self.prompts) * self.n, -1, np.int64)
        row_of[items[real]] = np.flatnonzero(real)
        width = max(map(len, self.prompts)) + self.max_new + self.spec.draft_len + 1
        tokens = np.zeros((rows, width), np.int32)
        lengths = np.zeros(rows, np.int32)
        search = min(self.n, self.spec.ngram_rows)
        members = np.full((rows, search), -1, np.int32)
        members[:, 0] = np.arange(rows)
        for row in np.flatnonzero(real):
            i = items[row]
            prompt = self.prompts[i // self.n]
            tokens[row, :len(prompt)], lengths[row] = prompt, len(prompt)
            group = i // self.n * self.n + np.arange(self.n)
            near = group[np.argsort(np.abs(group - i), kind="stable")]  # itself first
            members[row] = row_of[near[:search]]
        self.texts = {"tokens": tokens, "lengths": lengths, "members": members}

    def _append(self, out) -> None:
        t = self.texts
        for row in np.flatnonzero(out.num_tokens):
            count = int(out.num_tokens[row])
            at = int(t["lengths"][row])
            t["tokens"][row, at:at + count] = out.tokens[row, :count]
            t["lengths"][row] += count

    def __call__(self, cache, state, seg, limit, steps: int, arms=None):
        """One decode call -> (out, hidden, cache), as `engine.decode`."""
        del arms  # `generate` refuses arms with speculation
        config, params, rng, stop_ids, sharding = self.model
        if self.texts is None:
            self._start(state)
        if self.paid and self.spec.runs(int((~np.asarray(state.done)).sum())):
            texts = Texts(**{k: jnp.asarray(v) for k, v in self.texts.items()})
            policy_cache, drafter = cache, ()
            if self.drafter is not None:
                policy_cache, draft_cache = cache
                drafter = (*self.drafter, draft_cache)
            out, hidden, cache, counts = spec_decode.decode(
                config, params, policy_cache, state, rng, np.int32(seg), limit, self.sampling,
                steps, stop_ids, self.spec, texts, sharding, *drafter)
            host = engine.as_numpy(out)
            counts, tokens = np.asarray(counts), int(host.num_tokens.sum())
            self.stats["spec/calls"] += 1
            self.stats["spec/tokens"] += tokens
            for name, value in zip(("row_forwards", "proposed", "accepted"), counts, strict=True):
                self.stats[f"spec/{name}"] += int(value)
            self.paid = tokens >= self.spec.min_tokens_per_forward * max(int(counts[0]), 1)
        else:
            out, hidden, cache = self.plain(cache, state, seg, limit, steps)
            host = engine.as_numpy(out)
        self._append(host)
        return out, hidden, cache
