"""Base config: the `model`, `mesh` and `rl` sections every entry point shares.

    python -m launch.<entry> --config=configs/base.py:small \
        --config.model.dtype=bfloat16 --config.mesh.fsdp=4

`get_config(arg)` follows big_vision: `arg` (after the colon) picks the model
preset. The returned ConfigDict is locked, so overriding a key that does not
exist fails with an error naming it.

model:
  preset        preset name (models.PRESETS), used when `hf_path` is empty.
  hf_path       local Hugging Face directory; its config.json gives the
                architecture (and load_pretrained the weights).
  dtype         compute dtype: float32 | bfloat16 | float16.
  param_dtype   parameter storage dtype.
  scan_layers   lax.scan over layers (compile time independent of depth).
  remat         none | full | dots (backward-pass rematerialisation).
  <architecture fields>  vocab_size, hidden_size, num_layers, num_heads,
                num_kv_heads, head_dim, mlp_dim, rope_theta, rms_norm_eps,
                tie_embeddings, max_position_embeddings: None keeps the
                preset's / checkpoint's value, anything else overrides it.
mesh:
  data, fsdp, tensor  mesh axis sizes; one may be -1 (= all remaining devices).
  rules.<logical axis>  comma-separated mesh axes for each logical axis
                (batch, length, embed, mlp, heads, kv_heads, head_dim, vocab,
                layers, norm); "" keeps that axis replicated.
rl:             the algorithm (docs/algorithms.md has every name and option).
  advantage.name   estimator (rl.advantages.names()); the other keys are its
                   options, None = the estimator's default. Setting an option
                   the chosen estimator does not take is an error.
  loss.name        policy loss (rl.losses.names()), plus `agg`, `norm_length`,
                   `tis_cap`, `tis_mode`, `entropy_coef` and the loss's options
                   (eps_low, eps_high, dual_clip, delta_*, keep_prob, mode).
  kl.kind, kl.coef, kl.clamp   KL to the reference (k1|k2|k3); coef 0 = none;
                   kl.in_reward puts it in the reward instead of the loss.
  reference.offload  keep the frozen reference model in host memory (sharded
                   like the policy, in each device's pinned_host memory) and
                   bring it to the devices only while it scores a batch: its
                   device memory is then needed only outside the update.
  reweight.name    "" or a token reweighter (fipo, logp_reweight,
                   divergence_weighted, delta_logp_mask) and its options.
  overlong.buffer, overlong.factor   DAPO's soft overlong penalty: the last
                   `buffer` tokens before the completion limit cost up to
                   -factor reward, linearly (0 = off).
  overlong.filter  leave completions cut at the limit out of the loss.
  reward.name      verifier (rl.rewards.names()), or several with weights
                   ("math:1.0,format:0.1"); "" uses the procedural task's
                   verifier (file/TFDS data must name one). The verifiers'
                   options (require_all, format_score, pattern, max_chars,
                   answer_formats, search, fallback) go to the one that has it.
  reward.correct   the verifier whose score >= 1 is "correct" (accuracy,
                   pass@k, dynamic sampling); "" = the only one named.
  reward.workers   verifier processes for the completions a verifier sends
                   out of the trainer's process (the math verifier's library
                   fallback), in parallel; 0 or 1 = one.
                   reward.timeout_s: hard limit per completion there.
data:           where prompts come from (rl/data).
  source           task | jsonl | parquet | tfds.
  task, task.<option>  procedural task (rl.data.tasks: countdown, arithmetic)
                   and its options (None = the task's default).
  train_size, heldout_size  examples drawn from a task's train / held-out
                   split; for files, heldout_size caps the held-out rows.
  path, heldout_path  JSONL/Parquet files (source jsonl/parquet).
  tfds_name, tfds_data_dir, tfds_split, tfds_heldout_split  a prepared TFDS
                   dataset in array_record format (source tfds).
  template, answer_field, uid_field  how a file/TFDS row becomes a prompt.
  chat_template    render each prompt as a user message through the
                   tokenizer's own chat template (`chat_template.jinja` or
                   tokenizer_config.json's `chat_template`, as transformers
                   renders it) with the assistant turn opened; for instruct
                   checkpoints. Off: the raw text, with bos prepended when the
                   tokenizer has one (base models).
  system_prompt    with chat_template: a system message before the user's
                   ("" = none, the template's own default applies).
  tokenizer        tokenizer directory; "" = the model's hf_path, or the
                   built-in byte tokenizer for presets.
  pass_rate_fields "weak,strong": two fields of each jsonl/parquet row with
                   offline pass rates in [0, 1] (BOTS's implicit evidence).
  selector.name    which prompts a step trains on and how many rollouts
                   each gets (rl/selectors.py): uniform (the data order) |
                   dars (extra rollouts for hard prompts: selector.schedule
                   et|hw, n_max, normalized) | bots (Thompson selection from
                   Beta pass-rate posteriors over the train pool: lam, rho,
                   tau, prior, target, thompson, cap_ema). None = default.
sampling:       rollouts (sampling/).
  sampler          flat | tree.
  n                samples per prompt (flat; the tree uses tree.leaves_per_prompt).
  temperature, top_k, top_p, min_p, max_new_tokens   SamplingParams.
  page_size, segment_len   paged-KV page and decode-segment sizes (flat);
                   the tree uses page_size too.
  tree.<field>     sampling.TreeConfig fields (None = its default);
                   first_branching is "4" or a range "2,8". A leaf has at
                   most tree.segment_len × tree.max_depth tokens, which must
                   not exceed max_new_tokens; segment_len unset = max_new_tokens
                   // max_depth (a multiple of page_size). stop_on_boxed and
                   repetition_chars act on the detokenized text (the trainer
                   passes the tokenizer); repetition_ngram is the token check
                   used without one.
train:          the RL loop (rl/trainer.py).
  steps, prompts_per_step   RL steps and prompts sampled per step.
  epochs, minibatches       PPO epochs over each batch and optimizer steps per
                   epoch (minibatches are whole prompt groups, so minibatches
                   must divide prompts_per_step). With epochs × minibatches = 1
                   the update is on-policy (ratio 1): clip settings, gspo,
                   nsr, cispo and fipo would do nothing and are refused.
  old_logp         auto (default: sampler when model.dtype is float32,
                   recompute otherwise: in bfloat16 the sampler's and the
                   learner's log-probs differ by rounding, docs/sampling.md) |
                   sampler (the sampler's log-probs are π_old; needs top_k/top_p/
                   min_p off) | recompute (a forward pass before the update;
                   with top_k/top_p/min_p on it needs loss.tis_cap: the
                   sampler's log-probs then give truncated-IS weights).
  warm_start       "" | sft: before RL, run the supervised warm start
                   (`sft.*`, procedural tasks only) and start RL from it; the
                   result is written to DIR/sft and reused by a rerun with the
                   same model, data, sft settings and seed.
  dynamic_sampling DAPO filter: drop groups whose rewards all agree and sample
                   more prompts (up to dynamic_max_rounds rounds) to refill.
  logits_chunk     completion positions per logits block in the learner.
  log_every, eval_every   console line / held-out eval period (0 = no eval
                   during training; a final eval always runs).
  export_every     also export the policy as a Hugging Face directory
                   DIR/exports/step_N every N steps (0 = none; DIR/final is
                   always written at the end).
  tensorboard      write DIR/tensorboard (needs the `tensorboard` extra).
  plot             write DIR/progress.png (needs the `plots` extra).
rollout:        APRIL, active partial rollouts (rl/april.py; flat sampling only).
  april            ask for more prompt groups than a step trains on, stop the
                   sampler once prompts_per_step groups have finished, carry
                   the unfinished samples (resumed next step, with the
                   log-probs of the policy that sampled each token) and the
                   surplus finished groups over; logs april/staleness_*.
  over_provision   groups in flight per step / prompts_per_step (>= 1).
optim:          AdamW: lr, schedule (constant | linear | cosine), warmup_steps,
                b1, b2, eps, weight_decay, grad_clip (0 = off), end_lr_fraction.
eval:           held-out evaluation: size prompts, greedy accuracy, and pass@k
                for each k in `k` ("1,4") from n samples at `temperature`.
sft:            supervised warm start (launch/sft.py): steps, batch_size, lr,
                warmup_steps, weight_decay, grad_clip, eval_every.
checkpoint:     fault tolerance (rl/loop.py, docs/fault_tolerance.md).
  every            persistent Orbax checkpoint (params, optimizer, step, RNG
                   keys, data position) in DIR/checkpoints every N steps and
                   at the end (0 = only at the end and on preemption). A rerun
                   on the same DIR resumes from the newest usable one.
  keep             checkpoints kept (older ones are deleted).
  asynchronous     write in the background (the step waits only for the copy).
  snapshot_every   copy the state to host memory every N steps (0 = only at
                   the start); a failed step (an exception, a NaN/inf loss or
                   gradient norm) restores the newest snapshot, replays the
                   steps after it (exactly: same data, same keys) and skips
                   the batch the failed step consumed. A snapshot costs one
                   copy of params + optimizer state (1-2.5% of a W1 step on
                   a CPU), so the default takes one every 10 steps.
  max_rollbacks    this many failed steps in a row stop the run (exit 1),
                   with the last good state saved as a checkpoint.
  abandon_after_s  after SIGTERM/SIGINT the running step may finish for this
                   long; then (or on a second signal) it is abandoned and the
                   newest snapshot is saved instead (0 = always finish it).
fault:          fault injection for tests (rl/faults.py); refused unless
                `enabled`: nan_at_step, raise_at_step, kill_at_step (SIGKILL),
                term_at_step (SIGTERM) (0 = off), times (consecutive attempts
                of that step the nan/raise hits).
seed:           data order, sampling and minibatch shuffles.
compilation_cache  JAX persistent compilation cache directory used by the
                launch/ entry points ("" = off): a rerun with the same
                shapes loads its XLA executables instead of compiling them.
cpu_xla_flags   flags the launch/ entry points add to XLA_FLAGS when JAX runs
                on the CPU only ("" = none; a flag already in XLA_FLAGS keeps
                the user's value). The default turns off LLVM's loop-strength
                reduction: the update compiles ~25% faster at equal speed.
"""

import ml_collections
from ml_collections import config_dict

ARCHITECTURE_FIELDS = {
    "vocab_size": int, "hidden_size": int, "num_layers": int, "num_heads": int,
    "num_kv_heads": int, "head_dim": int, "mlp_dim": int, "rope_theta": float,
    "rms_norm_eps": float, "tie_embeddings": bool, "max_position_embeddings": int,
}

# LLVM's loop-strength reduction is ~18% of XLA:CPU compile time here and buys
# W1 no runtime (see rl.build.configure_xla and benchmarks/RESULTS.md).
CPU_XLA_FLAGS = "--xla_backend_extra_options=-disable-lsr"

DEFAULT_SHARDING_RULES = {
    "batch": "data,fsdp", "length": "", "embed": "fsdp", "mlp": "tensor",
    "heads": "tensor", "kv_heads": "tensor", "head_dim": "", "vocab": "tensor",
    "layers": "", "norm": "",
}


def model_section(preset: str = "tiny") -> ml_collections.ConfigDict:
    model = ml_collections.ConfigDict()
    model.preset = preset
    model.hf_path = ""
    model.dtype = "float32"
    model.param_dtype = "float32"
    model.scan_layers = True
    model.remat = "none"
    for name, kind in ARCHITECTURE_FIELDS.items():
        model[name] = config_dict.placeholder(kind)
    return model


def mesh_section() -> ml_collections.ConfigDict:
    mesh = ml_collections.ConfigDict()
    mesh.data = -1
    mesh.fsdp = 1
    mesh.tensor = 1
    mesh.rules = ml_collections.ConfigDict(dict(DEFAULT_SHARDING_RULES))
    return mesh


def _options(**types) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        {name: config_dict.placeholder(kind) for name, kind in types.items()})


def rl_section() -> ml_collections.ConfigDict:
    """Algorithm choice by name; None-valued options keep each component's default."""
    rl = ml_collections.ConfigDict()
    rl.advantage = _options(eps=float, ddof=int, std_scope=str, baseline=bool, gamma=float,
                            scale=str, depth_weighting=str, skip_zero_std=bool, whiten=bool,
                            level=str)
    rl.advantage.name = "grpo"
    rl.loss = _options(agg=str, norm_length=float, tis_cap=float, tis_mode=str,
                       eps_low=float, eps_high=float, dual_clip=float, delta_low=float,
                       delta_high=float, keep_prob=float, mode=str)
    rl.loss.name = "ppo"
    rl.loss.entropy_coef = 0.0
    rl.kl = ml_collections.ConfigDict(
        {"kind": "k3", "coef": 0.0, "clamp": config_dict.placeholder(float),
         "in_reward": False})
    rl.reference = ml_collections.ConfigDict({"offload": False})
    rl.reweight = _options(c=float, form=str, gamma=float, clip_low=float, clip_high=float,
                           high_only=bool, neg_ratio_cap=float, ratio_mask=float, alpha=float,
                           divergence=str, quantile=float, start_step=int, method=str)
    rl.reweight.name = ""
    rl.overlong = ml_collections.ConfigDict({"buffer": 0, "factor": 1.0, "filter": False})
    rl.reward = _options(require_all=bool, format_score=float, pattern=str, max_chars=int,
                         answer_formats=str, search=str, fallback=bool)
    rl.reward.name = ""  # "" = the procedural task's own verifier
    rl.reward.correct = ""  # "" = the only verifier named
    rl.reward.workers = 2
    rl.reward.timeout_s = 5.0
    return rl


def data_section() -> ml_collections.ConfigDict:
    data = ml_collections.ConfigDict()
    data.source = "task"
    data.task = _options(num_numbers=int, max_number=int, max_target=int, digits=int, ops=str,
                         heldout_fraction=float, template=str, answer_template=str)
    data.task.name = "countdown"
    data.train_size = 1_000_000
    data.heldout_size = 200
    data.path = ""
    data.heldout_path = ""
    data.tfds_name = ""
    data.tfds_data_dir = ""
    data.tfds_split = "train"
    data.tfds_heldout_split = "test"
    data.template = "{prompt}"
    data.answer_field = "answer"
    data.uid_field = ""
    data.chat_template = False
    data.system_prompt = ""
    data.tokenizer = ""
    data.pass_rate_fields = ""
    data.selector = _options(schedule=str, n_max=int, normalized=bool, lam=float, rho=float,
                             tau=float, prior=float, target=float, thompson=bool,
                             cap_ema=float)
    data.selector.name = "uniform"
    return data


def sampling_section() -> ml_collections.ConfigDict:
    s = ml_collections.ConfigDict()
    s.sampler = "flat"
    s.n = 8
    s.temperature = 1.0
    s.top_k = 0
    s.top_p = 1.0
    s.min_p = 0.0
    s.max_new_tokens = 64
    s.page_size = 16
    s.segment_len = 64
    s.tree = _options(segment_len=int, max_depth=int, leaves_per_prompt=int,
                      first_branching=str, divergence=int, branch_policy=str,
                      policy_temperature=float, stop_on_boxed=bool, repetition_chars=int,
                      repetition_ngram=int, repetition_count=int, fallback=bool)
    return s


def train_section() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({
        "steps": 100, "prompts_per_step": 8, "epochs": 1, "minibatches": 1,
        "old_logp": "auto", "dynamic_sampling": False, "dynamic_max_rounds": 10,
        "logits_chunk": 256, "log_every": 1, "eval_every": 10, "export_every": 0,
        "warm_start": "", "tensorboard": True, "plot": True})


def rollout_section() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({"april": False, "over_provision": 2.0})


def optim_section(lr: float = 1e-6) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({
        "lr": lr, "schedule": "constant", "warmup_steps": 0, "b1": 0.9, "b2": 0.999,
        "eps": 1e-8, "weight_decay": 0.0, "grad_clip": 1.0, "end_lr_fraction": 0.0})


def eval_section() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({
        "size": 200, "k": "1,4", "n": 4, "temperature": 1.0, "batch_prompts": 64})


def sft_section() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({
        "steps": 500, "batch_size": 32, "lr": 1e-3, "warmup_steps": 20, "weight_decay": 0.0,
        "grad_clip": 1.0, "eval_every": 100})


def checkpoint_section() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({
        "every": 50, "keep": 3, "asynchronous": True, "snapshot_every": 10, "max_rollbacks": 3,
        "abandon_after_s": 20.0})


def fault_section() -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict({
        "enabled": False, "nan_at_step": 0, "raise_at_step": 0, "kill_at_step": 0,
        "term_at_step": 0, "times": 1})


def build(preset: str = "tiny") -> ml_collections.ConfigDict:
    """The unlocked base config with every section (for other config files to edit)."""
    config = ml_collections.ConfigDict()
    config.model = model_section(preset)
    config.mesh = mesh_section()
    config.rl = rl_section()
    config.data = data_section()
    config.sampling = sampling_section()
    config.train = train_section()
    config.rollout = rollout_section()
    config.optim = optim_section()
    config.eval = eval_section()
    config.sft = sft_section()
    config.checkpoint = checkpoint_section()
    config.fault = fault_section()
    config.seed = 0
    config.compilation_cache = "~/.cache/rlvr_jax/xla"
    config.cpu_xla_flags = CPU_XLA_FLAGS
    return config


def parse_arg(arg: str | None, default_preset: str = "tiny") -> tuple[str, list[str]]:
    """`"small,dapo"` -> ("small", ["dapo"]): each comma-separated token is a
    model preset or an algorithm variant (configs/variants.py)."""
    from configs import variants
    from models.config import PRESETS

    preset, chosen = default_preset, []
    for token in filter(None, (arg or "").split(",")):
        if token in PRESETS:
            preset = token
        elif token in variants.VARIANTS:
            chosen.append(token)
        else:
            raise ValueError(f"config argument {token!r} is neither a model preset "
                             f"({', '.join(sorted(PRESETS))}) nor an algorithm variant "
                             f"({', '.join(variants.VARIANTS)})")
    return preset, chosen


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The locked base config. `arg`: comma-separated model preset and/or variant."""
    from configs import variants

    preset, chosen = parse_arg(arg)
    config = build(preset)
    for name in chosen:
        variants.apply(config, name)
    config.lock()
    return config
