"""Shared pieces of the absl entry points: config flag parsing with clean errors.

`run(main)` is `absl.app.run` with a flags parser that turns a bad
`--config...` flag into one line on stderr and exit status 2, before any
compute. A key that does not exist is named with its full path and the keys
that do exist at that level.

Stopping: during training steps, SIGTERM / Ctrl-C checkpoint the run
(`rl.checkpoint.preemption`) and exit 0 / 130; a rerun of the same command resumes.
Before the steps start they end the program with one line on stderr (exit
status 143 / 130), not a traceback. A run stopped by repeated failed steps
(`rl.checkpoint.loop.RunStopped`) or by storage that cannot be written (a full disk:
one line naming the cause) exits 1; an unusable checkpoint exits 2. A process of a
multi-process run whose peer is gone (`rl.checkpoint.agreement.PeerLost`) exits 1 with
one line at once, skipping JAX's exit-time shutdown barrier (it would wait for the lost
process until a timeout, then abort with pages of logs).
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import json
import logging as pylogging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence

import jax
from absl import app, flags
from ml_collections import config_flags

import configs
import models
from configs import variants
from launch import distributed, runtime
from launch.workdir import check_writable, start_fresh
from models import multihost, paths
from rl.checkpoint import persistent
from rl.checkpoint.agreement import PeerLost
from rl.checkpoint.loop import RunStopped
from rl.checkpoint.persistent import CheckpointError, WriteError
from rl.checkpoint.preemption import Preempted
from rl.train import build, checks, memory_plan, sft
from rl.train import trainer as trainer_lib
from rl.train.logs import RunLog, plot


def load_config_file(spec: str):
    """Imports `path.py[:arg]` and returns its `get_config(arg)`, its model preset checked
    (config files take any token that is not an algorithm variant as a preset)."""
    path, _, arg = spec.partition(":")
    if not os.path.isfile(path):
        what = "is a directory (expected a .py file)" if os.path.isdir(path) else "does not exist"
        raise FileNotFoundError(f"config file {path} {what}")
    module = configs.import_file(path)
    config = module.get_config(arg) if arg else module.get_config()
    preset = config.get("model", {}).get("preset") if hasattr(config, "get") else None
    if preset is not None and preset not in models.PRESETS:
        where = (f"config argument {preset!r}" if preset in arg.split(",")
                 else f"model.preset {preset!r}")
        raise ValueError(f"{where} is neither a model preset ({', '.join(sorted(models.PRESETS))})"
                         f" nor an algorithm variant ({', '.join(variants.VARIANTS)})")
    return config


def _config_spec(argv: Sequence[str], flag: str = "config") -> str | None:
    """The value of `--config=X` or `--config X` in argv, if given."""
    for i, arg in enumerate(argv):
        if arg.startswith(f"--{flag}="):
            return arg.split("=", 1)[1]
        if arg == f"--{flag}" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def unknown_override(argv: Sequence[str], flag: str = "config") -> str | None:
    """Describes the first `--config.a.b=...` override whose key does not exist."""
    spec = _config_spec(argv, flag)
    if spec is None:
        return None
    config = load_config_file(spec)
    for arg in argv:
        if not arg.startswith(f"--{flag}."):
            continue
        key = arg[len(flag) + 3:].split("=", 1)[0]
        node, walked = config, []
        for part in key.split("."):
            keys = list(node.keys()) if hasattr(node, "keys") else []
            if part not in keys:
                where = ".".join(walked) or "the config"
                return (f"config key '{key}' does not exist ({where} has: "
                        f"{', '.join(sorted(keys)) or 'no sub-keys'})")
            node, walked = node[part], walked + [part]
    return None


def _flags_parser(argv: list[str]) -> list[str]:
    spec = _config_spec(argv)
    path = spec.partition(":")[0] if spec is not None else None
    if path is not None and not os.path.isfile(path):
        what = "is a directory (expected a .py file)" if os.path.isdir(path) else "does not exist"
        print(f"error: config file {path} {what}", file=sys.stderr)
        sys.exit(2)
    if spec is not None:
        try:  # config_flags would wrap this error in a multi-line message
            load_config_file(spec)
        except Exception as e:  # noqa: BLE001 - any failure of the user's config file
            print(f"error: cannot load config {spec}: {' '.join(str(e).split())}",
                  file=sys.stderr)
            sys.exit(2)
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        message = str(e)
    except (AttributeError, KeyError, TypeError, ValueError, FileNotFoundError) as e:
        try:
            message = unknown_override(argv) or f"invalid config flag: {e}"
        except Exception as inner:  # the config file itself is broken
            message = f"cannot load config: {inner}"
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def define_config_flag(default_file: str = "demo.py"):
    """The `--config` flag of an entry point; `run(main, default_config_path(default_file))`
    supplies the default (see `run` for why the flag itself has none)."""
    return config_flags.DEFINE_config_file(
        "config", None,
        f"Config file `path.py[:arg]` (default configs/{default_file}); override any key "
        "with --config.<section>.<key>=value (every key is documented in configs/base.py).")


def define_fresh_flag():
    """`--fresh`: start over in a workdir that already has checkpoints and logs."""
    return flags.DEFINE_bool(
        "fresh", False, "Start over: delete the workdir's checkpoints, logs, warm start and "
        "exports first. Without it a workdir with checkpoints is resumed.")


def define_workdir_flag(default: str | None = None):
    """`--workdir`: the run's output directory (created); required when no default."""
    return flags.DEFINE_string("workdir", default, "Output directory (created).",
                               required=default is None)


def default_config_path(name: str = "base.py") -> str:
    """Path of a config file shipped in the `configs` package."""
    return os.path.join(os.path.dirname(os.path.abspath(configs.__file__)), name)


class Terminated(Exception):
    """Raised in the main thread when the process receives SIGTERM."""


def _raise_terminated(signum, frame):
    del signum, frame
    raise Terminated


def _stoppable(main: Callable[[list[str]], None]) -> Callable[[list[str]], None]:
    """`main` that ends with one line on stderr on Ctrl-C or SIGTERM."""
    @functools.wraps(main)
    def wrapped(argv):
        signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            return main(argv)
        except Preempted as e:
            print(f"\n{e}", file=sys.stderr)
            sys.exit(e.exit_code)
        except PeerLost as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(1)  # not sys.exit: atexit (jax.distributed.shutdown) waits for the lost one
        except RunStopped as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(1)
        except WriteError as e:  # before CheckpointError: storage, not the user's input
            print(f"error: {' '.join(str(e).split())}; make room and rerun to resume from "
                  "the newest complete checkpoint", file=sys.stderr)
            sys.exit(1)
        except OSError as e:
            problem = persistent.storage_problem(e)
            if problem is None:
                raise
            where = e.filename or "the run's files"
            print(f"error: {problem} while writing {where}: files written so far are kept; "
                  "make room and rerun to resume", file=sys.stderr)
            sys.exit(1)
        except CheckpointError as e:
            print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt:
            print("\nstopped: interrupted (Ctrl-C); files written so far are kept",
                  file=sys.stderr)
            sys.exit(130)
        except Terminated:
            print("\nstopped: terminated (SIGTERM); files written so far are kept",
                  file=sys.stderr)
            sys.exit(143)

    return wrapped


GPU_PLUGINS = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin",
               "jax_rocm7_plugin")


def skip_absent_tpu() -> None:
    """Starts JAX on the CPU alone where it could start nothing else but would probe a TPU
    that is not there: libtpu installed (the `tpu` extra, which `make test` installs to
    compile for TPU slices), no TPU device files (/dev/accel*, /dev/vfio/N) and no JAX
    GPU plugin. Without this, every start on such a machine prints libtpu's
    'could not determine TPU accelerator type' and INVALID_ARGUMENT lines. JAX_PLATFORMS,
    when set, decides instead."""
    if os.environ.get("JAX_PLATFORMS") or importlib.util.find_spec("libtpu") is None:
        return
    if glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"):
        return
    if any(importlib.util.find_spec(name) is not None for name in GPU_PLUGINS):
        return
    jax.config.update("jax_platforms", "cpu")  # before any backend starts


def run(main: Callable[[list[str]], None], default_config: str | None = None) -> None:
    """`app.run(main)`; `--config=default_config` is added when no --config is given.

    Entry points define their config flag without a default: config_flags
    applies overrides eagerly when a default is set, which would bypass the
    clean error path above.
    """
    # jax logs a failed TPU probe at INFO on every CPU/GPU start; it is not news.
    # (JAX's INFO messages, this one among them, are kept out of the run's output)
    pylogging.getLogger("jax").setLevel(pylogging.WARNING)
    skip_absent_tpu()
    if default_config and not any(a == "--config" or a.startswith("--config=")
                                  for a in sys.argv[1:]):
        sys.argv.insert(1, f"--config={default_config}")
    # --help lists the main module's key flags: make the flags defined here for
    # the entry point (--config, --workdir) key flags of the program being run
    for name in ("config", "workdir"):
        if name in flags.FLAGS:
            flags.FLAGS.register_key_flag_for_module(sys.argv[0], flags.FLAGS[name])
    app.run(_stoppable(main), flags_parser=_flags_parser)


def check_resume(run_, workdir: str, *, for_sft: bool) -> None:
    """Before any compute: refuses a config that cannot resume the workdir's
    checkpoints (raises CheckpointError naming the keys), and ends the program
    (exit 0) when the RL checkpoints are already at `train.steps`, printing so."""
    cfg = run_.cfg
    if for_sft or cfg.train.warm_start == "sft":
        persistent.check_resume(paths.join(workdir, "sft_checkpoints"), sft.fingerprint(run_))
    if for_sft:
        return
    meta = persistent.check_resume(paths.join(workdir, "checkpoints"), cfg)
    steps = cfg.train.steps
    if meta is None or meta["step"] is None or meta["step"] < steps:
        return
    print(f"{workdir} is finished: its newest checkpoint is step {meta['step']} and "
          f"the config asks for {steps} steps. Nothing to do (raise the step count to "
          "continue, or pass --fresh to start over)")
    log = RunLog(workdir, steps, tensorboard=False)
    print_heldout({"before": log.record(0), "after": log.record(meta["step"])})
    sys.exit(0)


def prepare(cfg, workdir: str, *, for_sft: bool = False, logs: bool = True,
            fresh: bool = False, resume: bool = True, init: bool = True):
    """`(run, params)` for an entry point: resolves and checks the config (one-line
    error, exit 2, before any compute), checks that it may resume the workdir's
    checkpoints (`fresh`: deletes them and the logs first, saying so; `resume`
    False: the entry point does not train), prints the RL step's memory plan and
    refuses a run that cannot fit its devices (`rl.train.memory_plan.preflight`), writes
    DIR/config.json, builds the policy. `for_sft`: the entry point is the
    supervised warm start; `logs`: it writes TensorBoard files / a plot when the
    config asks (their extras must be installed); `init` False: no policy is
    built (params None)."""
    try:
        check_writable(workdir)
        runtime.configure_xla(cfg.cpu_xla_flags)  # before anything starts a JAX backend
        distributed.init()
        run_ = build.resolve(cfg, workdir, for_sft=for_sft)
        if logs:
            build.check_log_extras(cfg)
        if fresh and paths.isdir(workdir) and multihost.is_primary():
            removed = start_fresh(workdir)
            if removed:
                print(f"--fresh: deleted {', '.join(removed)} in {workdir}")
        multihost.sync("fresh")
        if resume:
            check_resume(run_, workdir, for_sft=for_sft)
        if resume and init and not for_sft:  # an RL run: does its step fit the devices?
            memory_plan.preflight(run_)  # prints the plan; refuses in one line
        runtime.enable_compilation_cache(cfg.compilation_cache)
        paths.makedirs(workdir)
        if multihost.is_primary():
            paths.write_text(paths.join(workdir, "config.json"),
                             json.dumps(cfg.to_dict(), indent=2, default=str))
        for warning in checks.warnings(cfg):
            print(f"warning: {warning}", file=sys.stderr)
        if cfg.fault.enabled:
            print("warning: fault injection is on (config.fault): this run fails on purpose",
                  file=sys.stderr)
        return run_, build.init_params(run_) if init else None
    except build.ERRORS as e:
        print(f"error: {build.message(e)}", file=sys.stderr)
        sys.exit(2)


def print_heldout(summary: dict) -> None:
    """The entry points' last line, `heldout_accuracy: before=X after=Y`, from a
    `{"before": metrics, "after": metrics}` summary (nothing when either lacks it)."""
    before = summary["before"].get("heldout/accuracy")
    after = summary["after"].get("heldout/accuracy")
    if before is not None and after is not None:
        print(f"heldout_accuracy: before={before:.3f} after={after:.3f}")


def train(run_, params, workdir: str) -> dict:
    """The training entry points' job: the supervised warm start when the config
    asks for one (`train.warm_start`), then RL, then DIR/progress.png; progress
    on stdout. Returns the trainer's {"before", "after"} held-out summary."""
    cfg, mc, start = run_.cfg, run_.model_config, time.perf_counter()
    name = cfg.model.hf_path or cfg.model.preset
    print(f"model: {name} ({mc.num_params() / 1e6:.2f}M params) on {jax.device_count()} "
          f"{jax.devices()[0].platform} device(s); algorithm: {run_.algorithm.advantage}/"
          f"{run_.algorithm.loss}, {cfg.sampling.sampler} sampling")
    example = run_.train_source[0]
    print(f"example prompt: {example.prompt!r}" + (f" -> solution {example.solution!r}"
                                                   if example.solution else ""))
    stages = 2 if cfg.train.warm_start else 1
    if cfg.train.warm_start == "sft":
        print(f"[1/2] supervised warm start: {cfg.sft.steps} steps")
        params, summary, reused = sft.warm_start(run_, params, workdir)
        how = (f"reused {paths.join(sft.warm_start_home(run_, workdir), 'sft')}" if reused
               else f"{time.perf_counter() - start:.0f}s")
        print(f"      held-out accuracy {summary['before'].get('heldout/accuracy', 0):.3f} -> "
              f"{summary['after'].get('heldout/accuracy', 0):.3f} ({how})")
    print(f"[{stages}/{stages}] RL: {cfg.train.steps} steps × {cfg.train.prompts_per_step} "
          f"prompts × {run_.samples_per_prompt} samples")
    trainer = trainer_lib.Trainer(run_, params, workdir)
    summary = trainer.run()
    written = [trainer.log.path, os.path.join(workdir, "final")]
    if cfg.train.tensorboard:
        written.append(os.path.join(workdir, "tensorboard"))
    if cfg.train.plot and multihost.is_primary():
        data = cfg.data.task.name if cfg.data.source == "task" else cfg.data.source
        written.append(plot(workdir, title=f"{data}: {name}, {run_.algorithm.advantage}"))
    print(f"wrote {', '.join(written)}")
    print(f"total {time.perf_counter() - start:.0f}s")
    return summary
