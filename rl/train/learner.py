"""The learner: `TrainState` and the jitted, sharded, donated policy update.

    learner = Learner(model_config, algorithm, optimizer, mesh_sharding)
    state = learner.init_state(params, jax.random.key(0))
    ref_logp, _ = learner.score(ref_params, batch)          # frozen reference
    state, metrics = learner.train_step(state, batch)        # donates `state`

A batch is a dict of arrays: one row per prompt group for the prompts, one
row per completion for the rest, N = P·G rows group-major (row r continues
prompt r // G; see `BATCH_KEYS`):

    prompts       [P, Tp] int32 the distinct prompts, right-padded
    prompt_lens   [P]    int32  prompt lengths (>= 1)
    completion    [N, C] int32  the generated tokens (targets), padded
    mask          [N, C] bool   real completion tokens (all False = padding row)
    advantages    [N, C] f32    per-token advantages (a per-sequence one broadcast)
    old_logp      [N, C] f32    log π_old: the sampler's or recomputed (`score`);
                                ignored with `proximal="interpolate"`
    ref_logp      [N, C] f32    log π_ref (only read when the KL is in the loss)
    behavior_logp [N, C] f32    optional: the sampler's log-probs, for the off-policy
                                correction (`rl.off_policy`) and its metrics
    versions      [N, C] int32  optional: the policy version (update count) that
                                sampled each token, -1 = padding

Log-probs are taken at `temperature` (the sampling temperature, as the
sampler's log-probs are), only at completion positions. Each prompt is run
once for its G completions (`models.shared_prefix_hidden_states`: the prompt
tokens are computed per group, not per row); the final hidden states are
gathered at the C positions that predict completion tokens, and
logits are formed at most `logits_chunk` positions at a time under
`jax.checkpoint`, so neither the forward nor the backward pass holds more than
[N, logits_chunk, V] logits. Any C works: C is split into ceil(C / logits_chunk)
equal blocks, the last one zero-padded when needed (`chunk_layout`).

`train_step` runs `epochs` passes over the batch, each split into
`minibatches` optimizer steps of whole prompt groups (PPO epochs; a fresh
group permutation per epoch when there is more than one minibatch), inside
one compiled program.
Metrics are means over those optimizer steps.

`proximal="interpolate"` (`train.old_logp=interpolate`) takes π_old from
`behavior_logp`, `versions` and `TrainState.step` (the proximal version), not
`old_logp` (`rl.algorithms.off_policy.interpolate_proximal`; no forward pass).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax

import models
from models import multihost
from models import lora as lora_lib
from models.config import ModelConfig
from models.sharding import ActivationSharding
from rl.algorithms import kl as kl_lib
from rl.algorithms import losses
from rl.algorithms.algorithm import Algorithm

BATCH_KEYS = ("prompts", "prompt_lens", "completion", "mask", "advantages", "old_logp",
              "ref_logp")
OPTIONAL_KEYS = ("behavior_logp", "versions")
GROUP_KEYS = ("prompts", "prompt_lens")  # one row per prompt group; the rest one per completion


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class TrainState:
    """Everything the update changes: a pytree, donated to `train_step`."""

    params: Any
    opt_state: Any
    step: jax.Array  # int32 []: train_step calls so far
    rng: jax.Array   # PRNG key for minibatch order and stochastic losses


def token_logprobs(config: ModelConfig, params: dict, prompts: jax.Array,
                   prompt_lens: jax.Array, completion: jax.Array, *,
                   temperature: float = 1.0, logits_chunk: int = 256,
                   sharding: ActivationSharding | None = None) -> tuple[jax.Array, jax.Array]:
    """Per-token log-probs and entropies of the completion tokens.

    prompts [P, Tp] (right-padded), prompt_lens [P], completion [N, C] with
    N = P·G, group-major (row r continues prompt r // G) -> (logp [N, C],
    entropy [N, C]), fp32, under softmax(logits / temperature). Completion
    token j of row r is predicted by the hidden state of the token before it:
    the prompt's last token for j = 0, completion token j - 1 otherwise.
    """
    hidden = completion_hidden(config, params, prompts, prompt_lens, completion, sharding)
    return _chunked_stats(config, params, hidden, completion, temperature, logits_chunk)


def completion_hidden(config: ModelConfig, params: dict, prompts: jax.Array,
                      prompt_lens: jax.Array, completion: jax.Array,
                      sharding: ActivationSharding | None = None) -> jax.Array:
    """[N, C, D]: the hidden state that predicts each completion token (the prompt's
    last token for j = 0, completion token j - 1 otherwise); shapes as `token_logprobs`."""
    chex.assert_rank([prompts, prompt_lens, completion], [2, 1, 2])
    p = prompts.shape[0]
    n, c = completion.shape
    if n % p:
        raise ValueError(f"{n} completion rows are not a whole number of groups of the "
                         f"{p} prompts")
    g = n // p
    s = max(c - 1, 1)  # the last completion token is a target only, never an input
    hp, hc = models.shared_prefix_hidden_states(
        config, params, prompts, prompt_lens, completion[:, :s].reshape(p, g, s),
        sharding=sharding)
    d = hp.shape[-1]
    last = jnp.take_along_axis(hp, (prompt_lens - 1)[:, None, None], axis=1)  # [P, 1, D]
    hidden = jnp.concatenate(
        [jnp.broadcast_to(last[:, None], (p, g, 1, d)), hc[:, :, :c - 1]], axis=2)
    return hidden.reshape(n, c, d)


def token_js(config: ModelConfig, params_a: dict, params_b: dict, prompts: jax.Array,
             prompt_lens: jax.Array, completion: jax.Array, *, temperature: float = 1.0,
             logits_chunk: int = 256,
             sharding: ActivationSharding | None = None) -> jax.Array:
    """[N, C] Jensen-Shannon divergence between the two models' next-token distributions
    (full vocabulary, softmax(logits / temperature)) at each completion position, fp32.
    Logits exist for one block of `chunk_layout` positions at a time."""
    ha = completion_hidden(config, params_a, prompts, prompt_lens, completion, sharding)
    hb = completion_hidden(config, params_b, prompts, prompt_lens, completion, sharding)
    n, c, d = ha.shape

    def block(xa, xb):
        return kl_lib.js_divergence(models.logits_from_hidden(config, params_a, xa) / temperature,
                                    models.logits_from_hidden(config, params_b, xb) / temperature)

    k, size = chunk_layout(c, logits_chunk)
    if k == 1:
        return block(ha, hb)
    pad = ((0, 0), (0, k * size - c), (0, 0))
    blocks = [jnp.pad(h, pad).reshape(n, k, size, d).swapaxes(0, 1) for h in (ha, hb)]
    js = jax.lax.map(lambda xs: block(*xs), tuple(blocks))                # [k, N, size]
    return js.swapaxes(0, 1).reshape(n, k * size)[:, :c]


def chunk_layout(c: int, logits_chunk: int) -> tuple[int, int]:
    """(k, size): C positions as k blocks of `size` <= logits_chunk, k·size >= C.

    k = ceil(C / logits_chunk) blocks of size = ceil(C / k), the smallest
    blocks that fit: fewer than k padded positions, any C (e.g. C = 300 with
    logits_chunk = 256 is 2 blocks of 150, no padding).
    """
    if logits_chunk < 1:
        raise ValueError(f"logits_chunk must be >= 1, got {logits_chunk}")
    k = max(-(-c // logits_chunk), 1)
    return k, -(-c // k)


def _chunked_stats(config: ModelConfig, params: dict, hidden: jax.Array, targets: jax.Array,
                   temperature: float, logits_chunk: int) -> tuple[jax.Array, jax.Array]:
    """hidden [N, C, D], targets [N, C] -> (logp [N, C], entropy [N, C]), fp32.

    Logits are formed one block of `chunk_layout` positions at a time under
    `jax.checkpoint`. When the blocks overrun C, hidden is zero-padded and
    targets 0-padded to k·size; a zero hidden state gives all-zero (finite)
    logits, and the padded outputs are sliced off, so they get a zero
    cotangent and change neither values nor gradients (no NaN path).
    """
    n, c, d = hidden.shape

    @jax.checkpoint
    def chunk_stats(h, t):
        logits = models.logits_from_hidden(config, params, h) / temperature  # [N, size, V]
        lse = jax.nn.logsumexp(logits, axis=-1)
        picked = jnp.take_along_axis(logits, t[..., None], axis=-1)[..., 0]
        probs = jnp.exp(logits - lse[..., None])
        entropy = lse - jnp.sum(probs * logits, axis=-1)
        return picked - lse, entropy

    k, size = chunk_layout(c, logits_chunk)
    if k == 1:
        return chunk_stats(hidden, targets)
    pad = k * size - c
    hidden = jnp.pad(hidden, ((0, 0), (0, pad), (0, 0)))                # [N, k·size, D]
    targets = jnp.pad(targets, ((0, 0), (0, pad)))                       # [N, k·size]
    hs = hidden.reshape(n, k, size, d).swapaxes(0, 1)                    # [k, N, size, D]
    ts = targets.reshape(n, k, size).swapaxes(0, 1)                      # [k, N, size]
    logp, entropy = jax.lax.map(lambda a: chunk_stats(*a), (hs, ts))     # [k, N, size] each
    unblock = lambda x: x.swapaxes(0, 1).reshape(n, k * size)[:, :c]
    return unblock(logp), unblock(entropy)


def make_optimizer(lr: float, *, total_steps: int, schedule: str = "constant",
                   warmup_steps: int = 0, b1: float = 0.9, b2: float = 0.999,
                   eps: float = 1e-8, weight_decay: float = 0.0, grad_clip: float = 0.0,
                   end_lr_fraction: float = 0.0) -> optax.GradientTransformation:
    """AdamW with a warmup + `constant | linear | cosine` schedule and global-norm clipping.

    `total_steps` counts optimizer steps (RL steps × epochs × minibatches).
    Weight decay applies to matrices only (not norms or biases); grad_clip 0 = off.
    """
    if lr <= 0 or total_steps < 1 or warmup_steps < 0:
        raise ValueError(f"need lr > 0, total_steps >= 1, warmup_steps >= 0; got {lr}, "
                         f"{total_steps}, {warmup_steps}")
    decay_steps = max(total_steps - warmup_steps, 1)
    end = lr * end_lr_fraction
    if schedule == "constant":
        main = optax.constant_schedule(lr)
    elif schedule == "linear":
        main = optax.linear_schedule(lr, end, decay_steps)
    elif schedule == "cosine":
        main = optax.cosine_decay_schedule(lr, decay_steps, alpha=end_lr_fraction)
    else:
        raise ValueError(f"unknown lr schedule {schedule!r} (constant, linear, cosine)")
    if warmup_steps:
        main = optax.join_schedules(
            [optax.linear_schedule(0.0, lr, warmup_steps), main], [warmup_steps])
    adamw = optax.adamw(main, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay,
                        mask=lambda p: jax.tree.map(lambda x: x.ndim >= 2, p))
    return optax.chain(optax.clip_by_global_norm(grad_clip), adamw) if grad_clip else adamw


def on_mesh(tree: Any, act: ActivationSharding | None) -> Any:
    """Replicates over `act.mesh` every leaf not already laid out on it (step
    counters, PRNG keys, optimizer counts): the layout a jitted update returns
    them in, so its second call reuses the first call's executable instead of
    compiling again. Identity without a mesh."""
    if act is None:
        return tree
    replicated = jax.sharding.NamedSharding(act.mesh, jax.sharding.PartitionSpec())
    return jax.tree.map(lambda x: x if isinstance(x.sharding, jax.sharding.NamedSharding)
                        else multihost.put(x, replicated), tree)


def batch_sharding(act: ActivationSharding, batch: Mapping[str, Any]) -> dict[str, Any]:
    """NamedSharding per batch array: rows over the mesh's batch axes."""
    return {k: jax.sharding.NamedSharding(
        act.mesh, act.spec(("batch",) + (None,) * (v.ndim - 1), v.shape))
        for k, v in batch.items()}


def check_batch(batch: Mapping[str, Any]) -> None:
    """ValueError naming a missing/unknown key or a shape that does not fit."""
    missing = [k for k in BATCH_KEYS if k not in batch]
    unknown = [k for k in batch if k not in BATCH_KEYS + OPTIONAL_KEYS]
    if missing or unknown:
        raise ValueError(f"batch keys: missing {missing}, unknown {unknown}")
    n, c = batch["completion"].shape
    for key in ("mask", "advantages", "old_logp", "ref_logp") + OPTIONAL_KEYS:
        if key in batch and tuple(batch[key].shape) != (n, c):
            raise ValueError(f"batch[{key!r}] has shape {tuple(batch[key].shape)}, "
                             f"expected {(n, c)}")
    prompts = batch["prompts"]
    if len(prompts.shape) != 2 or tuple(batch["prompt_lens"].shape) != (prompts.shape[0],):
        raise ValueError(f"prompts {tuple(prompts.shape)} and prompt_lens "
                         f"{tuple(batch['prompt_lens'].shape)} must be [P, Tp] and [P]")
    if n % prompts.shape[0]:
        raise ValueError(f"{n} completion rows are not a whole number of groups of the "
                         f"{prompts.shape[0]} prompts")


class Learner:
    """Compiled policy update for one model architecture and algorithm."""

    def __init__(self, config: ModelConfig, algorithm: Algorithm,
                 optimizer: optax.GradientTransformation,
                 sharding: ActivationSharding | None = None, *, epochs: int = 1,
                 minibatches: int = 1, temperature: float = 1.0, logits_chunk: int = 256,
                 proximal: str = "given", base: Any = None,
                 lora: lora_lib.LoraConfig | None = None):
        if epochs < 1 or minibatches < 1:
            raise ValueError(f"epochs and minibatches must be >= 1, got {epochs}, {minibatches}")
        if proximal not in losses.PROXIMAL:  # where π_old comes from
            raise ValueError(f"proximal must be 'given' or 'interpolate', got {proximal!r}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0 for log-probs, got {temperature}")
        self.config, self.algorithm, self.optimizer = config, algorithm, optimizer
        self.sharding, self.epochs, self.minibatches = sharding, epochs, minibatches
        self.temperature, self.logits_chunk = temperature, logits_chunk
        self.proximal = proximal
        self.kl_in_loss = algorithm.kl_coef > 0 and not algorithm.kl_in_reward
        if (base is None) != (lora is None):
            raise ValueError("a LoRA learner needs both the frozen base and the LoraConfig")
        # LoRA: TrainState.params are the adapters; the frozen base is an argument of
        # the update (never a constant of its program) and the policy is both
        self.base, self.lora = base, lora
        self.update = jax.jit(self._train_step, donate_argnums=0)
        self.score = jax.jit(self._logprobs)
        self.js = jax.jit(self._js)

    def train_step(self, state: TrainState, batch) -> tuple[TrainState, dict[str, jax.Array]]:
        """`epochs` × `minibatches` optimizer steps on `batch` (module doc); donates
        `state`."""
        return self.update(state, batch, self.base)

    def lower_update(self, state: Any, batch: Any) -> jax.stages.Lowered:
        """`train_step`'s program lowered for (abstract) `state` and `batch`."""
        return self.update.lower(state, batch, self.base)

    def policy(self, params: Any, base: Any = None) -> Any:
        """The params the model runs for TrainState `params`: themselves, or with LoRA
        the base (`base`, default the learner's) with these adapters attached."""
        if self.lora is None:
            return params
        return lora_lib.attach(self.base if base is None else base, params, self.lora)

    def init_state(self, params: Any, rng: jax.Array) -> TrainState:
        """A TrainState; the optimizer state inherits the params' shardings and the
        other leaves are replicated on the mesh (`on_mesh`: no recompile at step 2)."""
        init = jax.jit(self.optimizer.init)
        named = [isinstance(x.sharding, jax.sharding.NamedSharding)
                 for x in jax.tree.leaves(params)]
        if self.sharding is not None and all(named):
            # written straight into the params' shards: optax builds mu/nu from zeros,
            # which carry no sharding of their own (they would come out whole per device)
            replicated = jax.sharding.NamedSharding(self.sharding.mesh,
                                                    jax.sharding.PartitionSpec())
            shardings = optax.tree_map_params(
                self.optimizer, lambda _, p: p.sharding,
                jax.eval_shape(self.optimizer.init, params), params,
                transform_non_params=lambda _: replicated)
            init = jax.jit(self.optimizer.init, out_shardings=shardings)
        opt_state = init(params)
        return on_mesh(TrainState(params, opt_state, jnp.zeros((), jnp.int32), rng),
                       self.sharding)

    def place(self, batch: Mapping[str, Any]) -> dict[str, jax.Array]:
        """Checks a host batch and puts it on the mesh, rows split over the batch axes."""
        check_batch(batch)
        return self.place_arrays(batch)

    def place_arrays(self, arrays: Mapping[str, Any]) -> dict[str, jax.Array]:
        """Puts any dict of [rows, ...] arrays on the mesh like `place`, unchecked (for
        `score`, which reads only prompts, prompt_lens and completion)."""
        if self.sharding is None:
            return {k: jnp.asarray(v) for k, v in arrays.items()}
        arrays = {k: v if isinstance(v, jax.Array) else np.asarray(v) for k, v in arrays.items()}
        return multihost.put(arrays, batch_sharding(self.sharding, arrays))

    def _logprobs(self, params, batch) -> tuple[jax.Array, jax.Array]:
        """(logp [N, C], entropy [N, C]) of the batch's completions under `params`;
        `score` is this, jitted."""
        return token_logprobs(self.config, params, batch["prompts"], batch["prompt_lens"],
                              batch["completion"], temperature=self.temperature,
                              logits_chunk=self.logits_chunk, sharding=self.sharding)

    def _js(self, params_a, params_b, batch) -> jax.Array:
        """[N, C] JS(π_a‖π_b) per completion position (`token_js`); `js` is this, jitted."""
        return token_js(self.config, params_a, params_b, batch["prompts"], batch["prompt_lens"],
                        batch["completion"], temperature=self.temperature,
                        logits_chunk=self.logits_chunk, sharding=self.sharding)

    def loss(self, params, batch, rng, version,
             base=None) -> tuple[jax.Array, dict[str, jax.Array]]:
        """The algorithm's scalar loss on one minibatch and its metrics; `version` [] int32
        is the learner's update count before this update (the proximal version); `base`
        the frozen base of LoRA `params`."""
        alg = self.algorithm
        logp, entropy = self._logprobs(self.policy(params, base), batch)
        options = dict(alg.loss_options)
        entropy_coef = options.pop("entropy_coef", 0.0)
        if not entropy_coef:
            entropy = jax.lax.stop_gradient(entropy)
        is_fipo = alg.reweight == "fipo"
        return losses.compute(
            alg.loss, logp, batch["old_logp"], batch["advantages"], batch["mask"], rng,
            behavior_logp=batch.get("behavior_logp"), off_policy=alg.off_policy,
            proximal=self.proximal, versions=batch.get("versions"), version=version,
            reweight="fipo" if is_fipo else None,
            reweight_options=alg.reweight_options if is_fipo else None,
            ref_logp=batch["ref_logp"] if self.kl_in_loss else None,
            kl_coef=alg.kl_coef if self.kl_in_loss else 0.0, kl_kind=alg.kl_kind,
            kl_clamp=alg.kl_clamp, entropy=entropy, entropy_coef=entropy_coef, **options)

    def _minibatch_step(self, carry, inputs, version, base):
        params, opt_state = carry
        mb, rng = inputs
        if self.sharding is not None:
            mb = {k: self.sharding.constrain(v, ("batch",) + (None,) * (v.ndim - 1))
                  for k, v in mb.items()}
        (_, metrics), grads = jax.value_and_grad(self.loss, has_aux=True)(params, mb, rng,
                                                                          version, base)
        metrics["grad_norm"] = optax.tree.norm(grads)
        updates, opt_state = self.optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        return (params, opt_state), metrics

    def _train_step(self, state: TrainState, batch,
                    base=None) -> tuple[TrainState, dict[str, jax.Array]]:
        p = batch["prompts"].shape[0]
        g = batch["completion"].shape[0] // p
        m = self.minibatches
        if p % m:
            raise ValueError(f"{p} prompt groups do not split into {m} minibatches")
        missing = [k for k in ("behavior_logp", "versions") if k not in batch]
        if self.proximal == "interpolate" and missing:
            raise ValueError(f"proximal='interpolate' (train.old_logp=interpolate) needs "
                             f"batch keys {missing}: π_old is interpolated from them")
        rng, key = jax.random.split(state.rng)
        perm_keys, loss_keys = jax.random.split(key)
        perm_keys = jax.random.split(perm_keys, self.epochs)
        loss_keys = jax.random.split(loss_keys, (self.epochs, m))

        def split(name, x):  # [P or N, ...] -> [m, rows of P/m whole groups, ...]
            per = 1 if name in GROUP_KEYS else g
            return x.reshape((m, (p // m) * per) + x.shape[1:])

        def epoch(carry, keys):
            perm_key, step_keys = keys
            if m > 1:  # shuffle whole groups
                order = jax.random.permutation(perm_key, p)
                shuffled = {k: v[order] if k in GROUP_KEYS
                            else v.reshape((p, g) + v.shape[1:])[order].reshape(v.shape)
                            for k, v in batch.items()}
            else:
                shuffled = batch
            mbs = {k: split(k, v) for k, v in shuffled.items()}
            step = functools.partial(self._minibatch_step, version=state.step, base=base)
            return jax.lax.scan(step, carry, (mbs, step_keys))

        (params, opt_state), metrics = jax.lax.scan(
            epoch, (state.params, state.opt_state), (perm_keys, loss_keys))
        metrics = jax.tree.map(jnp.mean, metrics)
        return TrainState(params, opt_state, state.step + 1, rng), metrics
