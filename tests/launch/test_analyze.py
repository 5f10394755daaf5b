"""`launch.analyze` end to end, in real processes: on Hugging Face directory pairs the test
writes (random tiny qwen2 and llama models with the byte tokenizer), and on two Orbax
checkpoints of a training workdir; bad input fails with one line before any compute.

The prompts, references and verifier come from tests/rl/fault_config.py (one-digit
arithmetic, a format reward that some random completions earn).
"""

import json
import os

import jax
import numpy as np
import pytest

import models
from models.byte_tokenizer import save_byte_tokenizer
from tests.launch.test_resume import CONFIG, launch, ok, train

pytestmark = pytest.mark.slow

SMALL = ["--prompts=3", "--samples=2", "--max_new_tokens=8", "--criteria=delta_logp,js",
         "--budgets=0.25,1", "--gammas=0,0.5", "--k=1,2", "--report_samples=4"]


def write_model(path, family, seed):
    """A random 1-layer model of `family` with the byte tokenizer, as an HF directory."""
    save_byte_tokenizer(path)
    tok = models.load_tokenizer(str(path))
    config = models.get_preset("tiny").replace(
        family=family, num_layers=1, hidden_size=64, mlp_dim=128, num_heads=2,
        num_kv_heads=1, head_dim=32, eos_token_ids=tuple(tok.eos_ids), bos_token_id=tok.bos_id,
        pad_token_id=tok.pad_id)
    models.save_pretrained(str(path), config, models.init(config, jax.random.key(seed)))
    return str(path)


def analyze(out, *args):
    return launch("launch.analyze", f"--config={CONFIG}", f"--workdir={out}", *SMALL, *args)


def check_outputs(out, rows_expected=6, sweeps=True):
    with open(os.path.join(out, "summary.json")) as f:
        summary = json.load(f)
    rl = summary["pairs"]["rl"]
    assert rl["positions"] > 0 and set(rl["js_above"]) == {"0.01", "0.1"}
    assert len(rl["positional"]["mean_js"]) == 10
    assert set(rl["reallocation"]) == {"top1", "topk", "outside"}
    import pyarrow.parquet as pq

    table = pq.read_table(os.path.join(out, "tokens.parquet")).to_pydict()
    for pair in summary["pairs"]:
        rows = [i for i, p in enumerate(table["pair"]) if p == pair]
        assert len(rows) == summary["pairs"][pair]["positions"]
        assert len({table["row"][i] for i in rows}) == rows_expected
    np.testing.assert_allclose(np.array(table["delta_logp"]),
                               np.array(table["logp_b"]) - np.array(table["logp_a"]), atol=1e-6)
    figures = ["distributions", "positions", "mass"] + ["budget", "gamma"] * sweeps
    for name in figures:
        with open(os.path.join(out, f"{name}.png"), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", name
    with open(os.path.join(out, "report.html")) as f:
        page = f.read()
    assert page.count('class="tok') >= 4 and "http://" not in page and "https://" not in page
    if not sweeps:
        assert "sweeps" not in summary and not os.path.exists(os.path.join(out, "budget.png"))
        return summary
    criteria = {(r["criterion"], r["direction"]) for r in summary["sweeps"]}
    assert {("pure", "forward"), ("js", "reverse"), ("delta_logp", "forward"),
            ("extrapolate:all", "forward"), ("extrapolate:delta_logp", "forward")} <= criteria
    for row in summary["sweeps"]:
        assert 0 <= row["accuracy"] <= 1 and 0 <= row["realised_fraction"] <= 1
        assert row["pass@1"] == row["accuracy"]  # pass@1 is the mean correctness
    return summary


@pytest.mark.parametrize("family", ["qwen2", "llama"])
def test_hugging_face_pair(tmp_path, family):
    base = write_model(tmp_path / "base", family, 0)
    rl = write_model(tmp_path / "rl", family, 1)
    out = str(tmp_path / "out")
    sweeps = family == "qwen2"  # the sweeps do not depend on the architecture: run once
    result = ok(analyze(out, f"--base={base}", f"--rl={rl}", f"--sft={base}",
                        *([] if sweeps else ["--nosweeps"])))
    assert "wrote" in result.stdout and "report.html" in result.stdout
    summary = check_outputs(out, sweeps=sweeps)
    sft = summary["pairs"]["sft"]  # the base against itself: nothing changed
    assert sft["delta_logp"]["mean_abs"] == 0.0 and sft["js_above"]["0.01"] == 0.0


def test_two_checkpoints_of_a_training_workdir(tmp_path):
    workdir = str(tmp_path / "run")
    ok(train(workdir))  # 12 steps, checkpoints kept at 6, 9 and 12
    out = str(tmp_path / "out")
    result = ok(analyze(out, f"--base={workdir}", "--base_step=6", f"--rl={workdir}",
                        "--nosweeps"))
    assert "checkpoints of the RL run" in result.stdout
    summary = check_outputs(out, sweeps=False)
    prefix = os.path.basename(str(tmp_path))
    assert summary["models"] == {"base": f"{prefix}/run@6", "rl": f"{prefix}/run@12"}
    updates = summary["updates"]
    assert [(u["from_step"], u["to_step"]) for u in updates] == [(6, 9), (9, 12)]
    assert all(u["mean_abs_delta"] > 0 for u in updates)
    assert os.path.isfile(os.path.join(out, "updates.png"))


@pytest.mark.parametrize("args,message", [
    (["--base=/nonexistent", "--rl=/nonexistent"], "is not a directory"),
    (["--base=.", "--rl=.", "--budgets=0,0.5"], "budgets must be in (0, 1]"),
    (["--base=.", "--rl=.", "--criteria=magnitude"], "unknown criteria"),
    (["--base=.", "--rl=gs://bucket/run"], "--rl gs://bucket/run: launch.analyze reads and "
     "writes local folders only"),
])
def test_bad_input_is_one_line_before_any_compute(tmp_path, args, message):
    result = analyze(str(tmp_path / "out"), *args)
    assert result.returncode == 2, result.stderr[-2000:]
    assert message in result.stderr
    assert result.stderr.strip().count("\n") == 0
    assert not os.path.exists(tmp_path / "out")
