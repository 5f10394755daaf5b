"""Value checks of a config, run by `rl.train.build.resolve` before any compute.

Each raises ValueError with a one-line message naming the key, the value and,
where it is not obvious, why it cannot work: the optimizer and SFT settings,
the RL loop's counts and periods, where π_old comes from, the update
schedule (what a single on-policy optimizer step per batch would leave inert),
the checkpoint section (fault injection: `rl.checkpoint.faults.check`).
"""

from __future__ import annotations

import jax

from rl.algorithms.algorithm import Algorithm
from rl.train import april
from sampling import SamplingParams

OLD_LOGP_SOURCES = ("auto", "sampler", "recompute", "interpolate")


def resolve_old_logp(value: str, dtype: str, *, asynchronous: bool = False,
                     filtered: bool = False) -> str:
    """`train.old_logp` for a model computing in `dtype`: "auto" is the sampler's
    log-probs in float32, where sampler and learner agree to fp32 rounding, and a
    recomputation otherwise: in bfloat16 the decode step and the learner's
    batched forward round activations at different points (docs/sampling.md).
    With the sampler ahead of the learner (`asynchronous`), "auto" in float32 is
    "recompute_stale": the tokens an older version sampled are recomputed, the
    others keep the sampler's (a recomputation when the sampling is `filtered`)."""
    if value != "auto":
        return value
    if dtype != "float32":
        return "recompute"
    if asynchronous:
        return "recompute" if filtered else "recompute_stale"
    return "sampler"


def check_old_logp(old_logp: str, alg: Algorithm, sp: SamplingParams) -> None:
    """The resolved π_old source against the sampling filters and the loss."""
    filtered = sp.top_k or sp.top_p < 1.0 or sp.min_p > 0.0
    if old_logp in ("sampler", "interpolate") and filtered:
        raise ValueError(f"train.old_logp={old_logp} needs top_k/top_p/min_p off (the "
                         "sampler's log-probs are then those of the policy at the sampling "
                         "temperature); use train.old_logp=recompute")
    if old_logp == "recompute" and filtered and alg.off_policy.kind not in ("tis", "mis"):
        raise ValueError("train.old_logp=recompute with top_k/top_p/min_p on needs "
                         "rl.off_policy.correction=tis or mis: the samples come from the "
                         "filtered distribution, not the policy, and importance sampling "
                         "corrects that")


WARM_STARTS = ("", "sft")
SCHEDULES = ("constant", "linear", "cosine")
# what only acts once π_θ has moved away from π_old (a second optimizer step on a batch)
OFF_POLICY_LOSSES = ("gspo", "gspo_token", "nsr", "cispo", "bapo")
CLIP_OPTIONS = ("eps_low", "eps_high", "dual_clip", "delta_low", "delta_high")


def _positive(section, name: str, keys: tuple[str, ...], *, strict: bool) -> None:
    for key in keys:
        value = section[key]
        if value is None or (value <= 0 if strict else value < 0):
            raise ValueError(f"{name}.{key} must be {'>' if strict else '>='} 0, got {value}")


def check_optim(o) -> None:
    _positive(o, "optim", ("lr", "eps"), strict=True)
    _positive(o, "optim", ("warmup_steps", "weight_decay", "grad_clip"), strict=False)
    if o.schedule not in SCHEDULES:
        raise ValueError(f"unknown optim.schedule {o.schedule!r} (choose from "
                         f"{', '.join(SCHEDULES)})")
    for key in ("b1", "b2"):
        if not 0.0 <= o[key] < 1.0:
            raise ValueError(f"optim.{key} must be in [0, 1), got {o[key]}")
    if not 0.0 <= o.end_lr_fraction <= 1.0:
        raise ValueError(f"optim.end_lr_fraction must be in [0, 1], got {o.end_lr_fraction}")


def check_sft(s) -> None:
    _positive(s, "sft", ("steps", "batch_size", "lr"), strict=True)
    _positive(s, "sft", ("warmup_steps", "weight_decay", "grad_clip", "eval_every"),
              strict=False)
    if s.batch_size % jax.process_count():
        raise ValueError(f"sft.batch_size={s.batch_size} does not split over the run's "
                         f"{jax.process_count()} processes: use a multiple of the process count")
    if s.shared_dir and jax.process_count() > 1:
        raise ValueError("sft.shared_dir is for single-process runs (a sweep's): its file "
                         "lock does not order the processes of one run; leave it empty")


def check_checkpoint(c) -> None:
    _positive(c, "checkpoint", ("keep", "max_rollbacks"), strict=True)
    _positive(c, "checkpoint", ("every", "every_s", "snapshot_every", "abandon_after_s"), strict=False)


def check_update_schedule(cfg, alg: Algorithm) -> None:
    """Refuses what would do nothing with one on-policy optimizer step per batch:
    π_θ = π_old at that step, so every ratio is 1 and nothing is clipped or reweighted."""
    train = cfg.train
    if train.epochs * train.minibatches > 1:
        return
    if cfg.rollout.mode != "sync" and train.old_logp in ("sampler", "interpolate"):
        return  # π_old is (or leans on) the older sampling policy: ratios are not 1
    inert = [f"rl.loss.{k}" for k in CLIP_OPTIONS if alg.loss_options.get(k) is not None]
    if alg.loss in OFF_POLICY_LOSSES:
        inert.insert(0, f"rl.loss.name={alg.loss}")
    if alg.reweight == "fipo":
        inert.append("rl.reweight.name=fipo")
    if inert:
        raise ValueError(
            f"{', '.join(inert)} set with train.epochs × train.minibatches = 1: each rollout "
            "batch gets one on-policy optimizer step, where π_θ/π_old = 1, so it would never "
            "act; set train.minibatches (DAPO uses 16 per batch) or train.epochs > 1, or "
            "drop it")


def check_train(cfg, alg: Algorithm, sp: SamplingParams, samples: int) -> None:
    train = cfg.train
    if train.old_logp not in OLD_LOGP_SOURCES:
        raise ValueError(f"train.old_logp must be one of {OLD_LOGP_SOURCES}, got "
                         f"{train.old_logp!r}")
    if sp.temperature <= 0:
        raise ValueError("sampling.temperature must be > 0 for RL (0 is greedy)")
    for name in ("steps", "prompts_per_step", "epochs", "minibatches", "logits_chunk",
                 "log_every", "dynamic_max_rounds"):
        if train[name] < 1:
            raise ValueError(f"train.{name} must be >= 1, got {train[name]}")
    for name in ("eval_every", "export_every"):
        if train[name] < 0:
            raise ValueError(f"train.{name} must be >= 0, got {train[name]}")
    if train.prompts_per_step % train.minibatches:
        raise ValueError(f"train.minibatches={train.minibatches} does not divide "
                         f"train.prompts_per_step={train.prompts_per_step}: minibatches are "
                         "whole prompt groups (a group's samples share its prompt's forward)")
    processes = jax.process_count()
    if train.prompts_per_step % processes:
        raise ValueError(f"train.prompts_per_step={train.prompts_per_step} does not split over "
                         f"the run's {processes} processes (each reads an equal share of the "
                         "prompts): use a multiple of the process count")
    if samples < 2 and alg.advantage in ("grpo", "dapo", "dr_grpo", "rloo", "mc_grpo"):
        raise ValueError(f"advantage {alg.advantage} compares samples of a prompt: "
                         f"sampling.n must be >= 2")
    if train.warm_start not in WARM_STARTS:
        raise ValueError(f"train.warm_start must be one of {WARM_STARTS}, got "
                         f"{train.warm_start!r}")
    check_update_schedule(cfg, alg)


def check_sft_data(cfg) -> None:
    """The supervised warm start trains on solutions, which only procedural tasks have."""
    if cfg.data.source != "task":
        raise ValueError(f"supervised warm start needs data.source=task (procedural tasks "
                         f"carry solutions; {cfg.data.source} rows do not)")


def check_rollout_mode(cfg, tree: bool) -> None:
    """The task selector and APRIL against the sampler and dynamic sampling."""
    name = cfg.data.selector.name
    if name == "bots" and cfg.train.dynamic_sampling:
        raise ValueError("data.selector.name=bots with train.dynamic_sampling: BOTS already "
                         "selects tasks whose pass rate is near 0.5; use one of them")
    if name == "dars" and tree:
        raise ValueError("data.selector.name=dars needs sampling.sampler=flat (its extra "
                         "rollouts are flat samples of the prompt)")
    if cfg.rollout.april:
        for on, what in ((tree, "sampling.sampler=tree"),
                         (cfg.train.dynamic_sampling, "train.dynamic_sampling"),
                         (name != "uniform", f"data.selector.name={name}")):
            if on:
                raise ValueError(f"rollout.april with {what}: APRIL's carry-over works on "
                                 "flat groups of the data order; use one of them")
        april.over_provision(cfg.train.prompts_per_step, cfg.rollout.over_provision)
    check_async(cfg, tree)


ROLLOUT_MODES = ("sync", "one_step_off", "async")
KV_ON_UPDATE = ("recompute", "keep")


def check_async(cfg, tree: bool) -> None:
    """`rollout.mode`, `rollout.max_staleness`, `rollout.kv_on_update` and
    `mesh.rollout_devices` against each other, the sampler and the processes."""
    r = cfg.rollout
    if r.mode not in ROLLOUT_MODES:
        raise ValueError(f"rollout.mode must be one of {', '.join(ROLLOUT_MODES)}, got "
                         f"{r.mode!r}")
    if isinstance(r.max_staleness, bool) or not isinstance(r.max_staleness, int) \
            or r.max_staleness < 0:
        raise ValueError(f"rollout.max_staleness must be an int >= 0, got {r.max_staleness!r}")
    if r.kv_on_update not in KV_ON_UPDATE:
        raise ValueError(f"rollout.kv_on_update must be one of {', '.join(KV_ON_UPDATE)}, got "
                         f"{r.kv_on_update!r}")
    if r.kv_on_update == "keep" and not (r.mode == "async" and r.max_staleness > 0):
        raise ValueError("rollout.kv_on_update=keep needs rollout.mode=async with "
                         "rollout.max_staleness > 0: only those carry unfinished samples "
                         "from one call to the next")
    devices = int(cfg.mesh.rollout_devices or 0)
    if r.mode == "sync":
        if devices:
            raise ValueError("mesh.rollout_devices needs rollout.mode=one_step_off or async "
                             "(a synchronous step samples on the learner's devices)")
        return
    if r.mode == "async" and r.april:
        raise ValueError("rollout.april with rollout.mode=async: asynchronous rollouts carry "
                         "unfinished samples themselves (one batch of new prompts per call); "
                         "use one of them")
    name = cfg.data.selector.name
    if r.mode == "async" and r.max_staleness > 0:
        april.over_provision(cfg.train.prompts_per_step, r.over_provision)
        for on, what in ((tree, "sampling.sampler=tree"),
                         (cfg.train.dynamic_sampling, "train.dynamic_sampling"),
                         (name != "uniform", f"data.selector.name={name}")):
            if on:
                raise ValueError(f"rollout.mode=async with {what}: the carry of unfinished "
                                 "samples works on flat groups of the data order; use "
                                 "rollout.mode=one_step_off, or rollout.max_staleness=0")
    if cfg.train.old_logp == "interpolate" and cfg.train.dynamic_sampling:
        raise ValueError(f"train.old_logp=interpolate with train.dynamic_sampling and "
                         f"rollout.mode={r.mode}: a step whose batch keeps no group updates "
                         "nothing, and the interpolation would count it as a new policy "
                         "version; use train.old_logp=recompute")
    if jax.process_count() > 1 and not devices:
        raise ValueError(f"rollout.mode={r.mode} with {jax.process_count()} processes needs "
                         "mesh.rollout_devices > 0: the sampler and the learner run at once, "
                         "and on shared devices their collectives could meet in another "
                         "order in each process")


MAX_QUIET_LR = 1e-2  # above this an AdamW update moves every weight by a large share of it


def warnings(cfg) -> list[str]:
    """Settings that can run but almost surely should not (printed at start-up)."""
    out = []
    if cfg.optim.lr > MAX_QUIET_LR:
        out.append(f"optim.lr={cfg.optim.lr:g} is far above the rates RL fine-tuning uses "
                   "(about 1e-7 to 1e-4 with AdamW): each update moves every weight by up to "
                   "that much, and the policy collapses within a few steps")
    return out


def check_lora(cfg, on: bool) -> None:
    """`lora` against the rest of the run: the reference is the base already on the
    devices, so it is not offloaded."""
    if on and cfg.rl.reference.offload:
        raise ValueError("rl.reference.offload with lora.rank >= 1: the reference is the "
                         "frozen base with the adapter off, which the policy keeps on the "
                         "devices anyway; turn the offload off")
