"""JAX's multi-process runtime for the entry points (docs/scaling.md).

    distributed.define_flags()   # --coordinator, --num_processes, --process_id
    distributed.init()           # before anything starts a JAX backend

`init` calls `jax.distributed.initialize()` when the flags ask for it or the
environment describes several processes (`cluster_environment`).
"""

from __future__ import annotations

import os
import sys

import jax
from absl import flags

_FLAGS: dict = {}
# a process that sends no heartbeat for this long is dead to JAX's coordination service,
# which then ends every other process (where a collective waiting for it would hang)
HEARTBEAT_TIMEOUT_S = 60


def define_flags() -> None:
    """`--coordinator`, `--num_processes`, `--process_id`: start JAX's multi-process
    runtime explicitly (e.g. several processes on one CPU machine). Without them it
    starts when the environment describes several processes (`cluster_environment`)."""
    _FLAGS.update(
        coordinator=flags.DEFINE_string(
            "coordinator", None, "host:port of process 0's coordinator service "
            "(jax.distributed.initialize); with --num_processes and --process_id."),
        num_processes=flags.DEFINE_integer(
            "num_processes", None, "Number of processes of a multi-process run."),
        process_id=flags.DEFINE_integer(
            "process_id", None, "This process's index in [0, num_processes)."))


def cluster_environment(env=None) -> str | None:
    """Which multi-process launcher the environment comes from (None: one process):
    RLVR_DISTRIBUTED=1 (set by launch/tpu_pod.sh: a Cloud TPU VM pod, which JAX
    finds through the VM's metadata server), JAX_COORDINATOR_ADDRESS, a SLURM step
    with several tasks, Open MPI with several ranks, or TPU_WORKER_HOSTNAMES naming
    several workers (TPUs on Kubernetes). `jax.distributed.initialize()` reads the
    rest (addresses, counts, this process's index) from the same environment."""
    env = os.environ if env is None else env
    if env.get("RLVR_DISTRIBUTED") == "1":
        return "RLVR_DISTRIBUTED"

    def count(name: str) -> int:
        value = env.get(name, "")
        return int(value) if value.isdigit() else 1

    if env.get("JAX_COORDINATOR_ADDRESS"):
        return "JAX_COORDINATOR_ADDRESS"
    if "SLURM_STEP_ID" in env and count("SLURM_NTASKS") > 1:
        return "SLURM"
    if count("OMPI_COMM_WORLD_SIZE") > 1:
        return "Open MPI"
    if len([h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]) > 1:
        return "TPU pod"
    return None


def init() -> bool:
    """Starts JAX's multi-process runtime when asked (`define_flags`) or when
    the environment describes several processes; returns whether it did. Must run
    before anything starts a JAX backend. Processes other than 0 then print nothing
    on stdout (warnings and errors still go to stderr)."""
    values = {k: v.value for k, v in _FLAGS.items()}
    explicit = {k: v for k, v in values.items() if v is not None}
    if explicit:
        missing = sorted(set(values) - set(explicit))
        if missing:
            raise ValueError(f"--{', --'.join(missing)} missing: a multi-process run needs "
                             "--coordinator, --num_processes and --process_id together")
        n, index = explicit["num_processes"], explicit["process_id"]
        if n < 1 or not 0 <= index < n:
            raise ValueError(f"--process_id={index} is not in [0, --num_processes={n})")
        if n == 1:
            return False
        kwargs = {"coordinator_address": explicit["coordinator"], "num_processes": n,
                  "process_id": index}
    elif cluster_environment() is None:
        return False
    else:
        kwargs = {}
    # CPU devices of different processes talk over TCP (gloo); GPU/TPU ignore this
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # preemption is decided by the step loop (rl.checkpoint.agreement); JAX's preemption
    # service would replace the SIGTERM handler that ends a run still starting up
    jax.config.update("jax_enable_preemption_service", False)
    jax.distributed.initialize(**kwargs, heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S)
    if jax.process_index() != 0:  # at the descriptor: the C++ libraries' prints too
        sys.stdout.flush()
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return True
