"""A run's parts from a config, with every name, option and file checked first.

    run = rl.train.build.resolve(cfg, workdir)     # no compute: fails fast, one line
    params = rl.train.build.init_params(run)       # the policy, placed on the mesh

`resolve` turns the config into: the model architecture (with the
tokenizer's special ids), the tokenizer, the algorithm (`rl.algorithms.algorithm`),
train and held-out prompt sources, sampling parameters, the tree shape,
the mesh, and the eval settings. Anything wrong (a verifier or task that
is not registered, an option a component does not take, a data file that
does not exist, a malformed row, a shape that does not fit) raises one of
`ERRORS` with a one-line message before any array is built; the entry
points print it as `error: ...` and exit with status 2.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import tempfile
from collections.abc import Callable
from typing import Any

import jax
import ml_collections

import models
from models import extras, multihost, paths, peft_io, sharding
from models.byte_tokenizer import save_byte_tokenizer
from models.config import ModelConfig
from models.safetensors_io import CheckpointError
from rl.algorithms import algorithm as algorithm_lib
from rl.algorithms import off_policy, overlong
from rl.algorithms.algorithm import Algorithm
from rl.checkpoint import faults, persistent
from rl.checkpoint.persistent import CheckpointError as ResumeError
from rl.data import sources as sources_lib
from rl.data.from_config import make_selector, make_sources
from rl.envs.sandbox import SandboxError
from rl.registry import RegistryError, set_options
from rl.rewards import RewardInputError, latex
from rl.train import adapters, checks, latr_plan, multiturn, speculation
from rl.train import learner as learner_lib
from sampling import SamplingParams, TreeConfig
from sampling.flat import check_layout

ERRORS = (RegistryError, sources_lib.DataError, CheckpointError, RewardInputError,
          extras.MissingExtra, ResumeError, SandboxError,
          ValueError, KeyError, FileNotFoundError)


@dataclasses.dataclass
class Run:
    cfg: Any
    model_config: ModelConfig
    tokenizer: Any
    tokenizer_dir: str
    algorithm: Algorithm
    train_source: Any
    heldout_source: Any | None
    sampling_params: SamplingParams
    tree: TreeConfig | None
    mesh: Any
    rules: Any
    act: sharding.ActivationSharding
    eval_ks: tuple[int, ...]
    selector: Any = None  # rl.data.selectors (data.selector), made by `resolve`
    # the tree sampler's answer stop (sampling.tree.stop_on_boxed: a closed \boxed{})
    stop_text: Callable[[str], bool] | None = None
    old_logp: str = "sampler"  # train.old_logp resolved for the model's dtype
    # the sampler's mesh and rules: `act` itself unless mesh.rollout_devices gives the
    # sampler devices of its own (rollout.mode one_step_off / async)
    rollout_act: sharding.ActivationSharding | None = None
    # rollout.max_turns >= 1: the env section's tools (rl.envs.ToolEnvironment)
    env: Any = None
    # lora.rank >= 1: the adapters, the base's storage, the sampler's mode
    lora: adapters.Settings | None = None
    # sampling.sampler=latr: the LATR settings and mix schedule (rl.train.latr_plan)
    latr: latr_plan.LatrPlan | None = None
    # sampling.speculative.enable: the flat sampler's speculative decoding
    speculative: object | None = None  # sampling.spec_decode.SpecConfig
    # sampling.speculative.draft_model: the sampler's params -> (draft config, params)
    draft_model: Callable | None = None

    @property
    def samples_per_prompt(self) -> int:
        """G: completions per prompt (the learner's group size), the tree's leaves or
        `sampling.n`; mc_grpo draws one more (its G + 1, the median pivot getting no
        gradient), as its authors do; with DARS, N_max (groups padded to it)."""
        if self.tree:
            return self.tree.leaves_per_prompt
        if getattr(self.selector, "name", "") == "dars":  # groups padded to DARS's N_max
            return self.selector.n_max
        return self.samples_drawn

    @property
    def samples_drawn(self) -> int:
        """Flat samples drawn per prompt (before DARS's extras): `sampling.n`, plus one
        for mc_grpo."""
        return int(self.cfg.sampling.n) + (self.algorithm.advantage == "mc_grpo")

    @property
    def completion_len(self) -> int:
        """C: the most tokens a completion can have (the tree's leaves never exceed
        `sampling.max_new_tokens`; `resolve` checks it)."""
        if self.tree:
            return self.tree.segment_len * self.tree.max_depth
        return self.sampling_params.max_new_tokens

    def encode_prompt(self, text: str) -> list[int]:
        """A prompt's token ids under `data.chat_template` / `data.system_prompt`."""
        data = self.cfg.data
        return encode_prompt(self.tokenizer, text, chat_template=bool(data.chat_template),
                             system_prompt=data.system_prompt)


def message(error: BaseException) -> str:
    """The one-line form of a build error (KeyError quotes its text)."""
    text = error.args[0] if isinstance(error, KeyError) and error.args else str(error)
    return " ".join(str(text).split())


def _tokenizer(cfg, workdir: str | None) -> tuple[Any, str]:
    path = cfg.data.tokenizer or (cfg.model.hf_path and paths.cached(cfg.model.hf_path))
    if not path:
        path = paths.join(workdir, "tokenizer") if workdir else tempfile.mkdtemp()
        if not workdir or multihost.is_primary():  # a shared workdir: one process writes
            with paths.staged(path) as local:
                save_byte_tokenizer(local)
        if workdir:
            multihost.sync("byte tokenizer")
    if not paths.isdir(path):
        raise FileNotFoundError(f"tokenizer directory {path} does not exist")
    with paths.local_copy(path) as local:  # the tokenizer reads its files when it loads
        return models.load_tokenizer(local), path


def _model_config(cfg, tokenizer) -> ModelConfig:
    config = models.from_config_section(cfg.model)
    if not config.eos_token_ids:
        if not tokenizer.eos_ids:
            raise ValueError("neither the model nor the tokenizer defines an eos token")
        config = config.replace(eos_token_ids=tuple(tokenizer.eos_ids),
                                bos_token_id=tokenizer.bos_id, pad_token_id=tokenizer.pad_id)
    if tokenizer.vocab_size > config.vocab_size:
        raise ValueError(f"tokenizer has {tokenizer.vocab_size} ids but the model's vocab_size "
                         f"is {config.vocab_size}")
    return config


def _tree(s) -> TreeConfig:
    """The tree shape from `sampling.tree`, checked against `sampling.max_new_tokens`:
    segment_len unset = max_new_tokens // max_depth; page_size = sampling.page_size.
    (`stop_on_boxed` is the run's text rule, `Run.stop_text`, not the shape's.)"""
    opts = set_options(s.tree, exclude=("stop_on_boxed",))
    if "first_branching" in opts:
        try:
            parts = [int(p) for p in str(opts["first_branching"]).split(",")]
        except ValueError:
            parts = []
        if len(parts) not in (1, 2):
            raise ValueError(f"sampling.tree.first_branching must be 'k' or 'lo,hi', got "
                             f"{opts['first_branching']!r}")
        opts["first_branching"] = parts[0] if len(parts) == 1 else tuple(parts)
    depth = int(opts.get("max_depth", TreeConfig.max_depth))
    if depth < 1:
        raise ValueError(f"sampling.tree.max_depth must be >= 1, got {depth}")
    if "segment_len" not in opts:
        opts["segment_len"] = s.max_new_tokens // depth
        if opts["segment_len"] < 1 or opts["segment_len"] % s.page_size:
            raise ValueError(
                f"sampling.tree.segment_len is unset and sampling.max_new_tokens // "
                f"sampling.tree.max_depth = {s.max_new_tokens} // {depth} = "
                f"{opts['segment_len']} is not a positive multiple of sampling.page_size="
                f"{s.page_size}: set sampling.tree.segment_len (and page_size)")
    seg = int(opts["segment_len"])
    if seg * depth > s.max_new_tokens:
        raise ValueError(
            f"sampling.tree.segment_len × max_depth = {seg} × {depth} = {seg * depth} tokens "
            f"exceeds sampling.max_new_tokens={s.max_new_tokens}: a leaf would be longer than "
            "the limit (lower them, or raise max_new_tokens)")
    try:
        return TreeConfig(page_size=s.page_size, **opts)
    except ValueError as e:
        raise ValueError(f"sampling.tree: {e}") from None


def _eval_ks(section) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(k) for k in str(section.k).split(",") if k.strip()}))
    except ValueError:
        raise ValueError(f"eval.k must be comma-separated ints, got {section.k!r}") from None
    if not ks or ks[0] < 1 or ks[-1] > section.n:
        raise ValueError(f"eval.k values must be in [1, eval.n={section.n}], got {section.k!r}")
    return ks


def check_log_extras(cfg) -> None:
    """The optional packages the run's logs need (`train.tensorboard`, `train.plot`)."""
    needs = [("tensorboard", "tensorboard", "train.tensorboard=True")] * cfg.train.tensorboard
    needs += [("matplotlib", "plots", "train.plot=True")] * cfg.train.plot
    for module, extra, feature in needs:
        extras.check(module, extra, feature)


def resolve(cfg, workdir: str | None = None, *, for_sft: bool = False) -> Run:
    """Everything but the parameters, validated; raises one of ERRORS. `for_sft`:
    the run is a supervised warm start (launch.sft), which needs task solutions."""
    rl = cfg.rl.copy_and_resolve_references()
    train, heldout, task_reward = make_sources(cfg.data)
    if not rl.reward.name:
        if not task_reward:
            raise ValueError("rl.reward.name is empty: name the verifier for this dataset "
                             "(rl.rewards: countdown, arithmetic, math, format)")
        rl.reward.name = task_reward
    alg = algorithm_lib.from_config(rl)
    s = cfg.sampling
    if s.sampler not in ("flat", "tree", "latr"):
        raise ValueError(f"sampling.sampler must be flat, tree or latr, got {s.sampler!r}")
    if s.sampler != "latr" and set_options(s.latr, exclude=()):
        raise ValueError(f"sampling.latr options are set but sampling.sampler is {s.sampler}")
    sp = SamplingParams(temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
                        min_p=s.min_p, max_new_tokens=s.max_new_tokens)
    tree = _tree(s) if s.sampler == "tree" else None
    if tree is None and set_options(s.tree, exclude=()):
        raise ValueError("sampling.tree options are set but sampling.sampler is flat")
    if tree is None:  # the flat sampler's own rules, on the config's values
        check_layout(int(s.n), int(s.page_size), int(s.segment_len), prefix="sampling.")
    _check_references(cfg, alg, train, heldout)
    samples = tree.leaves_per_prompt if tree else s.n
    checks.check_train(cfg, alg, sp, samples)
    checks.check_optim(cfg.optim)
    checks.check_sft(cfg.sft)
    checks.check_checkpoint(cfg.checkpoint)
    faults.check(cfg.fault)
    if cfg.train.warm_start == "sft" or for_sft:
        checks.check_sft_data(cfg)
    if alg.advantage == "tree" and tree is None:
        raise ValueError("advantage tree needs sampling.sampler=tree")
    overlong.check(alg.overlong_buffer, alg.overlong_factor,
                   tree.segment_len * tree.max_depth if tree else sp.max_new_tokens)
    eval_ks = _eval_ks(cfg.eval)
    mesh, rules = sharding.from_config_section(cfg.mesh)
    sampler_mesh = sharding.rollout_mesh(cfg.mesh)
    tokenizer, tokenizer_dir = _tokenizer(cfg, workdir)
    if cfg.data.chat_template and not tokenizer.has_chat_template:
        raise ValueError(f"data.chat_template is on but the tokenizer in {tokenizer_dir} has "
                         "no chat template (chat_template.jinja or tokenizer_config.json's "
                         "chat_template)")
    if cfg.data.system_prompt and not cfg.data.chat_template:
        raise ValueError("data.system_prompt is set but data.chat_template is off")
    model_config = _model_config(cfg, tokenizer)
    latr = (latr_plan.resolve(cfg, tokenizer, model_config.vocab_size)
            if s.sampler == "latr" else None)
    lora = adapters.from_config(cfg.lora, model_config)
    checks.check_lora(cfg, lora is not None)
    asynchronous = cfg.rollout.mode != "sync"
    alg = dataclasses.replace(alg, off_policy=dataclasses.replace(
        alg.off_policy, correction=off_policy.resolve_correction(alg.off_policy.correction,
                                                                 asynchronous)))
    old_logp = checks.resolve_old_logp(
        cfg.train.old_logp, model_config.dtype, asynchronous=asynchronous,
        filtered=bool(sp.top_k or sp.top_p < 1.0 or sp.min_p > 0.0))
    checks.check_old_logp(old_logp, alg, sp)
    boxed = tree is not None and s.tree.stop_on_boxed is not False  # None = on (TreePO)
    run = Run(cfg, model_config, tokenizer, tokenizer_dir, alg, train, heldout, sp, tree, mesh,
              rules, sharding.ActivationSharding(mesh, rules), eval_ks, old_logp=old_logp,
              stop_text=latex.complete_box if boxed else None, lora=lora, latr=latr)
    checks.check_rollout_mode(cfg, tree is not None)
    multiturn.check(cfg, tree=tree is not None, processes=jax.process_count())
    selector = make_selector(cfg.data, train, int(cfg.sampling.n))
    rollout_act = (sharding.ActivationSharding(sampler_mesh, rules) if sampler_mesh is not None
                   else run.act)
    spec = speculation.resolve(cfg)
    return dataclasses.replace(run, selector=selector, rollout_act=rollout_act, speculative=spec,
                               draft_model=speculation.drafter(cfg, model_config, rollout_act),
                               env=multiturn.environment(cfg, tokenizer))


REFERENCES_CHECKED = 64  # examples of each split whose references the verifiers check


def _check_references(cfg, alg: Algorithm, train, heldout) -> None:
    """The run's verifiers take the data's references (a `math` verifier refuses a
    countdown task's {"target", "numbers"}): checked on the first examples of each
    split, before any compute, as the reward workers would at the first step."""
    refs = [source[i].reference for source in (train, heldout) if source is not None
            for i in range(min(len(source), REFERENCES_CHECKED))]
    try:
        alg.reward.check_inputs(refs)
    except RewardInputError as e:
        data = (f"data.task.name={cfg.data.task.name}" if cfg.data.source == "task"
                else f"data.source={cfg.data.source}")
        raise RewardInputError(f"rl.reward.name={','.join(alg.reward.names)} cannot score the "
                               f"references of {data}: {e}") from None


def init_params(run: Run) -> Any:
    """The initial policy: `model.hf_path`'s weights, or a fresh init from `seed`."""
    cfg = run.cfg
    if cfg.model.hf_path:  # a bucket's: its local copy (models.paths.cached)
        _, params = models.load_pretrained(paths.cached(cfg.model.hf_path),
                                           run.model_config.weight_dtype,
                                           mesh=run.mesh, rules=run.rules)
        return params
    return sharding.init_sharded(run.model_config, jax.random.key(cfg.seed), run.mesh,
                                 run.rules)


def abstract_params(run: Run) -> Any:
    """ShapeDtypeStructs of the policy's parameters with their shardings on the run's
    mesh (a restore target; nothing is allocated)."""
    shapes = jax.eval_shape(functools.partial(models.init, run.model_config),
                            jax.random.key(0))
    shardings = sharding.param_shardings(run.model_config, run.mesh, run.rules)
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                        shapes, shardings)


def checkpoint_dir(path: str) -> str | None:
    """The Orbax checkpoint directory `path` names: a training workdir (its
    `checkpoints/`) or such a directory itself; None when it is neither."""
    for candidate in (paths.join(path, "checkpoints"), path):
        if paths.isdir(candidate) and any(
                name.isdigit() and paths.isdir(paths.join(candidate, name))
                for name in paths.listdir(candidate)):
            return candidate
    return None


def config_from_checkpoint(directory: str, step: int | None = None):
    """The run's config as stored with its Orbax checkpoint (an unlocked ConfigDict)."""
    return ml_collections.ConfigDict(persistent.stored_config(directory, step))


def checkpoint_params(run: Run, directory: str, step: int | None = None) -> tuple[int, Any]:
    """(step, params) of an Orbax checkpoint (the newest usable one by default),
    placed on the run's mesh."""
    return persistent.restore_params(directory, abstract_params(run), step)


def encode_prompt(tokenizer, text: str, *, chat_template: bool = False,
                  system_prompt: str = "") -> list[int]:
    """Token ids of a prompt. Plain: the text, starting with bos when the tokenizer
    has one. `chat_template`: a user message (after a system message when
    `system_prompt` is set) rendered with the tokenizer's chat template and the
    assistant turn opened, encoded without added special tokens (as transformers'
    `apply_chat_template(..., tokenize=True)`; the template writes any bos itself)."""
    if chat_template:
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        messages.append({"role": "user", "content": text})
        return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                  tokenize=True))
    ids = tokenizer.encode(text)
    bos = tokenizer.bos_id
    if bos is not None and (not ids or ids[0] != bos):
        ids = [bos] + ids
    return ids


def export(path: str, run: Run, params: Any, adapters: Any = None) -> str:
    """Writes the policy and its tokenizer as a Hugging Face directory (on object
    storage: written locally, then uploaded). With LoRA `params` are the merged weights
    and `adapters` go to PATH/adapter as a PEFT directory (`models.peft_io`)."""
    def write(local: str | None) -> None:  # None: a process that gathers, writes nothing
        models.save_pretrained(local or "", run.model_config, params)
        if adapters is not None:
            peft_io.save_adapter(os.path.join(local or "", "adapter"), run.model_config,
                                 run.lora.lora, adapters, base_model=run.cfg.model.hf_path)

    if not multihost.is_primary():
        write(None)
        multihost.sync(f"export {path}")
        return path
    with paths.staged(path) as local:
        write(local)
        for name in paths.listdir(run.tokenizer_dir):
            src = paths.join(run.tokenizer_dir, name)
            if paths.isfile(src) and not os.path.exists(os.path.join(local, name)):
                paths.copy_file(src, os.path.join(local, name))
    multihost.sync(f"export {path}")
    return path


def learner_for(run: Run, base: Any = None) -> learner_lib.Learner:
    """The RL learner for `run`; with LoRA, over the frozen `base` (params or their
    ShapeDtypeStructs), its TrainState.params the adapters."""
    cfg = run.cfg
    return learner_lib.Learner(
        run.model_config, run.algorithm, optimizer_for(cfg), run.act, epochs=cfg.train.epochs,
        minibatches=cfg.train.minibatches, temperature=run.sampling_params.temperature,
        logits_chunk=min(cfg.train.logits_chunk, run.completion_len),
        proximal="interpolate" if run.old_logp == "interpolate" else "given",
        base=base, lora=run.lora.lora if run.lora is not None else None)


def optimizer_for(cfg) -> Any:
    """The learner's optimizer from the config's `optim` and `train` sections."""
    o, t = cfg.optim, cfg.train
    return learner_lib.make_optimizer(
        o.lr, total_steps=t.steps * t.epochs * t.minibatches, schedule=o.schedule,
        warmup_steps=o.warmup_steps, b1=o.b1, b2=o.b2, eps=o.eps,
        weight_decay=o.weight_decay, grad_clip=o.grad_clip, end_lr_fraction=o.end_lr_fraction)
