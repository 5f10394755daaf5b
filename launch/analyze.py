"""Token-level analysis of what RL changed: a base model against an RL model.

    python -m launch.analyze --base=runs/demo/sft --rl=runs/demo/final --workdir=runs/analysis
    python -m launch.analyze --base=runs/demo --base_step=0 --rl=runs/demo \
        --config=configs/demo.py --prompts=64 --samples=8 --budgets=0.01,0.04,0.16
    python -m launch.analyze --base=/ckpt/Qwen2.5-Math-7B --rl=/ckpt/my-rl-run/final \
        --config=configs/base.py --config.data.source=jsonl \
        --config.data.path=aime.jsonl --config.rl.reward.name=math --max_new_tokens=4096

`--base`, `--rl` and `--sft` are Hugging Face directories or training workdirs
(an Orbax checkpoint: the newest usable one, or `--*_step`; else `final/`).
Each may be a gs:// / s3:// URI (models/paths.py): Orbax reads checkpoints from
the bucket, a Hugging Face directory is downloaded to a temporary folder first;
a bucket `--workdir` gets the outputs written locally, then uploaded.
The prompts, references and verifier come from `--config` (its held-out split,
or the training split when there is none); the tokenizer from the RL model.

Writes to --workdir: summary.json (sparsity, positional histograms, mass
reallocation, sweeps, updates), tokens.parquet (one row per completion token),
PNG figures and report.html (samples coloured by Δlog p, JS or entropy; one
self-contained file). Method and reproduction on the demo: docs/analysis.md.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile

from absl import flags

from launch import runtime
from launch.common import (
    default_config_path,
    define_config_flag,
    define_workdir_flag,
    run,
)
from launch.workdir import check_writable
from models import extras, paths
from rl.analysis import study as study_lib
from rl.analysis.study import Settings
from rl.train import build

_CONFIG = define_config_flag("demo.py")
_WORKDIR = define_workdir_flag("runs/analysis")
_BASE = flags.DEFINE_string("base", None, "The base model: HF directory or training workdir.")
_RL = flags.DEFINE_string("rl", None, "The RL model: HF directory or training workdir.")
_SFT = flags.DEFINE_string("sft", "", "Optional SFT model to compare with the base too.")
_BASE_STEP = flags.DEFINE_integer("base_step", None, "Checkpoint step of a --base workdir.")
_RL_STEP = flags.DEFINE_integer("rl_step", None, "Checkpoint step of an --rl workdir.")
_SFT_STEP = flags.DEFINE_integer("sft_step", None, "Checkpoint step of an --sft workdir.")
_PROMPTS = flags.DEFINE_integer("prompts", 32, "Prompts taken from the config's data.")
_SAMPLES = flags.DEFINE_integer("samples", 4, "Completions sampled per prompt.")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", None,
                                "Completion length (default: the config's).")
_TEMPERATURE = flags.DEFINE_float("temperature", 1.0, "Sampling temperature.")
_TOP_P = flags.DEFINE_float("top_p", 1.0, "Nucleus filter (the direction paper used 0.7).")
_CRITERIA = flags.DEFINE_list("criteria", ["delta_logp", "js", "entropy", "random"],
                              "Cross-sampling selection criteria to compare.")
_BUDGETS = flags.DEFINE_list("budgets", ["0.01", "0.02", "0.04", "0.08", "0.16"],
                             "Replacement budgets (share of positions).")
_DIRECTIONS = flags.DEFINE_list("directions", ["forward", "reverse"],
                                "forward: RL tokens into base decoding; reverse: the opposite.")
_GAMMAS = flags.DEFINE_list("gammas", ["0", "0.05", "0.1", "0.2"], "Extrapolation strengths.")
_TAU = flags.DEFINE_float("tau", 0.3, "Selective extrapolation fires where Δlog p <= -tau.")
_K = flags.DEFINE_list("k", ["1"], "pass@k values reported by the sweeps (each <= --samples).")
_SWEEPS = flags.DEFINE_boolean("sweeps", True, "Run the cross-sampling and γ sweeps.")
_UPDATES = flags.DEFINE_boolean("updates", True, "With an --rl workdir of several checkpoints: "
                                "Δlog p between each consecutive pair.")
_REPORT_SAMPLES = flags.DEFINE_integer("report_samples", 12, "Samples shown in report.html.")


def _numbers(name: str, values, kind=float) -> tuple:
    try:
        return tuple(kind(v) for v in values)
    except ValueError:
        what = "integers" if kind is int else "numbers"
        raise ValueError(f"--{name} must be comma-separated {what}, got "
                         f"{','.join(values)}") from None


def settings(cfg, max_new: int):
    return Settings(n=_SAMPLES.value, max_new_tokens=max_new, temperature=_TEMPERATURE.value,
                    top_p=_TOP_P.value, seed=cfg.seed, criteria=tuple(_CRITERIA.value),
                    budgets=_numbers("budgets", _BUDGETS.value),
                    directions=tuple(_DIRECTIONS.value),
                    gammas=_numbers("gammas", _GAMMAS.value), tau=_TAU.value,
                    ks=_numbers("k", _K.value, int),
                    page_size=cfg.sampling.page_size, report_samples=_REPORT_SAMPLES.value,
                    sweeps=_SWEEPS.value)


def main(argv):
    del argv

    cfg = _CONFIG.value
    runtime.configure_xla(cfg.cpu_xla_flags)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if _SAMPLES.value < 1:
                raise ValueError(f"--samples must be >= 1, got {_SAMPLES.value}")
            if _MAX_NEW.value is not None and _MAX_NEW.value < 1:
                raise ValueError(f"--max_new_tokens must be >= 1, got {_MAX_NEW.value}")
            extras.check("pyarrow", "parquet", "launch.analyze's tokens.parquet")
            extras.check("matplotlib", "plots", "launch.analyze's figures")
            study_settings = settings(cfg, _MAX_NEW.value or 1)  # flags checked first
            if paths.is_remote(_WORKDIR.value):  # a missing bucket, no credentials
                check_writable(_WORKDIR.value)
            study = study_lib.load(cfg, _BASE.value or "", _RL.value or "", _SFT.value,
                                   steps=(_BASE_STEP.value, _RL_STEP.value, _SFT_STEP.value),
                                   prompts=_PROMPTS.value, updates=_UPDATES.value, tmp=tmp)
            study_settings = dataclasses.replace(
                study_settings, max_new_tokens=_MAX_NEW.value or study.completion_len)
        except build.ERRORS as e:
            print(f"error: {build.message(e)}", file=sys.stderr)
            sys.exit(2)
        with paths.staged(_WORKDIR.value) as out:  # a bucket's: written here, uploaded
            outputs = study_lib.run_study(study, study_settings, out)
            written = [paths.join(_WORKDIR.value, os.path.relpath(p, out))
                       for p in outputs.values()]
    print("wrote " + ", ".join(written))


if __name__ == "__main__":
    run(main, default_config=default_config_path("demo.py"))
