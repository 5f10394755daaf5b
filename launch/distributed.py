"""JAX's multi-process runtime for the entry points (docs/scaling.md).

    distributed.define_flags()   # --coordinator, --num_processes, --process_id
    distributed.init()           # before anything starts a JAX backend

`init` calls `jax.distributed.initialize(**kwargs)` when the flags ask for it or
the environment describes several processes (`cluster_environment`); for the
latter, `initialize_kwargs(env)` says what the project passes.
"""

from __future__ import annotations

import os
import re
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


def _count(env, name: str) -> int:
    value = env.get(name, "")
    return int(value) if value.isdigit() else 1


def _slurm_step(env) -> bool:
    """A SLURM job step (srun) of several tasks; sbatch's own shell has no step id."""
    return "SLURM_STEP_ID" in env and _count(env, "SLURM_NTASKS") > 1


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
    if env.get("JAX_COORDINATOR_ADDRESS"):
        return "JAX_COORDINATOR_ADDRESS"
    if _slurm_step(env):
        return "SLURM"
    if _count(env, "OMPI_COMM_WORLD_SIZE") > 1:
        return "Open MPI"
    if len([h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]) > 1:
        return "TPU pod"
    return None


def _tasks_on_node(env) -> int:
    """The step's task count on this node: SLURM_STEP_TASKS_PER_NODE (or
    SLURM_TASKS_PER_NODE), e.g. `8(x2)` or `2,1`, at SLURM_NODEID."""
    spec = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", "")
    counts = []
    for item in spec.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if match is None:
            raise ValueError(f"cannot read SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE "
                             f"{spec!r} (expected e.g. 8(x2) or 2,1)")
        counts += [int(match[1])] * int(match[2] or 1)
    node = int(env.get("SLURM_NODEID", "0"))
    if node >= len(counts):
        raise ValueError(f"SLURM_NODEID={node} is past the {len(counts)} node(s) of "
                         f"SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE {spec!r}")
    return counts[node]


def initialize_kwargs(env=None) -> dict:
    """The arguments `init` passes to `jax.distributed.initialize` for the multi-process
    environment `env` (os.environ by default); a pure function of it.

    JAX's own cluster detection finds the coordinator, the process count and this
    process's index (SLURM_STEP_NODELIST's first host, SLURM_NTASKS, SLURM_PROCID;
    Open MPI's and TPU pods' equivalents), so those are not passed. In a SLURM step
    it also sets `local_device_ids=[SLURM_LOCALID]` (one GPU per process), which
    with one task per node (launch/slurm_gpu.sh) leaves every node's process one GPU.
    So for SLURM this passes `local_device_ids`, indices among the GPUs CUDA shows
    the process (CUDA_VISIBLE_DEVICES, which SLURM sets, renumbered from 0):
    - one task on the node: all of them (their count: CUDA_VISIBLE_DEVICES, else
      SLURM_GPUS_ON_NODE);
    - one GPU visible (SLURM bound one to each task, `--gpus-per-task=1`): [0];
    - as many GPUs visible as tasks on the node: [SLURM_LOCALID] (JAX's choice).
    Anything else raises ValueError, as does a GPU count the environment does not
    give (unless JAX_PLATFORMS names cpu first: no GPUs to choose). A user's
    JAX_LOCAL_DEVICE_IDS is left to JAX, which reads it."""
    env = os.environ if env is None else env
    if not _slurm_step(env) or env.get("JAX_LOCAL_DEVICE_IDS"):
        return {}
    visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    gpus = len(visible) or int(env.get("SLURM_GPUS_ON_NODE", "0") or 0)
    if not gpus:
        if env.get("JAX_PLATFORMS", "").split(",")[0].strip() == "cpu":
            return {}
        raise ValueError("a SLURM step of several tasks, but no GPUs in its environment "
                         "(neither CUDA_VISIBLE_DEVICES nor SLURM_GPUS_ON_NODE): ask for "
                         "them (sbatch --gpus-per-node=G; launch/slurm_gpu.sh does), set "
                         "JAX_LOCAL_DEVICE_IDS, or JAX_PLATFORMS=cpu for a CPU run")
    tasks = _tasks_on_node(env)
    if tasks == 1:
        return {"local_device_ids": list(range(gpus))}
    if gpus == 1:
        return {"local_device_ids": [0]}
    if gpus == tasks:
        return {"local_device_ids": [int(env["SLURM_LOCALID"])]}
    raise ValueError(f"{tasks} SLURM tasks on this node share {gpus} GPUs: run one task per "
                     "node (launch/slurm_gpu.sh) or one per GPU (srun --gpus-per-task=1), "
                     "or set JAX_LOCAL_DEVICE_IDS")


def init() -> bool:
    """Starts JAX's multi-process runtime when asked (`define_flags`) or when
    the environment describes several processes (`initialize_kwargs` adds the
    local devices in both cases); returns whether it did. Must run
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
                  "process_id": index, **initialize_kwargs()}
    elif cluster_environment() is None:
        return False
    else:
        kwargs = initialize_kwargs()
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
