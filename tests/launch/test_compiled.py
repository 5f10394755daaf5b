"""launch.compiled: the file `launch.compile --save` writes and `launch.plan --compiled`
reads (the round trip through both entry points: tests/launch/test_compile.py)."""

import json

import pytest

from configs import base
from launch import compiled, topology

FIGURES = {
    "update": compiled.Figures(100, 90, 80, 70, 1e9, 2e9),
    "score": compiled.Figures(10, 1, 0, 6, 1e8, 2e8),
    "prefill": compiled.Figures(10, 5, 0, 4, 1e7, 2e7),
    "decode": compiled.Figures(12, 5, 3, 8, 1e6, 2e6),
}


def _cfg(**mesh):
    cfg = base.get_config("tiny")
    with cfg.unlocked():
        cfg.mesh.data, cfg.mesh.fsdp, cfg.mesh.tensor = mesh.get("data", 1), 4, 1
    return cfg


def test_round_trip_and_phases(tmp_path):
    path = str(tmp_path / "plans" / "tiny.json")
    compiled.save(path, _cfg(), topology.parse("v5e-4"), 4, 20, FIGURES)
    saved = compiled.load(path)
    assert (saved.slice, saved.accelerator, saved.devices, saved.prompt_len) == (
        "v5e-4", "tpu-v5e", 4, 20)
    assert saved.programs == FIGURES
    compiled.check(saved, _cfg(), path)  # the same settings: no error
    # the pool is decode's donated bytes; the phases are their programs' temporaries
    assert compiled.phases(saved, path) == dict(kv_pool=3, decode=8, prefill=4, learner=70)


def test_other_settings_are_named_in_one_line(tmp_path):
    path = str(tmp_path / "tiny.json")
    compiled.save(path, _cfg(), topology.parse("v5e-4"), 4, 20, FIGURES)
    other = _cfg(data=2)
    with other.unlocked():
        other.sampling.n, other.checkpoint.every = 4, 7  # checkpoint: not a compiled setting
    with pytest.raises(ValueError) as e:
        compiled.check(compiled.load(path), other, path)
    assert str(e.value) == (
        f"--compiled={path} was compiled from other settings: mesh.data=2 (compiled: 1), "
        "sampling.n=4 (compiled: 8); compile this config again with launch.compile --save")


def test_refused_missing_and_foreign_files(tmp_path):
    path = str(tmp_path / "refused.json")
    compiled.save(path, _cfg(), topology.parse("v5e-4"), 4, 20,
                  dict(FIGURES, update="Ran out of memory in memory space hbm"))
    with pytest.raises(ValueError, match=r"XLA refused update on v5e-4: Ran out of memory"):
        compiled.phases(compiled.load(path), path)
    with pytest.raises(ValueError, match=r"no such file \(write one with launch.compile"):
        compiled.load(str(tmp_path / "none.json"))
    for text in ("not json", json.dumps({"version": 1, "slice": "v5e-4"}), "[]"):
        (tmp_path / "foreign.json").write_text(text)
        with pytest.raises(ValueError, match=r"is not a launch.compile --save file") as e:
            compiled.load(str(tmp_path / "foreign.json"))
        assert "\n" not in str(e.value)
