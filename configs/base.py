"""Base config: every section every entry point shares, each key documented beside it.

    python -m launch.<entry> --config=configs/base.py:small \
        --config.model.dtype=bfloat16 --config.mesh.fsdp=4

`get_config(arg)` follows big_vision: `arg` (after the colon) is a comma-separated
model preset and/or algorithm variants (configs/variants.py). The returned
ConfigDict is locked, so overriding a key that does not exist fails with an error
naming it. Other config files start from `build(preset)` and edit it.

An option whose value is None keeps the default of the component it configures
(an estimator, a loss, a verifier, a task, a selector, the tree sampler); setting
an option the chosen component does not take is an error at start-up. Names,
formulas and sources of every algorithm component: docs/algorithms.md.
"""

import ml_collections
from ml_collections import config_dict

from configs import lora, multiturn, variants

ARCHITECTURE_FIELDS = {
    "vocab_size": int, "hidden_size": int, "num_layers": int, "num_heads": int,
    "num_kv_heads": int, "head_dim": int, "mlp_dim": int, "rope_theta": float,
    "rms_norm_eps": float, "tie_embeddings": bool, "max_position_embeddings": int,
}

# LLVM's loop-strength reduction is ~18% of XLA:CPU compile time here and buys
# W1 no runtime (launch/runtime.py, benchmarks/RESULTS.md).
CPU_XLA_FLAGS = "--xla_backend_extra_options=-disable-lsr"

# logical axis -> comma-separated mesh axes ("" = replicated); a copy of
# models.sharding's defaults (configs import no project code; a test checks they agree)
DEFAULT_SHARDING_RULES = {
    "batch": "data,fsdp", "length": "", "embed": "fsdp", "mlp": "tensor",
    "heads": "tensor", "kv_heads": "tensor", "head_dim": "", "vocab": "tensor",
    "layers": "", "norm": "",
}


def _options(**types) -> ml_collections.ConfigDict:
    """A section of typed options, all None (= the component's default)."""
    return ml_collections.ConfigDict(
        {name: config_dict.placeholder(kind) for name, kind in types.items()})


def model_section(preset: str = "tiny") -> ml_collections.ConfigDict:
    model = ml_collections.ConfigDict()
    model.preset = preset      # a models.PRESETS name; used when hf_path is empty
    model.hf_path = ""         # local Hugging Face directory: its config.json and weights
    # (a gs:// / s3:// one is downloaded once into $RLVR_CACHE, default ~/.cache/rlvr-jax)
    model.dtype = "float32"    # compute dtype: float32 | bfloat16 | float16
    model.param_dtype = "float32"  # parameter storage dtype
    model.scan_layers = True   # lax.scan over layers (compile time independent of depth);
    # False unrolls them, the sampler's decode too (faster or slower by shape: docs/sampling.md)
    model.remat = "none"       # backward rematerialisation: none | full | dots
    # vocab_size, hidden_size, num_layers, num_heads, num_kv_heads, head_dim, mlp_dim,
    # rope_theta, rms_norm_eps, tie_embeddings, max_position_embeddings: None keeps the
    # preset's / checkpoint's value, anything else overrides it
    for name, kind in ARCHITECTURE_FIELDS.items():
        model[name] = config_dict.placeholder(kind)
    return model


def mesh_section() -> ml_collections.ConfigDict:
    mesh = ml_collections.ConfigDict()
    mesh.data = -1   # data-parallel axis size; one axis may be -1 (= the remaining devices)
    mesh.fsdp = 1    # fully-sharded data-parallel axis size
    mesh.tensor = 1  # tensor-parallel axis size (heads, mlp, vocab)
    # rollout.mode one_step_off / async: this many devices (the same number from each
    # process) run the sampler on a mesh of their own (data over them, tensor as above),
    # the rest the learner's mesh above; 0 = the sampler shares the learner's devices
    mesh.rollout_devices = 0
    # rules.<logical axis>: the mesh axes it is split over, for batch, length, embed,
    # mlp, heads, kv_heads, head_dim, vocab, layers, norm ("" = replicated)
    mesh.rules = ml_collections.ConfigDict(dict(DEFAULT_SHARDING_RULES))
    return mesh


def rl_section() -> ml_collections.ConfigDict:
    """The algorithm, by name; None-valued options keep each component's default."""
    rl = ml_collections.ConfigDict()
    # advantage.name: the estimator (grpo, dr_grpo, rloo, reinforce_pp,
    # reinforce_pp_baseline, mc_grpo, tree, seeupo); the other keys are its options
    rl.advantage = _options(eps=float, ddof=int, std_scope=str, baseline=bool, gamma=float,
                            scale=str, depth_weighting=str, skip_zero_std=bool, whiten=bool,
                            level=str, clip=float, std_floor=float)
    rl.advantage.name = "grpo"
    # loss.name: the policy loss (ppo, gspo, gspo_token, nsr, cispo, bapo). Common to
    # every loss: agg (aggregation mode), norm_length (constant length of dr_grpo's
    # token sums), entropy_coef. The loss's own: eps_low, eps_high, dual_clip,
    # delta_low, delta_high, keep_prob, mode; bapo's: target (positive share of the
    # loss, 0.4), low_start / low_max / low_step (c_low: 0.6 to 0.9 by 0.02),
    # high_start / high_max / high_step (c_high: 1.2 to 3.0 by 0.05), dual_clip (3.0),
    # order (low_first | high_first), measure (code | paper)
    rl.loss = _options(agg=str, norm_length=float, eps_low=float, eps_high=float,
                       dual_clip=float, delta_low=float, delta_high=float, keep_prob=float,
                       mode=str, target=float, low_start=float, low_max=float,
                       low_step=float, high_start=float, high_max=float, high_step=float,
                       order=str, measure=str)
    rl.loss.name = "ppo"
    rl.loss.entropy_coef = 0.0  # weight of an entropy bonus in the loss (0 = none)
    # the behaviour weight π_old/π_behav against the sampler's log-probs (decoupled
    # PPO; docs/algorithms.md, "Off-policy correction")
    rl.off_policy = ml_collections.ConfigDict()
    # "" (off) | tis (truncate the weight to [floor, cap]) | mis (drop the tokens, or
    # rows, whose weight is outside [floor, cap]); None = set by the rollout mode
    # (tis for asynchronous rollouts, off otherwise)
    rl.off_policy.correction = config_dict.placeholder(str)
    # token (per-token weight) | sequence (exp of the row's summed log-ratio) |
    # geometric (exp of the row's mean log-ratio)
    rl.off_policy.level = "token"
    rl.off_policy.cap = 2.0  # upper bound C of the weight
    # lower bound; None = 0 for tis, 1/cap for mis
    rl.off_policy.floor = config_dict.placeholder(float)
    rl.kl = ml_collections.ConfigDict()
    rl.kl.kind = "k3"      # KL estimator against the reference: k1 | k2 | k3
    rl.kl.coef = 0.0       # its weight; 0 = no KL and no reference model
    rl.kl.clamp = config_dict.placeholder(float)  # clamp each token's estimate to ±clamp
    rl.kl.in_reward = False  # subtract the KL from the reward instead of adding it to the loss
    rl.reference = ml_collections.ConfigDict()
    # keep the frozen reference in host memory (each device's pinned_host, sharded like
    # the policy) and bring it to the devices only while it scores a batch
    rl.reference.offload = False
    # reweight.name: "" or a token reweighter (fipo, logp_reweight, divergence_weighted,
    # delta_logp_mask); the other keys are its options
    rl.reweight = _options(c=float, form=str, gamma=float, clip_low=float, clip_high=float,
                           high_only=bool, neg_ratio_cap=float, ratio_mask=float, alpha=float,
                           divergence=str, quantile=float, start_step=int, method=str)
    rl.reweight.name = ""
    rl.overlong = ml_collections.ConfigDict()
    # DAPO's soft overlong penalty: the last `buffer` tokens before the completion
    # limit cost up to -factor reward, linearly (0 = off)
    rl.overlong.buffer = 0
    rl.overlong.factor = 1.0
    rl.overlong.filter = False  # leave completions cut at the limit out of the loss
    # reward.name: a verifier (countdown, arithmetic, math, format) or several with
    # weights ("math:1.0,format:0.1"); "" = the procedural task's own verifier
    # (file and TFDS data must name one). The options (require_all, format_score,
    # pattern, max_chars, answer_formats, search, fallback) go to the verifier that
    # takes them.
    rl.reward = _options(require_all=bool, format_score=float, pattern=str, max_chars=int,
                         answer_formats=str, search=str, fallback=bool)
    rl.reward.name = ""
    # the verifier whose score >= 1 is "correct" (accuracy, pass@k, dynamic sampling);
    # "" = the only one named
    rl.reward.correct = ""
    # verifier processes for what leaves the trainer's process (the math verifier's
    # library fallback), in parallel; 0 or 1 = one
    rl.reward.workers = 2
    rl.reward.timeout_s = 5.0  # hard limit per completion in those processes
    rl.multiturn = multiturn.multiturn_section()
    return rl


def data_section() -> ml_collections.ConfigDict:
    data = ml_collections.ConfigDict()
    data.source = "task"  # where prompts come from: task | jsonl | parquet | tfds
    # task.name: a procedural task (countdown, arithmetic); the other keys are its options
    data.task = _options(num_numbers=int, max_number=int, max_target=int, digits=int, ops=str,
                         heldout_fraction=float, template=str, answer_template=str)
    data.task.name = "countdown"
    data.train_size = 1_000_000  # examples drawn from a task's train split
    data.heldout_size = 200      # a task's held-out examples; for files, a cap on the rows
    data.path = ""               # the train JSONL / Parquet file (source jsonl | parquet)
    data.heldout_path = ""       # the held-out file ("" = none)
    data.tfds_name = ""          # a prepared TFDS dataset, array_record format (source tfds)
    data.tfds_data_dir = ""      # its data directory ("" = TFDS's default)
    data.tfds_split = "train"
    data.tfds_heldout_split = "test"  # "" = none
    data.template = "{prompt}"   # how a file / TFDS row becomes a prompt (its fields by name)
    data.answer_field = "answer"  # the row field the verifier checks against
    data.uid_field = ""          # a row field that names the example ("" = its index)
    # render each prompt as a user message through the tokenizer's own chat template
    # (chat_template.jinja or tokenizer_config.json's, as transformers renders it),
    # assistant turn opened: for instruct checkpoints. Off: the raw text, after bos
    # when the tokenizer has one (base models)
    data.chat_template = False
    data.system_prompt = ""      # with chat_template: a system message first ("" = none)
    data.tokenizer = ""          # tokenizer directory; "" = model.hf_path, else the byte tokenizer
    # "weak,strong": two fields of each jsonl/parquet row holding offline pass rates in
    # [0, 1] (BOTS's implicit evidence)
    data.pass_rate_fields = ""
    # selector.name: which prompts a step trains on and how many rollouts each gets:
    # uniform (the data order) | dars (extra rollouts for hard prompts; options
    # schedule et|hw, n_max, normalized) | bots (Thompson selection from Beta
    # pass-rate posteriors over the train pool; lam, rho, tau, prior, target,
    # thompson, cap_ema)
    data.selector = _options(schedule=str, n_max=int, normalized=bool, lam=float, rho=float,
                             tau=float, prior=float, target=float, thompson=bool,
                             cap_ema=float)
    data.selector.name = "uniform"
    return data


def sampling_section() -> ml_collections.ConfigDict:
    s = ml_collections.ConfigDict()
    s.sampler = "flat"     # flat | tree | latr (flat with LATR trees: docs/sampling.md)
    s.n = 8                # samples per prompt (flat; the tree has tree.leaves_per_prompt)
    s.temperature = 1.0
    s.top_k = 0            # 0 = off
    s.top_p = 1.0          # 1.0 = off
    s.min_p = 0.0          # 0.0 = off
    s.max_new_tokens = 64  # the completion limit
    s.page_size = 16       # tokens per KV-cache page (flat and tree)
    s.segment_len = 64     # flat: tokens per decode call, a multiple of page_size
    # tree.<field>: sampling.TreeConfig's fields (None = its default). first_branching
    # is "4" or a range "2,8". A leaf has at most tree.segment_len × tree.max_depth
    # tokens, which may not exceed max_new_tokens; segment_len unset = max_new_tokens
    # // max_depth (a multiple of page_size). stop_on_boxed and repetition_chars act on
    # the detokenized text; repetition_ngram is the token check used without a tokenizer
    s.tree = _options(segment_len=int, max_depth=int, leaves_per_prompt=int,
                      first_branching=str, divergence=int, branch_policy=str,
                      policy_temperature=float, stop_on_boxed=bool, repetition_chars=int,
                      repetition_ngram=int, repetition_count=int, fallback=bool)
    # latr.<field>: sampling.LatrConfig's fields (None = the authors' default);
    # mix_schedule "step:ratio,..." is the share of n grown as a tree from each training
    # step on (default 0:1,10:0.75,20:0.5,80:0.25,200:0); lookahead is "20,30,50"
    s.latr = _options(mix_schedule=str, abs_threshold=float, rel_threshold=float,
                      lookahead=str, prune_distance=float, fill_init=float, fill_decay=float,
                      max_steps=int, keep_math_symbols=bool)
    # speculative: the flat sampler drafts and verifies several tokens per forward, exactly
    # the policy's distribution (docs/sampling.md). enable=True turns it on; the other
    # fields are sampling.SpecConfig's (None = its default): draft_len, drafter (ngram |
    # model), ngram_max/min/rows (the n-gram drafter), max_rows (speculate once at most this
    # many rows run; 0 = always), min_tokens_per_forward (a call below it turns the rest of
    # its generate plain); draft_model (drafter=model): layers:N (the policy's first N
    # layers) or a Hugging Face checkpoint directory with the policy's vocabulary
    s.speculative = _options(enable=bool, draft_len=int, drafter=str, ngram_max=int,
                             ngram_min=int, ngram_rows=int, max_rows=int,
                             min_tokens_per_forward=float, draft_model=str)
    return s


def train_section() -> ml_collections.ConfigDict:
    t = ml_collections.ConfigDict()
    t.steps = 100            # RL steps
    t.prompts_per_step = 8   # prompt groups a step trains on
    t.epochs = 1             # PPO epochs over each batch
    # optimizer steps per epoch, each on whole prompt groups (must divide
    # prompts_per_step). With epochs × minibatches = 1 the update is on-policy (ratio 1):
    # clip settings, gspo, nsr, cispo and fipo would do nothing and are refused
    t.minibatches = 1
    # π_old: auto (sampler in float32, recompute otherwise: in bfloat16 the sampler's and
    # the learner's log-probs differ by rounding, docs/sampling.md) | sampler (needs
    # top_k / top_p / min_p off) | recompute (a forward pass before the update; with
    # top_k / top_p / min_p on it needs rl.off_policy.correction tis or mis) |
    # interpolate (no forward pass: AReaL's log-linear mix of the sampler's and the
    # current log-probs by each token's policy version; needs top_k / top_p / min_p off)
    t.old_logp = "auto"
    # DAPO's filter: drop groups whose rewards all agree and sample more prompts, up to
    # dynamic_max_rounds rounds, to refill the batch
    t.dynamic_sampling = False
    t.dynamic_max_rounds = 10
    t.logits_chunk = 256     # completion positions per logits block in the learner
    t.log_every = 1          # console progress line period (metrics.jsonl has every step)
    t.eval_every = 10        # held-out eval period (0 = none during training; one at the end)
    # also export the policy as DIR/exports/step_N every N steps (0 = none; DIR/final is
    # always written)
    t.export_every = 0
    # "" | sft: first run the supervised warm start (sft.*, procedural tasks), written to
    # DIR/sft and reused by a rerun with the same model, data, sft settings and seed
    t.warm_start = ""
    t.tensorboard = True     # write DIR/tensorboard (the `tensorboard` extra)
    t.plot = True            # write DIR/progress.png (the `plots` extra)
    return t


def rollout_section() -> ml_collections.ConfigDict:
    r = ml_collections.ConfigDict()
    # sync: each step samples, then learns | one_step_off: the sampler makes the next
    # step's batch with the policy one version behind while the learner trains |
    # async: the sampler runs rollout.max_staleness versions ahead with
    # rollout.over_provision × prompts_per_step groups in flight, stops each call once
    # prompts_per_step groups have finished and carries the others into the next call,
    # under the newer policy (docs/training.md, "Asynchronous rollouts")
    r.mode = "sync"
    # async: η, how many policy versions the sampler runs behind the learner (a batch's
    # prompts start once the learner has reached its step - 1 - η; carried samples end
    # older); no new prompt is admitted while a carried sample began more than η
    # versions earlier. 0 = the synchronous schedule
    r.max_staleness = 1
    # async: what a carried sample's KV pages become under the new policy: recompute
    # (prefilled again by the new version, AReaL's) | keep (the old version's pages and
    # last hidden state are kept; the next tokens come from the new version)
    r.kv_on_update = "recompute"
    # APRIL, active partial rollouts (flat sampling): ask for more prompt groups than a
    # step trains on, stop the sampler once prompts_per_step groups have finished, carry
    # the unfinished samples (with the log-probs of the policy that sampled each token)
    # and the surplus finished groups to the next step
    r.april = False
    # APRIL and rollout.mode=async: groups in flight per call / prompts_per_step (>= 1)
    r.over_provision = 2.0
    # multi-turn episodes (docs/tools.md): the policy's turns, each answered by the `env`
    # section's tools (0 = single-turn); tokens per turn (0 = sampling.max_new_tokens,
    # which is the whole episode's budget: turns and tool replies)
    r.max_turns = 0
    r.max_turn_tokens = 0
    return r


def optim_section(lr: float = 1e-6) -> ml_collections.ConfigDict:
    o = ml_collections.ConfigDict()
    o.lr = lr                 # AdamW peak learning rate
    o.schedule = "constant"   # after warmup: constant | linear | cosine
    o.warmup_steps = 0        # linear warmup from 0 (optimizer steps)
    o.b1 = 0.9
    o.b2 = 0.999
    o.eps = 1e-8
    o.weight_decay = 0.0      # decoupled, on matrices only
    o.grad_clip = 1.0         # global-norm clip (0 = off)
    o.end_lr_fraction = 0.0   # linear / cosine: the final lr as a fraction of lr
    return o


def eval_section() -> ml_collections.ConfigDict:
    e = ml_collections.ConfigDict()
    e.size = 200           # held-out prompts (greedy accuracy, pass@k)
    e.k = "1,4"            # pass@k for each k
    e.n = 4                # samples per prompt for pass@k
    e.temperature = 1.0    # their sampling temperature
    e.batch_prompts = 64   # prompts per generation call
    return e


def sft_section() -> ml_collections.ConfigDict:
    s = ml_collections.ConfigDict()
    s.steps = 500          # supervised warm start (train.warm_start=sft, launch.sft)
    s.batch_size = 32
    s.lr = 1e-3            # AdamW, linear warmup then cosine decay to lr / 10
    s.warmup_steps = 20
    s.weight_decay = 0.0
    s.grad_clip = 1.0
    s.eval_every = 100     # held-out eval period (0 = only before and after)
    # a directory of finished warm starts shared by runs ("" = off): a run whose warm
    # start (same model, data, sft settings, seed) is there loads it instead of training
    # one, and a run that trains one leaves it there; launch.sweep sets it. A folder or
    # gs:// / s3:// URI; its file lock orders the runs of one machine (in a bucket, the
    # lock is in this machine's temp folder: runs on different machines are not ordered)
    s.shared_dir = ""
    return s


def checkpoint_section() -> ml_collections.ConfigDict:
    c = ml_collections.ConfigDict()
    # an Orbax checkpoint (params, optimizer, step, PRNG keys, data position, selector
    # state) in DIR/checkpoints every N steps and at the end (0 = only at the end and on
    # preemption); a rerun on the same DIR resumes from the newest usable one
    c.every = 50
    # also a checkpoint once this many seconds of training have passed since the last one
    # (0 = off): bounds the work a preemption loses when steps are long. Every process
    # saves the same step (process 0's clock decides, at the end of a step)
    c.every_s = 0.0
    c.keep = 3               # checkpoints kept (older ones are deleted)
    c.asynchronous = True    # write in the background (the step waits only for the copy)
    # copy the state to host memory every N steps (0 = only at the start); a failed step
    # (an exception, a non-finite loss or gradient norm) restores the newest snapshot,
    # replays the steps after it and skips the batch the failed step consumed. One copy of
    # params + optimizer state costs 1-2.5% of a W1 step on a CPU
    c.snapshot_every = 10
    c.max_rollbacks = 3      # this many failed steps in a row stop the run (exit 1)
    # after SIGTERM / SIGINT the running step may finish for this long; then (or on a
    # second signal) it is abandoned and the newest snapshot saved (0 = always finish it)
    c.abandon_after_s = 20.0
    return c


def fault_section() -> ml_collections.ConfigDict:
    f = ml_collections.ConfigDict()
    f.enabled = False        # fault injection, for tests; the keys below are refused without it
    f.nan_at_step = 0        # that step's advantages are NaN (0 = off)
    f.raise_at_step = 0      # that step raises after its rollout
    f.kill_at_step = 0       # SIGKILL to itself after that step's rollout
    f.term_at_step = 0       # SIGTERM to itself there (a preemption)
    # SIGKILL to itself at the end of that step, once its checkpoint write (with
    # checkpoint.every or every_s due there) has started: an asynchronous write is in flight
    f.kill_after_step = 0
    f.times = 1              # consecutive attempts of that step the nan / raise fault hits
    f.process = -1           # the process the faults hit in a multi-process run (-1 = every one)
    return f


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
    config.env = multiturn.env_section()
    config.lora = lora.lora_section()
    config.seed = 0  # data order, sampling and minibatch shuffles
    # JAX's persistent compilation cache for the launch/ entry points ("" = off): a rerun
    # with the same shapes loads its XLA executables instead of compiling them
    config.compilation_cache = "~/.cache/rlvr_jax/xla"
    # flags the entry points add to XLA_FLAGS when JAX runs on the CPU only ("" = none; a
    # flag already in XLA_FLAGS keeps the user's value): no loop-strength reduction, the
    # update compiles ~25% faster at equal speed
    config.cpu_xla_flags = CPU_XLA_FLAGS
    return config


def parse_arg(arg: str | None, default_preset: str = "tiny") -> tuple[str, list[str]]:
    """`"small,dapo"` -> ("small", ["dapo"]): each comma-separated token is an algorithm
    variant (configs/variants.py) or else a model preset, at most one (the entry points
    check the preset's name before any compute)."""
    presets, chosen = [], []
    for token in filter(None, (arg or "").split(",")):
        (chosen if token in variants.VARIANTS else presets).append(token)
    if len(presets) > 1:
        raise ValueError(f"config argument names {len(presets)} model presets "
                         f"({', '.join(presets)}); algorithm variants are "
                         f"{', '.join(variants.VARIANTS)}")
    return (presets[0] if presets else default_preset), chosen


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """The locked base config. `arg`: comma-separated model preset and/or variant."""
    preset, chosen = parse_arg(arg)
    config = build(preset)
    for name in chosen:
        variants.apply(config, name)
    config.lock()
    return config
