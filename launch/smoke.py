"""Generation smoke test on the embedded default (no downloads).

Builds the policy from a config (the `tiny` preset unless told otherwise),
places it on the device mesh, checks that a Hugging Face export round-trips
bit-exactly, greedily decodes a batch of random prompts with the generation
engine (paged KV cache), checks the tokens against decoding by full
recomputation, and prints throughput. A quick check that a machine (or a
mesh of devices) runs the model; `make demo` is the RL demo (launch/demo.py).

    python -m launch.smoke
    python -m launch.smoke --config=configs/base.py:small --new_tokens=32
"""

from __future__ import annotations

import functools
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags

import models
import sampling
from launch.common import default_config_path, define_config_flag, run
from models import paths, sharding

_CONFIG = define_config_flag("base.py")
_BATCH = flags.DEFINE_integer("batch", 8, "Number of prompts.")
_PROMPT_LEN = flags.DEFINE_integer("prompt_len", 16, "Prompt length in tokens.")
_NEW_TOKENS = flags.DEFINE_integer("new_tokens", 16, "Tokens to generate per prompt.")


@functools.partial(jax.jit, static_argnums=(0, 3, 4))
def greedy(config, params, prompts, new_tokens: int, act):
    """Greedy decoding by full recomputation (no KV cache): the reference.

    prompts: [B, P] -> tokens [B, P + new_tokens].
    """
    b, p = prompts.shape
    buf = jnp.zeros((b, p + new_tokens), jnp.int32).at[:, :p].set(prompts)

    def step(i, buf):
        logits = models.apply(config, params, buf, sharding=act)
        nxt = jnp.argmax(logits[:, p + i - 1], axis=-1).astype(jnp.int32)
        return buf.at[:, p + i].set(nxt)

    return jax.lax.fori_loop(0, new_tokens, step, buf)


def main(argv):
    del argv
    cfg = _CONFIG.value
    config = models.from_config_section(cfg.model)
    mesh, rules = sharding.from_config_section(cfg.mesh)
    print(f"model: {cfg.model.hf_path or cfg.model.preset} ({config.family}, "
          f"{config.num_params() / 1e6:.2f}M params, {config.dtype})")
    print(f"mesh: {dict(mesh.shape)} on {jax.device_count()} {jax.devices()[0].platform} device(s)")

    if cfg.model.hf_path:
        _, params = models.load_pretrained(paths.cached(cfg.model.hf_path), config.weight_dtype,
                                           mesh=mesh, rules=rules)
    else:
        params = sharding.init_sharded(config, jax.random.key(cfg.seed), mesh, rules)
    with tempfile.TemporaryDirectory() as tmp:
        models.save_pretrained(tmp, config, params)
        _, reloaded = models.load_pretrained(tmp, config.weight_dtype)
    same = all(jax.tree.leaves(jax.tree.map(
        lambda a, b: bool(np.array_equal(np.asarray(a), np.asarray(b))), params, reloaded)))
    print(f"hugging face export round trip: {'exact' if same else 'MISMATCH'}")
    if not same:
        raise SystemExit(1)

    act = sharding.ActivationSharding(mesh, rules)
    rng = np.random.RandomState(cfg.seed)
    prompts = rng.randint(0, config.vocab_size, (_BATCH.value, _PROMPT_LEN.value))
    sp = sampling.SamplingParams(temperature=0.0, max_new_tokens=_NEW_TOKENS.value)
    for label in ("compile + first run", "steady run"):
        start = time.perf_counter()
        rollouts = sampling.generate(config, params, prompts.tolist(), 1, sp, jax.random.key(0))
        elapsed = time.perf_counter() - start
        print(f"engine {label}: {int(rollouts.lengths.sum()) / elapsed:,.0f} generated "
              f"tokens/s ({elapsed:.2f}s)")
    placed = jax.device_put(jnp.asarray(prompts, jnp.int32), act.batch_sharding(prompts.shape))
    reference = np.asarray(greedy(config, params, placed, _NEW_TOKENS.value, act))
    for r in range(len(rollouts)):
        if rollouts.completion(r) != reference[r, _PROMPT_LEN.value:][:rollouts.lengths[r]].tolist():
            print(f"engine and full recomputation differ on prompt {r}")
            raise SystemExit(1)
    print("engine tokens equal greedy decoding by full recomputation")
    print("sample continuation (token ids):", rollouts.completion(0))
    print("smoke: ok")


if __name__ == "__main__":
    run(main, default_config=default_config_path())
