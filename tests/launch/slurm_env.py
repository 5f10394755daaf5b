"""The environment srun gives each task of a SLURM GPU job, simulated (no SLURM, no GPU).

    task_env(node=1, local=0, nodes=2, gpus=8, tasks_per_node=1)

The variables and formats are those srun sets in a task (srun(1), "OUTPUT ENVIRONMENT
VARIABLES"): the job and step, the task counts (`8(x2)`: 8 tasks on each of 2 nodes),
this task's node, global and local index, the nodes as a hostlist expression, and
the node's GPUs. SLURM sets CUDA_VISIBLE_DEVICES to the GPUs of the task: all the
node's GPUs of the step, or with `bind` (`--gpus-per-task=1`, which binds one GPU
to each task) the task's own one.
"""

NODES = ("gpu017", "gpu018", "gpu019", "gpu020")
NODELIST = "gpu[017-020]"


def task_env(node: int, local: int, *, nodes: int = 2, gpus: int = 8,
             tasks_per_node: int = 1, bind: bool = False) -> dict[str, str]:
    tasks = nodes * tasks_per_node
    nodelist = NODELIST if nodes == len(NODES) else f"gpu[017-{16 + nodes:03d}]"
    all_gpus = ",".join(str(g) for g in range(gpus))
    return {
        "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_JOB_NAME": "slurm_gpu.sh",
        "SLURM_NTASKS": str(tasks), "SLURM_NPROCS": str(tasks),
        "SLURM_NTASKS_PER_NODE": str(tasks_per_node),
        "SLURM_TASKS_PER_NODE": f"{tasks_per_node}(x{nodes})",
        "SLURM_STEP_TASKS_PER_NODE": f"{tasks_per_node}(x{nodes})",
        "SLURM_NNODES": str(nodes), "SLURM_STEP_NUM_NODES": str(nodes),
        "SLURM_JOB_NODELIST": nodelist, "SLURM_NODELIST": nodelist,
        "SLURM_STEP_NODELIST": nodelist,
        "SLURM_NODEID": str(node), "SLURMD_NODENAME": NODES[node],
        "SLURM_PROCID": str(node * tasks_per_node + local), "SLURM_LOCALID": str(local),
        "SLURM_GPUS_ON_NODE": str(gpus), "SLURM_GPUS_PER_NODE": str(gpus),
        "SLURM_JOB_GPUS": all_gpus, "SLURM_STEP_GPUS": all_gpus,
        "CUDA_VISIBLE_DEVICES": str(local) if bind else all_gpus,
    }


def job(*, nodes: int = 2, gpus: int = 8, tasks_per_node: int = 1,
        bind: bool = False) -> list[dict[str, str]]:
    """Every task's environment, in SLURM_PROCID order."""
    return [task_env(node, local, nodes=nodes, gpus=gpus, tasks_per_node=tasks_per_node,
                     bind=bind)
            for node in range(nodes) for local in range(tasks_per_node)]
