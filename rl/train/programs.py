"""The compiled programs of one RL step, lowered from abstract inputs: nothing is allocated.

    lowered = rl.train.programs.lower_step(run)      # {name: jax.stages.Lowered}
    compiled = lowered["update"].compile()           # for the devices of `run.mesh`
    compiled.memory_analysis(); compiled.cost_analysis()

Each program is the function training calls, jitted as training jits it, given
`jax.ShapeDtypeStruct`s with the shapes and shardings a step gives it on `run.mesh`
(whose devices may be a TPU topology's: `launch.compile`). The shapes follow the
trainer's (rl/train/memory_plan.py names them the same way): P = train.prompts_per_step
prompts of `prompt_len` tokens (flat APRIL: P × rollout.over_provision groups in the
sampler), n samples each, completions of C = `Run.completion_len` tokens.

  update   `Learner.train_step(state, batch)`: epochs × minibatches optimizer steps,
           the state donated; batch [P, Tp] prompts and [P·G, C] completions.
  score    `Learner.score(params, sequences)`: log-probs of the step's completions
           (the reference's, and π_old with train.old_logp=recompute).
  prefill  `sampling.engine.prefill` of the distinct prompts into a fresh page pool.
  decode   `sampling.engine.decode` of the last (widest) segment of the flat sampler:
           its page tables hold every earlier segment's pages.

The sampler's rows and pages are laid out as `sampling.flat.run_groups` lays them out on
the mesh: each prompt group on one data × fsdp shard (`sampling.shards.assign`/`place`),
one page pool per shard (`layout_prompts` with a pool per shard, `page_rows(..., shards)`),
row ids for the draws (`RowState.ids`).

Host-side layouts (page tables, row groups) come from the samplers' own code on dummy
prompts of the planned length, so the shapes are the ones a step compiles.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import NamedSharding, PartitionSpec

from rl.train import adapters, build, memory_plan
from rl.train import learner as learner_lib
from rl.train.batch import PROMPT_MULTIPLE, round_up
from sampling import engine, flat
from sampling import shards as shards_lib
from sampling.page_pool import NULL_PAGE

PROGRAMS = ("update", "score", "prefill", "decode")


def make_learner(run) -> learner_lib.Learner:
    """The trainer's learner for `run` (`build.learner_for`, as the trainer builds it);
    with LoRA over the abstract frozen base."""
    base = (adapters.abstract_placed(run.lora, run.model_config, run.mesh, run.rules)[0]
            if run.lora is not None else None)
    return build.learner_for(run, base)


def _abstract(x, sharding=None) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=sharding)


def _replicated(run) -> NamedSharding:
    return NamedSharding(run.mesh, PartitionSpec())


def abstract_state(run, learner: learner_lib.Learner) -> learner_lib.TrainState:
    """The TrainState's shapes and shardings as `Learner.init_state` places them: the
    optimizer state with the params' shardings, counts, step and key replicated."""
    params = (build.abstract_params(run) if run.lora is None else adapters.abstract_placed(
        run.lora, run.model_config, run.mesh, run.rules)[1])
    rep = _replicated(run)
    opt = optax.tree_map_params(
        learner.optimizer, lambda s, p: _abstract(s, p.sharding),
        jax.eval_shape(learner.optimizer.init, params), params,
        transform_non_params=lambda s: _abstract(s, rep))
    key = jax.eval_shape(functools.partial(jax.random.key, 0))
    return learner_lib.TrainState(params, opt, jax.ShapeDtypeStruct((), jnp.int32, sharding=rep),
                                  _abstract(key, rep))


def shard_bytes(tree) -> int:
    """Dense bytes per device of a pytree of sharded `ShapeDtypeStruct`s (the largest
    shard of each leaf; a PRNG key as its two uint32 words; 4-bit codes two to a byte)."""
    total = 0
    for x in jax.tree.leaves(tree):
        key = jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)
        bits = 64 if key else jax.dtypes.itemsize_bits(x.dtype)
        total += -(-math.prod(x.sharding.shard_shape(x.shape)) * bits // 8)
    return total


def resident(run) -> dict[str, int]:
    """{program: bytes per device that stay on the devices while it runs but are not its
    arguments}: the frozen reference's params when the algorithm keeps one on the devices
    (not `rl.reference.offload`), and for score, prefill and decode (given the params
    alone) the rest of the TrainState too: AdamW's moments, the counts, step and key.
    (While the reference is scored, the policy's params are the copy left resident
    instead: the same bytes.) With LoRA the base is the reference and an argument of
    every program; a merged sampler copy leaves the base and the adapters resident
    beside prefill and decode."""
    learner = make_learner(run)
    state = abstract_state(run, learner)
    params = shard_bytes(state.params)
    if run.lora is not None:
        rest = shard_bytes(state) - params
        merged = run.lora.sampler == "merge"
        beside = shard_bytes(learner.base) + params if merged else 0
        return {"update": 0, "score": rest, "prefill": rest + beside, "decode": rest + beside}
    reference = params if (run.algorithm.needs_reference
                           and not run.cfg.rl.reference.offload) else 0
    rest = shard_bytes(state) - params + reference
    return {name: reference if name == "update" else rest for name in PROGRAMS}


def abstract_batch(run, learner: learner_lib.Learner, prompt_len: int,
                   keys=learner_lib.BATCH_KEYS) -> dict[str, jax.ShapeDtypeStruct]:
    """The update's batch (`keys` of it) as `Learner.place` puts it on the mesh."""
    p, g, c = int(run.cfg.train.prompts_per_step), run.samples_per_prompt, run.completion_len
    tp = round_up(max(prompt_len, 1), PROMPT_MULTIPLE)
    rows = {"prompts": ((p, tp), jnp.int32), "prompt_lens": ((p,), jnp.int32),
            "completion": ((p * g, c), jnp.int32), "mask": ((p * g, c), jnp.bool_)}
    shapes = {k: rows.get(k, ((p * g, c), jnp.float32)) for k in keys}
    batch = {k: jax.ShapeDtypeStruct(s, d) for k, (s, d) in shapes.items()}
    placed = learner_lib.batch_sharding(learner.sharding, batch)
    return {k: _abstract(v, placed[k]) for k, v in batch.items()}


def _sampler_layout(run, prompt_len: int):
    """(prompt layout, pool pages, each device row's prompt row, real rows, row ids, the
    last segment's PageRows, its first token's position after the prompt, segment
    length): what `sampling.flat.run_groups` lays out for dummy prompts of the planned
    length, one page pool per batch shard (`sampling.shards`)."""
    cfg, sp, config = run.cfg, run.sampling_params, run.model_config
    ps, n = int(cfg.sampling.page_size), run.samples_drawn
    groups = int(cfg.train.prompts_per_step)
    if cfg.rollout.april:
        groups = math.ceil(round(groups * float(cfg.rollout.over_provision), 9))
    seg = min(int(cfg.sampling.segment_len), ps * -(-sp.max_new_tokens // ps))
    seg_pages, segments = seg // ps, -(-sp.max_new_tokens // seg)
    count = shards_lib.of(run.act).count
    prompts = [[1 + (i % (config.vocab_size - 1))] * prompt_len for i in range(groups)]
    prompt_shard = shards_lib.assign([n] * groups, count)
    rows = shards_lib.place(np.repeat(prompt_shard, n), count)
    pools, layout, source = flat.shard_layout(prompts, prompt_shard,
                                              np.repeat(np.arange(groups), n), rows, ps,
                                              segments * seg_pages, config.pad_token_id or 0)
    real = rows.real()
    own = np.full((rows.rows, (segments - 1) * seg_pages), NULL_PAGE, np.int32)
    fresh = np.full((rows.rows, seg_pages), NULL_PAGE, np.int32)
    for row in np.flatnonzero(real):
        own[row] = pools[row // rows.per].alloc(own.shape[1])
        fresh[row] = pools[row // rows.per].alloc(seg_pages)
    pages = engine.page_rows(layout.tables, layout.offsets, source, own, fresh, ~real, count)
    return (layout, sum(p.num_pages for p in pools), source, real, rows.ids(), pages,
            (segments - 1) * seg, seg)


def lower_step(run, prompt_len: int | None = None,
               names=PROGRAMS) -> dict[str, jax.stages.Lowered]:
    """{program: Lowered} of one RL step on `run.mesh` (module docstring), for the
    programs in `names`. `prompt_len`: the prompts' length (default: the longest of the
    first train prompts, as the memory plan scans them). Only the flat sampler's programs
    are built."""
    if run.tree is not None:
        raise ValueError("the compiled programs cover the flat sampler only "
                         "(sampling.sampler=flat); the tree sampler's are not built")
    lp = prompt_len if prompt_len is not None else memory_plan.longest_prompt(run)
    learner = make_learner(run)
    state = abstract_state(run, learner)
    out = {}
    if "update" in names:
        out["update"] = learner.lower_update(state, abstract_batch(run, learner, lp))
    if "score" in names:
        out["score"] = learner.score.lower(learner.policy(state.params), abstract_batch(
            run, learner, lp, ("prompts", "prompt_lens", "completion")))
    if "prefill" in names or "decode" in names:
        sampler = state.params if run.lora is None else adapters.sampler_abstract(
            run.lora, run.model_config, learner.base, state.params, run.mesh, run.rules)
        out |= _lower_sampler(run, sampler, lp)
    return {name: out[name] for name in PROGRAMS if name in names}


def _lower_sampler(run, params, lp: int) -> dict[str, jax.stages.Lowered]:
    """The flat sampler's prefill and its last decode segment (`lower_step`)."""
    config, sp = run.model_config, run.sampling_params
    layout, num_pages, source, real, ids, pages, position, seg = _sampler_layout(run, lp)
    host = lambda tree: jax.tree.map(_abstract, tree)  # noqa: E731 - uncommitted host arrays
    prefill = engine.prefill.lower(config, num_pages, params, *host(
        (layout.tokens, layout.tables, layout.offsets, layout.active, source)),
        sharding=run.act)
    hidden, cache = prefill.out_info
    # the pool as `sampling.shards.constrain_pool` leaves it: pages over the batch shards
    pool = shards_lib.pool_axes(shards_lib.of(run.act))
    cache = jax.tree.map(lambda a: _abstract(a, NamedSharding(
        run.mesh, run.act.spec(pool, a.shape))), cache)
    positions = (layout.slots - layout.offsets[source] + position).astype(np.int32)
    state = engine.RowState(hidden=hidden, pages=host(pages), positions=host(positions),
                            done=host(~real), ids=None if ids is None else host(ids))
    key = jax.eval_shape(functools.partial(jax.random.key, 0))
    decode = engine.decode_program(run.mesh.devices.flat[0].platform).lower(
        config, params, cache, state, _abstract(key, _replicated(run)), host(np.int32(0)),
        host(np.int32(seg)), sp, seg, engine.stop_token_ids(config, sp), "shared_prefix",
        run.act)
    return {"prefill": prefill, "decode": decode}
