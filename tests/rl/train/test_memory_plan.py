"""rl.train.memory_plan: each term against a hand formula, the plan against measured peaks
(the command line: test_plan_cli.py)."""

import dataclasses
import math
import os
import re

import jax
import numpy as np
import pytest

import sampling
from configs import base
from models import params as params_lib
from models import sharding
from rl.train import build, memory_plan
from rl.train import learner as learner_lib
from rl.train.batch import assemble
from rl.train.build import optimizer_for
from sampling import engine

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SMALL_STEP = {"train.prompts_per_step": 2, "sampling.n": 2, "sampling.max_new_tokens": 16,
              "sampling.segment_len": 16, "train.logits_chunk": 16}
LAYOUTS = {"1 device": (1, 1, 1), "2x2x2": (2, 2, 2)}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("plan"))


def make_run(workdir, preset="tiny", mesh=(1, 1, 1), **overrides):
    """A resolved run of configs/base.py with a small step, placed on a `mesh` of the
    first devices (data, fsdp, tensor)."""
    cfg = base.get_config(preset)
    for key, value in {**SMALL_STEP, **overrides}.items():
        *path, last = key.split(".")
        node = cfg
        for part in path:
            node = node[part]
        node[last] = value
    run = build.resolve(cfg, workdir)
    m = sharding.make_mesh(mesh, devices=jax.devices()[:math.prod(mesh)])
    return dataclasses.replace(run, mesh=m, act=sharding.ActivationSharding(m, run.rules))


def rows_split(rows, d, f):
    """How the batch rule (data, fsdp) splits `rows`: axes dropped from the right until
    their product divides it."""
    return d * f if rows % (d * f) == 0 else d if rows % d == 0 else 1


# ---------------------------------------------------------------- (a) each term by hand


def hand_params(c, d, f, t):
    """Elements per device of tiny-shaped params (qwen2, tied) on a (d, f, t) mesh: embed
    dims over fsdp, heads / kv heads / mlp / vocab over tensor when divisible, norms and
    layers whole; data splits no parameter."""
    L, D, F, H, K, Dh, V = (c.num_layers, c.hidden_size, c.mlp_dim, c.num_heads,
                            c.num_kv_heads, c.head_dim, c.vocab_size)
    kt = t if K % t == 0 else 1
    return ((V // t) * (D // f) + D + 2 * L * D                      # embed, final and layer norms
            + L * (D // f) * (H // t) * Dh + 2 * L * (D // f) * (K // kt) * Dh   # q, k, v
            + L * (H // t) * Dh * (D // f)                           # o
            + 3 * L * (D // f) * (F // t)                            # gate, up, down
            + L * (H // t) * Dh + 2 * L * (K // kt) * Dh)            # q/k/v biases


def hand_gathered_block(c, t):
    """Elements per device of tiny's larger layer block as FSDP gathers it (embed whole):
    attention (its norm, q, k, v, o and biases) or MLP (its norm, gate, up, down)."""
    D, F, H, K, Dh = c.hidden_size, c.mlp_dim, c.num_heads, c.num_kv_heads, c.head_dim
    kt = t if K % t == 0 else 1
    attention = (D + 2 * D * (H // t) * Dh + 2 * D * (K // kt) * Dh
                 + (H // t) * Dh + 2 * (K // kt) * Dh)
    return max(attention, D + 3 * D * (F // t))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_params_optimizer_gradients_update_by_hand(workdir, layout):
    d, f, t = LAYOUTS[layout]
    run = make_run(workdir, mesh=(d, f, t))
    plan = memory_plan.plan(run, prompt_len=40)
    params = 4 * hand_params(run.model_config, d, f, t)
    assert plan.params == params
    assert plan.optimizer == 2 * params + 8  # fp32 mu, nu and two int32 step counts
    assert plan.gradients == plan.update == params
    assert plan.reference == 0  # grpo without a KL keeps no reference
    with_kl = memory_plan.plan(make_run(workdir, mesh=(d, f, t), **{"rl.kl.coef": 0.1}),
                               prompt_len=40)
    assert with_kl.reference == params
    offloaded = memory_plan.plan(make_run(workdir, mesh=(d, f, t), **{
        "rl.kl.coef": 0.1, "rl.reference.offload": True}), prompt_len=40)
    assert offloaded.reference == 0 and offloaded.total < with_kl.total
    assert "rl.reference.offload=True" in memory_plan.advice("reference", with_kl.settings)


@pytest.mark.parametrize("mesh", [(1, 1, 1), (2, 2, 2), (1, 4, 2), (8, 1, 1), (1, 2, 4)])
@pytest.mark.parametrize("preset,dtype", [("tiny", "float32"), ("small", "bfloat16")])
def test_param_shards_equal_the_real_shardings(workdir, mesh, preset, dtype):
    """Per-device bytes from mesh sizes alone equal the max over devices of each leaf's
    shard under `models.sharding.param_shardings` on a real mesh (tensor=4 leaves tiny's
    2 kv heads replicated)."""
    overrides = {"model.param_dtype": dtype}
    run = make_run(workdir, preset, mesh=mesh, **overrides)
    shapes = params_lib.param_shapes(run.model_config)
    shards = sharding.param_shardings(run.model_config, run.mesh, run.rules)

    def largest_shard(x, s):
        return max(math.prod(len(range(*i.indices(n))) for i, n in zip(index, x.shape))
                   for index in s.devices_indices_map(x.shape).values()) * x.dtype.itemsize

    real = sum(map(largest_shard, jax.tree.leaves(shapes), jax.tree.leaves(shards)))
    assert memory_plan.plan(run, prompt_len=40).params == real
    sizes = dict(zip(sharding.MESH_AXES, mesh))  # planned from sizes, on a one-device run
    assert memory_plan.plan(make_run(workdir, preset, **overrides), prompt_len=40,
                            mesh_sizes=sizes).params == real


@pytest.mark.parametrize("layout", LAYOUTS)
def test_kv_pool_and_decode_weights_by_hand(workdir, layout):
    d, f, t = LAYOUTS[layout]
    run = make_run(workdir, mesh=(d, f, t))
    c = run.model_config
    L, D, K, Dh, V = (c.num_layers, c.hidden_size, c.num_kv_heads, c.head_dim,
                      c.vocab_size)
    kt = t if K % t == 0 else 1
    plan = memory_plan.plan(run, prompt_len=40)
    # 2 prompts of <= 40 tokens in 16-token pages: 3 pages, bucketed to 4; 2 samples each;
    # one 16-token segment of 1 page each. Each of the s = data × fsdp shards holds its
    # prompts (ceil(2 / s)), their rows and their pages, and a null page of its own:
    s = d * f
    mine = -(-2 // s)
    rows = engine.row_bucket(mine * 2)  # per shard
    pages = 1 + mine * 4 + rows * 1
    width = 16
    pool = 2 * L * pages * (K // kt) * Dh * 16 * 4
    tails = 2 * L * rows * (K // kt) * Dh * width * 4
    step = 2 * L * rows * (K // kt) * Dh * 4
    logits = 2 * rows * (V // t) * 4
    assert plan.shapes["kv_pages"] == s * pages and plan.shapes["decode_rows"] == s * rows
    assert plan.kv_pool == pool + tails + step + logits
    if f == 1:  # the tied embedding transposed, where it is; the layer read in place
        assert plan.decode_weights == 4 * D * (V // t)  # not fused
    else:  # FSDP: the head and one layer block gathered (embed whole), not live together; the
        # lookup reads the table's own shards (`models.transformer.embed_tokens`)
        layer = hand_gathered_block(c, t)  # the larger block of one layer, embed whole
        assert memory_plan.gathered_layer(run, {"data": d, "fsdp": f, "tensor": t}, 4) == (
            4 * layer)
        assert plan.decode_weights == 4 * max(D * (V // t), layer)
        assert plan.prefill >= 4 * layer


def test_tree_pool_by_hand(workdir):
    run = make_run(workdir, **{"sampling.sampler": "tree", "sampling.tree.max_depth": 2,
                               "sampling.tree.leaves_per_prompt": 4, "rl.advantage.name": "tree",
                               "sampling.max_new_tokens": 32})
    c = run.model_config
    plan = memory_plan.plan(run, prompt_len=40)
    # segments of 32 // 2 = 16 tokens (1 page); 2 prompts of 4 prompt pages and 4 leaves of
    # 2 segments each, the rows of a round: the 8 leaves at most
    seg = run.tree.segment_len
    assert seg == 16
    pages = 1 + 2 * (4 + 4 * 2 * 1)
    rows = 2 * 4
    assert plan.shapes["kv_pages"] == pages and plan.shapes["decode_width"] == seg
    kv = c.num_layers * c.num_kv_heads * c.head_dim * 4
    assert plan.kv_pool == (2 * kv * pages * 16 + 2 * kv * rows * seg + 2 * kv * rows
                            + 2 * rows * c.vocab_size * 4)


def hand_activations(c, d, f, t, remat, p=2, g=2, cl=16, tp=48, chunk=16, big_p=2):
    """The learner's activation bytes per device for tiny (module docstring), written out:
    p groups of g samples, cl completion tokens, tp prompt slots."""
    L, D, F, H, K, Dh, V = (c.num_layers, c.hidden_size, c.mlp_dim, c.num_heads,
                            c.num_kv_heads, c.head_dim, c.vocab_size)
    kt = t if K % t == 0 else 1
    s, n = cl - 1, p * g
    lg = tp + g * s
    bp, bn = rows_split(p, d, f), rows_split(n, d, f)
    # [p, lg, D]: the batch rule keeps data (and fsdp when p allows), embed takes fsdp when
    # the batch left it free: rows over data when they divide, D over fsdp
    tok_d = p * lg * D // ((d if p % d == 0 else 1) * f)
    tok_f = p * lg * F // (bp * t)
    heads = p * lg * H * Dh // (bp * t)
    kvh = p * lg * K * Dh // (bp * kt)
    r = 4 * (5 * tok_f + 6 * tok_d + 2 * heads + 2 * p * tp * K * Dh // (bp * kt)
             + 2 * n * (tp + s) * K * Dh // (bn * kt))
    r += 2 * 4 * (H // t) * ((p // bp) * tp * tp + (n // bn) * s * (tp + s))
    saved = {"none": r, "full": 4 * tok_d,
             "dots": 4 * (heads + 2 * kvh + 3 * tok_d + 2 * tok_f)}[remat]
    # one fp32 logits block, the tied head's fp32 gradient [D, V] (vocab over tensor),
    # the output matrix (the tied table) gathered under FSDP, the [N, C, D] hidden states
    head = (n * chunk * V * 4 // (bn * t) + D * (V // t) * 4 + (4 * (V // t) * D if f > 1 else 0)
            + 3 * n * cl * D * 4 // ((d if n % d == 0 else 1) * f))
    # one layer's weights at use: gathered with embed whole under FSDP, else read in place
    layer = 4 * hand_gathered_block(c, t) if f > 1 else 0
    rows = big_p * g
    batch = (rows * cl * 17 // rows_split(rows, d, f)
             + big_p * (tp + 1) * 4 // rows_split(big_p, d, f))
    return L * saved + max(head, r) + layer, batch


@pytest.mark.parametrize("remat", ["none", "full", "dots"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_activations_by_hand(workdir, layout, remat):
    d, f, t = LAYOUTS[layout]
    run = make_run(workdir, mesh=(d, f, t), **{"model.remat": remat})
    plan = memory_plan.plan(run, prompt_len=40)
    acts, batch = hand_activations(run.model_config, d, f, t, remat)
    assert plan.activations == acts + batch
    assert plan.shapes["learner_tokens"] == 2 * (48 + 2 * 15)


def test_the_total_is_the_peak_of_the_phases_not_the_sum(workdir):
    plan = memory_plan.plan(make_run(workdir), prompt_len=40)
    sampler = plan.kv_pool + max(plan.decode_weights, plan.prefill)
    learner = plan.gradients + max(plan.activations, plan.update)
    assert plan.total == plan.params + plan.optimizer + plan.reference + max(sampler, learner)
    assert plan.total < sum(getattr(plan, t) for t in memory_plan.PERSISTENT
                            + memory_plan.SAMPLER + memory_plan.LEARNER)
    table = plan.format("tpu-v5e")
    for term in ("params", "optimizer", "reference", "kv_pool", "decode_weights", "prefill",
                 "gradients", "activations", "update", "total"):
        assert re.search(rf"^{term} +\d", table, re.M), table
    assert table.splitlines()[-1].endswith(": fits")
    plan.check("tpu-v5e")  # a few MiB: fits


def test_check_names_the_largest_term_and_its_setting(workdir):
    plan = memory_plan.plan(make_run(workdir, "small"), prompt_len=40)
    tight = dataclasses.replace(plan, activations=20 * memory_plan.GiB)
    with pytest.raises(ValueError) as e:
        tight.check("tpu-v5e")
    assert "largest term is activations" in str(e.value) and "model.remat=full" in str(e.value)
    assert "\n" not in str(e.value)
    big = dataclasses.replace(plan, optimizer=20 * memory_plan.GiB)
    with pytest.raises(ValueError, match=r"largest term is optimizer .*raise mesh.fsdp"):
        big.check("tpu-v5e")
    with pytest.raises(ValueError, match="unknown accelerator 'tpu-v9'"):
        plan.check("tpu-v9")


def test_compiled_figures_replace_the_sampler_and_learner(workdir):
    """`with_compiled` (launch.plan --compiled): sampler = pool + max(decode, prefill
    temps) and learner = update temps, XLA's; the state stays planned."""
    plan = memory_plan.plan(make_run(workdir, "small"), prompt_len=40)
    xla = dict(kv_pool=3 * memory_plan.MiB, decode=5 * memory_plan.MiB,
               prefill=7 * memory_plan.MiB, learner=9 * memory_plan.MiB)
    got = plan.with_compiled(xla, "launch.compile for v5e-4 (f.json)")
    assert got.sampler == 10 * memory_plan.MiB and got.learner == 9 * memory_plan.MiB
    assert got.total == plan.persistent + 10 * memory_plan.MiB
    assert got.peak_terms() == memory_plan.PERSISTENT + ("kv_pool", "prefill")
    table = got.format("tpu-v5e")
    assert re.search(r"^prefill temps \(compiled\) +7\.0 MiB .*sampler", table, re.M), table
    assert re.search(r"^update temps \(compiled\) .*\(not at the peak\)$", table, re.M)
    assert re.search(r"^activations .*\(estimate; XLA's below\)$", table, re.M)
    assert "compiled figures: launch.compile for v5e-4 (f.json)" in table
    big = got.with_compiled(dict(xla, learner=20 * memory_plan.GiB), "x")
    with pytest.raises(ValueError, match=r"largest term is update temps \(compiled\) "
                                         r"\(20\.00 GiB\): .*train.minibatches"):
        big.check("tpu-v5e")
    with pytest.raises(ValueError, match="compiled figures need"):
        plan.with_compiled(dict(learner=1), "x")


def test_preflight_prints_the_plan_and_refuses_a_step_that_cannot_fit(workdir, capsys):
    plan = memory_plan.preflight(make_run(workdir), "local")
    out = capsys.readouterr().out
    assert f"{memory_plan.size(plan.total)}" in out and out.rstrip().endswith(": fits"), out
    assert memory_plan.capacity("local") * jax.local_device_count() <= (
        memory_plan.ACCELERATORS["cpu"])  # CPU devices share the host's RAM
    with pytest.raises(ValueError, match=r"^the step needs .* tpu-v5e has 16.00 GiB; the "
                                         r"largest term is \w+ \("):
        memory_plan.preflight(make_run(workdir, "llama3.1-8b"), "tpu-v5e")
    assert capsys.readouterr().out.rstrip().endswith(": does NOT fit")


def test_mesh_sizes_from_a_section():
    assert memory_plan.mesh_sizes({"data": -1, "fsdp": 2, "tensor": 2}, 16) == {
        "data": 4, "fsdp": 2, "tensor": 2}
    assert memory_plan.mesh_sizes({"data": 2, "fsdp": 2, "tensor": 2}, 8)["tensor"] == 2
    with pytest.raises(ValueError):
        memory_plan.mesh_sizes({"data": 2, "fsdp": 2, "tensor": 2}, 16)
    with pytest.raises(ValueError):
        memory_plan.mesh_sizes({"data": -1, "fsdp": 3, "tensor": 1}, 8)


# ---------------------------------------------------------------- (b) against measurement


def live_bytes(device) -> int:
    """Bytes of every live jax array's shard on `device`, each buffer once (a shard's
    `.data` view of a multi-device array is itself a live array on the same buffer)."""
    seen = {}
    for a in jax.live_arrays():
        for shard in a.addressable_shards:
            if shard.device == device:
                seen[shard.data.unsafe_buffer_pointer()] = shard.data.nbytes
    return sum(seen.values())


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_plan_is_within_25_percent_of_the_measured_peak(workdir, monkeypatch, preset):
    """The planned total against the measured peak of a trainer-like step on one CPU device.

    CPU devices report no memory_stats, so the peak is measured per phase as: the bytes of
    all live jax arrays on the device (`live_bytes`, taken right after the phase's program
    returns, its outputs still held) plus that program's XLA temp allocation
    (`jitted.lower(same arguments).compile().memory_analysis().temp_size_in_bytes`). The
    phases are Trainer.step's: every prefill and decode program `sampling.generate` runs
    (on the run's mesh, as the trainer calls it; both programs wrapped to measure them),
    then the learner's compiled `train_step` (donated state).
    Measured peak = max over the phases; the persistent state (params, AdamW state) is
    checked exactly, before any phase.
    """
    run = make_run(workdir, preset)
    plan = memory_plan.plan(run)
    cfg, dev = run.cfg, jax.devices()[0]
    learner = learner_lib.Learner(
        run.model_config, run.algorithm, optimizer_for(cfg), run.act,
        epochs=cfg.train.epochs, minibatches=cfg.train.minibatches,
        temperature=run.sampling_params.temperature,
        logits_chunk=min(cfg.train.logits_chunk, run.completion_len))
    before = live_bytes(dev)  # whatever earlier tests of this process still hold
    state = learner.init_state(build.init_params(run), jax.random.key(1))
    persistent = live_bytes(dev) - before
    assert abs(persistent - plan.persistent) <= 64  # + the update counter and PRNG key
    phases = []
    prefill, decode = engine.prefill, engine._decode_program

    def measured_prefill(*args, **kwargs):  # the prefill program, as the sampler calls it
        out = prefill(*args, **kwargs)
        temp = prefill.lower(*args, **kwargs).compile().memory_analysis().temp_size_in_bytes
        phases.append(("prefill", live_bytes(dev) - before, temp))
        return out

    def measured_decode(*args):  # the decode program, with the arguments it is given
        program = jax.jit(engine._decode, static_argnums=(0, 7, 8, 9, 10, 11),
                          donate_argnums=(2,),
                          compiler_options=engine.decode_options(jax.default_backend()))
        temp = program.lower(*args).compile().memory_analysis().temp_size_in_bytes
        out = decode(*args)  # donates the cache
        phases.append(("decode", live_bytes(dev) - before, temp))
        return out

    monkeypatch.setattr(engine, "prefill", measured_prefill)
    monkeypatch.setattr(engine, "_decode_program", measured_decode)
    prompts = [run.encode_prompt(run.train_source[i].prompt)
               for i in range(cfg.train.prompts_per_step)]
    rollouts = sampling.generate(run.model_config, state.params, prompts, run.samples_drawn,
                                 run.sampling_params, jax.random.key(0),
                                 page_size=cfg.sampling.page_size,
                                 segment_len=cfg.sampling.segment_len, sharding=run.act)
    completions = [list(rollouts.tokens[i, :rollouts.lengths[i]]) for i in range(len(rollouts))]
    seqs = assemble(prompts, completions, group_size=run.samples_per_prompt,
                    groups=cfg.train.prompts_per_step, completion_len=run.completion_len,
                    sampler_logp=list(rollouts.logprobs))
    shape = seqs.mask.shape
    batch = learner.place(seqs.learner_inputs() | {
        "advantages": np.ones(shape, np.float32), "old_logp": seqs.sampler_logp,
        "ref_logp": np.zeros(shape, np.float32)})
    temp = learner.lower_update(state, batch).compile().memory_analysis().temp_size_in_bytes
    state, metrics = learner.train_step(state, batch)
    jax.block_until_ready(metrics)
    phases.append(("learner", live_bytes(dev) - before, temp))
    assert {name for name, *_ in phases} == {"prefill", "decode", "learner"}
    measured = max(live + temp for _, live, temp in phases)
    detail = (f"{preset}: planned {plan.total} vs measured {measured} (phases: "
              + ", ".join(f"{n} {live - persistent}+{temp}" for n, live, temp in phases)
              + f"; persistent {persistent})\n{plan.format()}")
    print(detail)  # pytest -s shows the comparison
    assert abs(plan.total - measured) <= 0.25 * measured, detail

