"""configs/paper: every sweep file lists valid runs, and an arm is exactly its variant."""

import os

import pytest

from configs import demo, variants
from configs.paper import _study
from launch.common import load_config_file
from rl import sweeps

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STUDIES = {"losses": 9, "sampling": 3, "selection": 5, "baseline": 6, "rollout": 2, "async": 7}


@pytest.mark.parametrize("study,arms", STUDIES.items())
@pytest.mark.parametrize("arg", ["tiny", ""])
def test_each_study_lists_valid_runs(study, arms, arg):
    spec = os.path.join(ROOT, "configs", "paper", f"{study}.py") + (f":{arg}" if arg else "")
    sweep = sweeps.load(spec)
    runs = sweep.runs
    arms += study == "losses" and arg == "tiny"  # + dapo_overlong
    assert len(runs) == arms * len(_study.SEEDS) and sweep.target == _study.TARGET
    assert len({r["group"] for r in runs}) == arms
    config = load_config_file(spec)
    sweeps.check_keys(config, runs)  # every override names a config key
    assert config.train.steps == (100 if arg == "tiny" else 300)


@pytest.mark.parametrize("name", ["dapo", "nsr", "dars_b", "mc_grpo", "april", "bots"])
def test_an_arm_is_exactly_its_variant(name):
    arm = _study.variant(name)
    config = demo.get_config()
    for key, value in arm.items():
        node = config
        *path, last = key.split(".")
        for part in path:
            node = node[part]
        node[last] = value
    expected = variants.apply(demo.get_config(), name)
    assert _study.flat(config) == _study.flat(expected)


def test_the_tiny_losses_study_turns_dapos_overlong_penalty_off_but_in_one_arm():
    runs = sweeps.load(os.path.join(ROOT, "configs", "paper", "losses.py:tiny")).runs
    buffer = {r["group"]: r.get("rl.overlong.buffer") for r in runs}
    assert buffer["dapo_overlong"] == 1  # the authors' fifth of the 8-token budget
    assert all(buffer[g] == 0 for g in ("dapo", "nsr", "nsr_decay", "fipo", "logp_reweight"))
    assert buffer["grpo"] is None and buffer["gspo"] is None  # never set: the demo's 0
    by_group = {r["group"]: r for r in runs if r["seed"] == 0}
    dapo = {k: v for k, v in by_group["dapo"].items() if k not in ("name", "group")}
    assert {**dapo, "rl.overlong.buffer": 1} == {
        k: v for k, v in by_group["dapo_overlong"].items() if k not in ("name", "group")}


def test_nsr_decay_differs_from_nsr_in_the_mode_alone():
    runs = sweeps.load(os.path.join(ROOT, "configs", "paper", "losses.py")).runs
    by_group = {r["group"]: r for r in runs if r["seed"] == 0}
    nsr, decay = ({k: v for k, v in by_group[g].items() if k not in ("name", "group")}
                  for g in ("nsr", "nsr_decay"))
    assert nsr.get("rl.loss.mode") is None and decay == {**nsr, "rl.loss.mode": "decay"}


def test_a_bad_study_argument_is_named():
    with pytest.raises(ValueError, match="unknown argument 'huge'"):
        _study.get_config("huge")
    for bad in ("tiny,tiny", "lora,lora", "tiny,huge"):
        with pytest.raises(ValueError, match="unknown argument"):
            _study.get_config(bad)


def test_lora_studies_train_adapters_and_share_one_base_per_seed():
    spec = os.path.join(ROOT, "configs", "paper", "losses.py:tiny,lora")
    config = load_config_file(spec)
    # demo.py:lora's adapters, the sampler factored (the one form a shared batch runs)
    assert (config.lora.rank, config.lora.sampler) == (16, "factored")
    assert config.optim.lr == demo.LORA_LR and config.train.steps == 100
    runs = sweeps.load(spec).runs
    assert len(runs) == 30  # the same arms as :tiny (dapo_overlong included)
    groups = sweeps.shared_base_groups(runs)
    # the seed also sets the warm start: one base per seed, every arm of the seed on it
    assert sorted(len(g) for g in groups) == [10, 10, 10]
    assert all(len({r["seed"] for r in g}) == 1 for g in groups)


@pytest.mark.parametrize("key,learner", [
    ("rl.loss.name", True), ("optim.lr", True), ("train.dynamic_sampling", True),
    ("train.minibatches", True), ("seed", False), ("train.steps", False),
    ("rollout.mode", False), ("lora.rank", False), ("sampling.n", False),
    ("train.minibatches_x", False)])
def test_only_learner_keys_may_differ_within_a_shared_base_group(key, learner):
    assert sweeps.is_arm_key(key) is learner
