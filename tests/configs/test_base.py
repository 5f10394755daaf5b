"""configs/base.py: sections, locking, and agreement with the model package."""

import pytest

import models
from configs import base
from models import sharding


def test_default_and_preset_arg():
    assert base.get_config().model.preset == "tiny"
    cfg = base.get_config("qwen3-0.6b")
    assert cfg.model.preset == "qwen3-0.6b"
    assert models.from_config_section(cfg.model) == models.get_preset("qwen3-0.6b")
    assert (cfg.mesh.data, cfg.mesh.fsdp, cfg.mesh.tensor) == (-1, 1, 1)


def test_unknown_key_is_an_error_naming_it():
    cfg = base.get_config()
    with pytest.raises(AttributeError, match="nonexistent"):
        cfg.model.nonexistent = 3
    with pytest.raises(AttributeError, match="optimizer"):
        cfg.optimizer = {}


def test_architecture_placeholders_take_typed_overrides():
    cfg = base.get_config()
    assert set(base.ARCHITECTURE_FIELDS) <= set(cfg.model.keys())
    assert all(cfg.model[k] is None for k in base.ARCHITECTURE_FIELDS)
    cfg.model.num_heads = 8
    cfg.model.num_kv_heads = 8
    assert models.from_config_section(cfg.model).num_heads == 8
    with pytest.raises(TypeError):
        cfg.model.num_layers = "four"


def test_sharding_rules_mirror_the_model_defaults():
    """configs may not import models, so its copy of the rules is checked here."""
    cfg = base.get_config()
    mesh, rules = sharding.from_config_section(cfg.mesh)
    assert rules == sharding.make_rules()
    assert dict(mesh.shape) == {"data": 8, "fsdp": 1, "tensor": 1}  # -1 = all devices
    cfg.mesh.data, cfg.mesh.tensor, cfg.mesh.rules.embed = 2, 4, ""
    mesh, rules = sharding.from_config_section(cfg.mesh)
    assert dict(mesh.shape) == {"data": 2, "fsdp": 1, "tensor": 4}
    assert dict(rules)["embed"] == ()
