"""benchmarks/shared_base.py: two sweeps' results tables and wall times compared."""

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import shared_base  # noqa: E402

from rl import sweeps

HEADER = "name,group," + ",".join(sweeps.DETERMINISTIC)


def _sweep(path, rows: dict[str, list], seconds: float):
    os.makedirs(path)
    lines = [HEADER] + [",".join([name, name.split("-")[0]] + [str(v) for v in values])
                        for name, values in rows.items()]
    (path / "results.csv").write_text("\n".join(lines) + "\n")
    sweeps.add_wall(str(path / sweeps.SWEEP_WALL_FILE), seconds, "invocations")


def test_differences_and_the_wall_ratio(tmp_path, capsys):
    # columns: start, final, gain, best, reward_last10, steps_to_target, rollout_tokens,
    # tokens_to_target, rollouts
    _sweep(tmp_path / "a", {"grpo-s0": [0.2, 0.5, 0.3, 0.5, 0.6, 60, 900, 500, 128],
                            "dapo-s0": [0.2, 0.6, 0.4, 0.6, 0.7, 40, 1200, 400, 300],
                            "gspo-s0": [0.2, 0.4, 0.2, 0.4, 0.5, "", 800, "", 128]}, 200.0)
    _sweep(tmp_path / "b", {"grpo-s0": [0.2, 0.5, 0.3, 0.5, 0.6, 60, 900, 500, 128],
                            "dapo-s0": [0.2, 0.61, 0.41, 0.61, 0.7, 40, 1210, 400, 301],
                            "gspo-s0": [0.2, 0.4, 0.2, 0.4, 0.5, 80, 800, 700, 128]}, 150.0)
    out = shared_base.compare(str(tmp_path / "a"), str(tmp_path / "b"))
    assert out["compared"] == 3 and out["differ_in_samples"] == ["dapo-s0"]
    assert out["runs"]["grpo-s0"] == {c: 0.0 for c in sweeps.DETERMINISTIC}
    assert out["runs"]["dapo-s0"]["rollout_tokens"] == 10.0
    assert out["runs"]["gspo-s0"]["steps_to_target"] is None  # reached on one side only
    assert out["max"]["heldout_final"] == pytest.approx(0.01)
    assert out["shared_over_separate"] == pytest.approx(0.75)
    shared_base.main([str(tmp_path / "a"), str(tmp_path / "b"), "--json"])
    assert json.loads(capsys.readouterr().out)["wall_s"] == {"separate": 200.0,
                                                              "shared": 150.0}


SWEEP = '''
def get_sweep(arg=None):
    return [{"name": f"{arm}-s{seed}", "group": arm, "seed": seed, "optim.lr": lr}
            for seed in (0, 1) for arm, lr in (("a", 1e-3), ("b", 3e-3))]
'''


def _wall(workdir, name: str, seconds: float) -> None:
    os.makedirs(workdir / "runs" / name, exist_ok=True)
    sweeps.add_wall(str(workdir / "runs" / name / sweeps.WALL_FILE), seconds)


def test_group_walls_sum_the_separate_runs_and_take_the_shared_group_process(tmp_path,
                                                                            capsys):
    spec = tmp_path / "sweep.py"
    spec.write_text(SWEEP)
    _sweep(tmp_path / "a", {}, 1.0)
    _sweep(tmp_path / "b", {}, 1.0)
    for name, seconds in (("a-s0", 10.0), ("b-s0", 30.0), ("a-s1", 12.0), ("b-s1", 20.0)):
        _wall(tmp_path / "a", name, seconds)
    # seed 0's group ran once (25 s); seed 1's arm b was resumed in a later group (+5 s)
    for name, seconds in (("a-s0", 25.0), ("b-s0", 25.0), ("a-s1", 18.0), ("b-s1", 18.0)):
        _wall(tmp_path / "b", name, seconds)
    _wall(tmp_path / "b", "b-s1", 5.0)
    out = shared_base.groups(str(spec), str(tmp_path / "a"), str(tmp_path / "b"))
    assert [g["runs"] for g in out] == [["a-s0", "b-s0"], ["a-s1", "b-s1"]]
    assert [(g["separate_s"], g["shared_s"]) for g in out] == [(40.0, 25.0), (32.0, 23.0)]
    assert out[0]["shared_over_separate"] == pytest.approx(25 / 40)
    os.remove(tmp_path / "b" / "runs" / "a-s1" / sweeps.WALL_FILE)  # a group not finished
    shared_base.main([str(tmp_path / "a"), str(tmp_path / "b"), f"--config={spec}"])
    printed = capsys.readouterr().out
    assert "group a-s0 (2 runs): separate 40 s, shared 25 s" in printed
    assert "group a-s1 (2 runs): separate 32 s, shared unfinished" in printed
