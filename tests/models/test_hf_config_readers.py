"""Exported config.json files read the same in transformers 5 (this venv) and 4.57 (the
compat copy `make test` installs in .venv/compat/transformers4, with the hub and
tokenizers versions it needs): RoPE theta and scaling included."""

import json
import os
import subprocess
import sys

import jax
import pytest
from transformers import AutoConfig

import models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPAT = os.path.join(ROOT, ".venv", "compat", "transformers4")
READ_V4 = """
import json, sys
import transformers
from transformers import AutoConfig
c = AutoConfig.from_pretrained(sys.argv[1])
print(json.dumps({"version": transformers.__version__, "theta": c.rope_theta,
                  "scaling": c.rope_scaling, "model_type": c.model_type,
                  "heads": c.num_key_value_heads}))
"""

CONFIGS = {
    # Qwen2.5's theta (1e6) is the one a 4.x reader lost: it read the default 10000
    "qwen2": dict(family="qwen2", rope_theta=1e6),
    "llama3": dict(family="llama", rope_theta=5e5, max_position_embeddings=256,
                   rope_scaling=models.RopeScaling("llama3", 8.0, 1.0, 4.0, 64)),
}


def _read_v4(path):
    if not os.path.isdir(os.path.join(COMPAT, "transformers")):
        pytest.fail(f"transformers 4.x is not in {COMPAT}: run `make install` (make test does)")
    env = dict(os.environ, PYTHONPATH=COMPAT, TRANSFORMERS_VERBOSITY="error")
    out = subprocess.run([sys.executable, "-c", READ_V4, str(path)], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_both_major_versions_read_the_export_alike(name, tmp_path):
    config = models.get_preset("tiny").replace(**CONFIGS[name])
    models.save_pretrained(tmp_path, config, models.init(config, jax.random.key(0)))
    v5 = AutoConfig.from_pretrained(tmp_path).rope_parameters
    v4 = _read_v4(tmp_path)
    assert v4["version"].startswith("4.")
    assert v5["rope_theta"] == v4["theta"] == config.rope_theta
    assert v4["model_type"] == config.family and v4["heads"] == config.num_kv_heads
    scaling = config.rope_scaling
    if scaling is None:
        assert v5["rope_type"] == "default" and v4["scaling"] is None
    else:
        for got in (v5, v4["scaling"]):
            assert got["rope_type"] == scaling.rope_type
            assert got["factor"] == scaling.factor
            assert (got["original_max_position_embeddings"]
                    == scaling.original_max_position_embeddings)
    back = models.read_config(tmp_path)  # and this project's reader, as before
    assert (back.rope_theta, back.rope_scaling) == (config.rope_theta, config.rope_scaling)
