"""Bad checkpoints fail with one clear error, before any tensor data is read."""

import json
import shutil

import jax
import numpy as np
import pytest

import models
from models import safetensors_io
from models.safetensors_io import CheckpointError


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("good")
    config = models.get_preset("tiny").replace(num_layers=2, family="qwen3",
                                               tie_embeddings=False)
    models.save_pretrained(path, config, models.init(config, jax.random.key(0)))
    return path


@pytest.fixture
def reads(monkeypatch):
    """Counts tensor-data reads, to prove a failing load read nothing."""
    count = {"n": 0}
    original = safetensors_io.SafetensorsFile.get

    def counting(self, name):
        count["n"] += 1
        return original(self, name)

    monkeypatch.setattr(safetensors_io.SafetensorsFile, "get", counting)
    return count


def _copy(good_dir, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(good_dir, dst)
    return dst


def _rewrite_weights(path, fn):
    f = safetensors_io.SafetensorsFile(path / "model.safetensors")
    tensors = {name: np.array(f.get(name)) for name in f.tensors}
    fn(tensors)
    safetensors_io.write(path / "model.safetensors", tensors)


def _edit_config(path, **changes):
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps(cfg))


def test_good_dir_loads(good_dir, reads):
    config, _ = models.load_pretrained(good_dir)
    assert config.family == "qwen3" and reads["n"] > 0


def test_unknown_model_type(good_dir, tmp_path, reads):
    path = _copy(good_dir, tmp_path)
    _edit_config(path, model_type="gpt2")
    with pytest.raises(CheckpointError, match=r"config.json: unsupported model_type 'gpt2'"):
        models.load_pretrained(path)
    assert reads["n"] == 0


def test_missing_tensor(good_dir, tmp_path, reads):
    path = _copy(good_dir, tmp_path)
    _rewrite_weights(path, lambda t: t.pop("model.layers.1.self_attn.k_norm.weight"))
    reads["n"] = 0
    with pytest.raises(CheckpointError,
                       match=r"1 tensor\(s\) missing.*model\.layers\.1\.self_attn\.k_norm"):
        models.load_pretrained(path)
    assert reads["n"] == 0


def test_wrong_shape(good_dir, tmp_path, reads):
    path = _copy(good_dir, tmp_path)
    _rewrite_weights(path, lambda t: t.update(
        {"model.layers.0.mlp.up_proj.weight": np.zeros((1000, 256), np.float32)}))
    reads["n"] = 0
    with pytest.raises(CheckpointError, match=r"model\.layers\.0\.mlp\.up_proj\.weight: file "
                       r"has \(1000, 256\), config needs \(1024, 256\)"):
        models.load_pretrained(path)
    assert reads["n"] == 0


def test_unexpected_tensor(good_dir, tmp_path, reads):
    path = _copy(good_dir, tmp_path)
    _rewrite_weights(path, lambda t: t.update({"model.layers.0.mlp.extra": np.zeros(3)}))
    reads["n"] = 0
    with pytest.raises(CheckpointError, match=r"unexpected tensor.*model\.layers\.0\.mlp\.extra"):
        models.load_pretrained(path)
    assert reads["n"] == 0


def test_config_disagrees_with_weights(good_dir, tmp_path):
    path = _copy(good_dir, tmp_path)
    _edit_config(path, num_hidden_layers=3)
    with pytest.raises(CheckpointError, match=r"missing.*model\.layers\.2\."):
        models.load_pretrained(path)


@pytest.mark.parametrize("change,pattern", [
    ({"use_sliding_window": True}, "use_sliding_window"),
    ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
    ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}},
     "rope_type 'yarn'"),
    ({"num_key_value_heads": 3}, "multiple of num_kv_heads"),
    ({"attention_bias": True}, "attention_bias"),
])
def test_unsupported_config_features(good_dir, tmp_path, change, pattern):
    path = _copy(good_dir, tmp_path)
    _edit_config(path, **change)
    with pytest.raises(CheckpointError, match=pattern):
        models.load_pretrained(path)


def test_missing_files(tmp_path, good_dir):
    with pytest.raises(CheckpointError, match="not a directory"):
        models.load_pretrained(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="no config.json"):
        models.load_pretrained(tmp_path)
    path = _copy(good_dir, tmp_path)
    (path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        models.load_pretrained(path)


def test_truncated_weights(good_dir, tmp_path):
    path = _copy(good_dir, tmp_path)
    data = (path / "model.safetensors").read_bytes()
    # data cut short, no header at all, a header that is not JSON
    for bad in (data[: len(data) // 2], b"\x05", data[:8] + b"{not json" * 4):
        (path / "model.safetensors").write_bytes(bad)
        with pytest.raises(CheckpointError, match=r"model\.safetensors: .*truncated") as e:
            models.load_pretrained(path)
        assert "\n" not in str(e.value)


def test_unsupported_dtype_is_named(tmp_path):
    import ml_dtypes
    from safetensors.numpy import save_file

    save_file({"w": np.zeros(4, ml_dtypes.float8_e4m3fn)}, tmp_path / "x.safetensors")
    with pytest.raises(CheckpointError, match=r"x\.safetensors: tensor 'w' has unsupported dtype F8_E4M3"):
        safetensors_io.SafetensorsFile(tmp_path / "x.safetensors")
    with pytest.raises(ValueError, match="cannot be stored"):
        safetensors_io.write(tmp_path / "y.safetensors", {"w": np.array(["a"], object)})


def test_write_round_trip(tmp_path):
    """bf16 and non-contiguous (transposed) arrays round-trip; the metadata says "pt"."""
    import ml_dtypes

    rng = np.random.default_rng(0)
    tensors = {"bf16_t": rng.standard_normal((3, 5)).astype(ml_dtypes.bfloat16).T,
               "f32": rng.standard_normal(7).astype(np.float32),
               "i64": np.arange(6, dtype=np.int64).reshape(2, 3)[:, ::2]}
    safetensors_io.write(tmp_path / "m.safetensors", tensors)
    f = safetensors_io.SafetensorsFile(tmp_path / "m.safetensors")
    assert f.metadata == {"format": "pt"}
    assert f.tensors["bf16_t"] == ("BF16", (5, 3))
    for name, arr in tensors.items():
        got = f.get(name)
        assert got.dtype == arr.dtype
        np.testing.assert_array_equal(got, arr)
    with pytest.raises(CheckpointError, match="no tensor named 'nope'"):
        f.get("nope")


def test_index_naming_a_missing_shard(good_dir, tmp_path):
    path = _copy(good_dir, tmp_path)
    f = safetensors_io.SafetensorsFile(path / "model.safetensors")
    weight_map = {name: "model-00001-of-00002.safetensors" for name in f.tensors}
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(CheckpointError, match="shard model-00001-of-00002.safetensors does not"):
        models.load_pretrained(path)


def test_save_rejects_params_of_another_config(tmp_path):
    config = models.get_preset("tiny").replace(num_layers=2)
    params = models.init(config, jax.random.key(0))
    with pytest.raises(ValueError, match="params do not match config"):
        models.save_pretrained(tmp_path, config.replace(num_layers=3), params)
    assert not (tmp_path / "config.json").exists()


def test_benign_extras_are_accepted(tmp_path):
    """Tied checkpoints may carry a redundant lm_head; old exports carry inv_freq."""
    config = models.get_preset("tiny").replace(num_layers=1)
    params = models.init(config, jax.random.key(0))
    models.save_pretrained(tmp_path, config, params)
    embed = np.asarray(params["embed"])
    _rewrite_weights(tmp_path, lambda t: t.update({
        "lm_head.weight": embed,
        "model.layers.0.self_attn.rotary_emb.inv_freq": np.ones(32, np.float32)}))
    _, loaded = models.load_pretrained(tmp_path)
    np.testing.assert_array_equal(loaded["embed"], embed)
    _edit_config(tmp_path, tie_word_embeddings=False)  # now lm_head is required and used
    untied_config, untied = models.load_pretrained(tmp_path)
    assert not untied_config.tie_embeddings
    np.testing.assert_array_equal(untied["lm_head"], embed.T)
