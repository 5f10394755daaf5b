"""Supervised warm start: maximise log π(solution | prompt) on the task's solutions.

    params, summary = rl.train.sft.train(run, params, workdir)
    params, summary = rl.train.sft.warm_start(run, params, workdir)   # run once, reuse after

Each example becomes `prompt + solution + eos`; the loss is the mean
negative log-likelihood of the solution and eos tokens (prompt tokens are
not trained), computed with the learner's completion-only log-probs at
temperature 1. AdamW with linear warmup then cosine decay (`sft.*`), one
jitted, donated step; held-out greedy accuracy before, every
`sft.eval_every` steps and after. Logs go to DIR/sft_metrics.jsonl and
DIR/tensorboard/sft. The steps run through `rl.checkpoint.loop.fit` (`SFTJob`), so an
interrupted warm start resumes from DIR/sft_checkpoints.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import sys
import tempfile
import time
from typing import Any

import jax
import numpy as np
import optax

import models
from models import multihost, paths
from rl.algorithms import ops
from rl.checkpoint import loop
from rl.checkpoint.faults import Faults
from rl.data.sources import batches
from rl.train import build, evaluation, multiturn
from rl.train import learner as learner_lib
from rl.train.batch import assemble
from rl.train.build import Run
from rl.train.logs import RunLog


def make_step(run: Run, optimizer: optax.GradientTransformation, logits_chunk: int):
    def loss_fn(params, batch):
        logp, _ = learner_lib.token_logprobs(
            run.model_config, params, batch["prompts"], batch["prompt_lens"], batch["completion"],
            logits_chunk=logits_chunk, sharding=run.act)
        return -ops.masked_mean(logp, batch["mask"])

    def step(params, opt_state, batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, batch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, {
            "loss": loss, "grad_norm": optax.tree.norm(grads)}

    return jax.jit(step, donate_argnums=(0, 1))


def examples_to_batch(run: Run, examples, completion_len: int) -> dict[str, np.ndarray]:
    """Each example's prompt and solution + eos; in a multi-turn run (rollout.max_turns),
    a tool-use episode (`rl.train.multiturn.trace`: the calculator call for the task's
    `work`, the tool's real reply, which is not trained, and the solution)."""
    eos = run.model_config.eos_token_ids[0]
    prompts, completions, masks = [], [], []
    for ex in examples:
        if not ex.solution:
            raise ValueError(f"example {ex.uid} has no solution: supervised warm start needs "
                             "a procedural task (data.source=task)")
        prompts.append(run.encode_prompt(ex.prompt))
        if run.env is None:
            completions.append((run.tokenizer.encode(ex.solution) + [eos])[:completion_len])
            masks.append(None)
            continue
        if not ex.work:
            raise ValueError(f"example {ex.uid} has no calculator expression (Example.work): "
                             "a tool-use warm start needs a task that gives one (arithmetic)")
        tokens, mask = multiturn.trace(run.env, run.tokenizer, eos, ex.work, ex.solution)
        completions.append(tokens[:completion_len])
        masks.append(np.asarray(mask[:completion_len], bool))
    seqs = assemble(prompts, completions, group_size=1, groups=len(examples),
                    completion_len=completion_len, loss_masks=masks)
    return seqs.learner_inputs()


def learning_rate(s) -> optax.Schedule:
    """The `sft` section's schedule: linear warmup from 0 over min(warmup_steps, steps - 1)
    steps (at least 1), then cosine decay to lr / 10 at `steps` (optax needs >= 1 step of
    decay: a 1-step run decays over a step it never takes)."""
    warmup = max(min(s.warmup_steps, s.steps - 1), 1)
    return optax.warmup_cosine_decay_schedule(0.0, s.lr, warmup, max(s.steps, warmup + 1),
                                              end_value=s.lr * 0.1)


class SFTJob:
    """The supervised warm start as an `rl.checkpoint.loop` job (resume, rollback, preemption);
    its checkpoints go to DIR/sft_checkpoints and must match its `fingerprint`."""

    def __init__(self, run: Run, params: Any, workdir: str, *, stream=None):
        cfg, s = run.cfg, run.cfg.sft
        if s.steps < 1 or s.batch_size < 1:
            raise ValueError(f"sft.steps and sft.batch_size must be >= 1, got {s.steps}, "
                             f"{s.batch_size}")
        self.run_, self.section, self.total_steps = run, s, s.steps
        self.schedule = learning_rate(s)
        optimizer = optax.adamw(self.schedule, weight_decay=s.weight_decay,
                                mask=lambda p: jax.tree.map(lambda x: x.ndim >= 2, p))
        if s.grad_clip:
            optimizer = optax.chain(optax.clip_by_global_norm(s.grad_clip), optimizer)
        self.step_fn = make_step(run, optimizer, min(cfg.train.logits_chunk, run.completion_len))
        self.params = params
        self.opt_state = learner_lib.on_mesh(jax.jit(optimizer.init)(params), run.act)
        self.data = batches(run.train_source, s.batch_size, seed=cfg.seed + 100)
        self.log = RunLog(workdir, s.steps, stream=stream, name="sft",
                          every=max(s.steps // 10, 1), tensorboard=cfg.train.tensorboard)
        self.rng = learner_lib.on_mesh(jax.random.key(cfg.seed + 2), run.act)
        self.faults = Faults(cfg.fault)
        self.checkpoint_config = fingerprint(run)

    def get_state(self) -> dict:
        return {"params": self.params, "opt_state": self.opt_state, "eval_rng": self.rng}

    def set_state(self, tree: dict) -> None:
        self.params, self.opt_state, self.rng = tree["params"], tree["opt_state"], tree["eval_rng"]

    def host_state(self) -> dict:
        return {"data": self.data_state()}

    def set_host_state(self, host: dict) -> None:
        self.set_data_state(host["data"])

    def data_state(self) -> dict:
        return self.data.get_state()

    def set_data_state(self, state: dict) -> None:
        self.data.set_state(state)

    def step(self, step: int) -> dict:
        run = self.run_
        start = time.perf_counter()
        host = examples_to_batch(run, next(self.data), run.completion_len)
        self.faults.after_rollout(step)
        batch = multihost.put({k: np.asarray(v) for k, v in host.items()},
                              learner_lib.batch_sharding(run.act, host))
        self.params, self.opt_state, out = self.step_fn(self.params, self.opt_state, batch)
        metrics = {k: float(v) for k, v in multihost.to_host(out).items()}
        metrics["lr"] = float(self.schedule(step - 1))
        metrics["time/step"] = time.perf_counter() - start
        return metrics

    def evaluate(self) -> dict:
        return evaluation.evaluate(self.run_, self.params, self.rng)

    def eval_due(self, step: int) -> bool:
        every = self.section.eval_every
        return bool(every and step % every == 0) or step == self.total_steps

    def after_step(self, step: int) -> None:
        self.faults.after_step(step)


def train(run: Run, params: Any, workdir: str, *, stream=None) -> tuple[Any, dict]:
    """Runs `sft.steps` steps (resuming DIR/sft_checkpoints); returns (params,
    {"before": ..., "after": ...})."""
    job = SFTJob(run, params, workdir, stream=stream)
    try:
        summary = loop.fit(job, directory=paths.join(workdir, "sft_checkpoints"),
                           section=run.cfg.checkpoint, stream=stream)
    finally:
        job.log.close()
    return job.params, summary


WARM_START_FILE = "warm_start.json"
# sft keys that do not change the warm start's parameters (nor do data.selector's)
SFT_BOOKKEEPING = ("eval_every", "shared_dir")


def fingerprint(run: Run) -> dict:
    """What determines the warm start's result: model, data (but the task selector, which
    only RL uses), sft settings (but its bookkeeping), seed and the completion length its
    batches are padded to."""
    cfg = run.cfg
    data = {k: v for k, v in cfg.data.to_dict().items() if k != "selector"}
    sft = {k: v for k, v in cfg.sft.to_dict().items() if k not in SFT_BOOKKEEPING}
    out = {"model": cfg.model.to_dict(), "data": data, "sft": sft, "seed": cfg.seed,
           "completion_len": run.completion_len}
    if run.env is not None:  # the tools and their formats make the traces
        out["env"] = cfg.env.to_dict()
    return json.loads(json.dumps(out, default=str))


def fingerprint_key(run: Run) -> str:
    """A short name for the fingerprint: its directory under `sft.shared_dir`."""
    text = json.dumps(fingerprint(run), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _reusable(path: str, run: Run) -> dict | None:
    """The saved summary when DIR/sft holds a finished warm start of this fingerprint."""
    try:
        saved = json.loads(paths.read_text(paths.join(path, WARM_START_FILE)))
    except (OSError, ValueError):
        return None
    return saved.get("summary") if saved.get("fingerprint") == fingerprint(run) else None


def warm_start(run: Run, params: Any, workdir: str, *, stream=None) -> tuple[Any, dict, bool]:
    """`train.warm_start=sft`: (params, summary, reused). Runs `train` and exports
    DIR/sft (its fingerprint written last, so an interrupted export is not reused),
    or loads DIR/sft when it holds a finished warm start with the same fingerprint.

    With `sft.shared_dir`, the warm start lives in SHARED/<fingerprint_key>/ instead
    (its sft directory, logs and, while it trains, checkpoints): the first run to need
    it trains it under a file lock, the others wait for the lock and load it, and its
    checkpoints are deleted once the export is written (nothing resumes from them).
    A shared_dir in a bucket keeps its lock on this machine (`lock_path`)."""
    home = warm_start_home(run, workdir)
    if home == workdir:
        return _warm_start_in(workdir, run, params, stream)
    paths.makedirs(home)
    with _locked(home, stream):
        out = _warm_start_in(home, run, params, stream)
        if multihost.is_primary():
            paths.rmtree(paths.join(home, "sft_checkpoints"))
    return out


def warm_start_home(run: Run, workdir: str) -> str:
    """The folder whose sft/ holds the run's warm start: `workdir`, or with
    `sft.shared_dir` SHARED/<fingerprint_key>."""
    shared = run.cfg.sft.shared_dir
    return paths.join(shared, fingerprint_key(run)) if shared else workdir


def lock_path(home: str) -> str:
    """The lock file of a shared warm start's folder: in it when it is local, else (object
    storage has no locks) in this machine's temporary folder, named by the folder's URI:
    it orders the runs of one machine (a sweep's), not runs on different machines."""
    if not paths.is_remote(home):
        return os.path.join(home, ".lock")
    name = hashlib.sha256(home.encode()).hexdigest()[:16]
    directory = os.path.join(tempfile.gettempdir(), "rlvr-warm-start-locks")
    os.makedirs(directory, exist_ok=True)
    return os.path.join(directory, f"{name}.lock")


def _warm_start_in(workdir: str, run: Run, params: Any, stream) -> tuple[Any, dict, bool]:
    path = paths.join(workdir, "sft")
    summary = _reusable(path, run)
    if summary is not None:
        with paths.local_copy(path) as local:  # downloaded first when it is remote
            _, params = models.load_pretrained(local, run.model_config.weight_dtype,
                                               mesh=run.mesh, rules=run.rules)
        return params, summary, True
    params, summary = train(run, params, workdir, stream=stream)
    build.export(path, run, params)
    if multihost.is_primary():
        paths.write_text(paths.join(path, WARM_START_FILE), json.dumps(
            {"fingerprint": fingerprint(run), "summary": summary}, indent=1))
    multihost.sync("warm start written")
    return params, summary, False


@contextlib.contextmanager
def _locked(home: str, stream):
    """An exclusive lock on the shared warm start `home` (its `lock_path`, released when
    the process dies), saying so when another process holds it."""
    with open(lock_path(home), "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"waiting for {home}: another run is training this warm "
                  "start", file=stream or sys.stdout, flush=True)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
