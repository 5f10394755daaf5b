"""What `jax.distributed.initialize` gets in a SLURM GPU job (launch/distributed.py).

A 2-node × 8-GPU job is simulated: each task's environment as srun sets it
(tests/launch/slurm_env.py), no SLURM and no GPU. `initialize_kwargs(env)` is what
`init` passes; JAX's cluster detection (the step `jax.distributed.initialize` runs
before it connects) fills in the rest from the same environment. Together they give
each task its coordinator, process count, process index and local devices, and
the local devices, mapped through the task's CUDA_VISIBLE_DEVICES to (node, GPU),
must cover the job's 16 GPUs exactly once.
"""

import os

import jax
import pytest
from jax._src import clusters  # what jax.distributed.initialize runs to fill in arguments

from launch import distributed
from tests.launch import slurm_env


def resolved(env: dict, kwargs: dict, monkeypatch) -> tuple:
    """(coordinator_address, num_processes, process_id, local_device_ids) as
    `jax.distributed.initialize(**kwargs)` would use them in a process with `env`."""
    with monkeypatch.context() as m:
        m.setattr(os, "environ", dict(env))
        return clusters.ClusterEnv.auto_detect_unset_distributed_params(
            kwargs.get("coordinator_address"), kwargs.get("num_processes"),
            kwargs.get("process_id"), kwargs.get("local_device_ids"), None, 300)


def gpus_used(envs: list[dict], local_ids: list[list[int]]) -> list[tuple[str, str]]:
    """(node, GPU) of every local device of every task: a local device id indexes the
    GPUs CUDA shows the process, i.e. the entries of its CUDA_VISIBLE_DEVICES."""
    return [(env["SLURMD_NODENAME"], env["CUDA_VISIBLE_DEVICES"].split(",")[i])
            for env, ids in zip(envs, local_ids, strict=True) for i in ids]


def changed(env: dict, change: dict) -> dict:
    """`env` with `change`'s variables set (None: removed)."""
    env = {**env, **change}
    return {k: v for k, v in env.items() if v is not None}


ALL_16 = sorted((node, str(gpu)) for node in slurm_env.NODES[:2] for gpu in range(8))


@pytest.mark.parametrize("layout", [
    dict(tasks_per_node=1),               # launch/slurm_gpu.sh: one process per node
    dict(tasks_per_node=8, bind=True),    # srun --ntasks-per-node=8 --gpus-per-task=1
    dict(tasks_per_node=8),               # 8 tasks per node, each seeing all 8 GPUs
])
def test_a_2_node_8_gpu_job_uses_every_gpu_once(layout, monkeypatch):
    envs = slurm_env.job(nodes=2, gpus=8, **layout)
    args = [resolved(env, distributed.initialize_kwargs(env), monkeypatch) for env in envs]
    coordinators, counts, indices, local_ids = zip(*args, strict=True)
    # process 0 (the first node of the step) serves; every task agrees on the address
    assert len(set(coordinators)) == 1 and coordinators[0].startswith("gpu017:")
    assert counts == (len(envs),) * len(envs)
    assert list(indices) == list(range(len(envs)))
    assert sorted(gpus_used(envs, local_ids)) == ALL_16
    if layout["tasks_per_node"] == 1:
        assert list(local_ids) == [list(range(8))] * 2


def test_jax_alone_gives_one_gpu_per_node_to_a_process_per_node(monkeypatch):
    """The bug initialize_kwargs fixes: JAX's SLURM detection sets local_device_ids to
    [SLURM_LOCALID], which is 0 on every node when a node runs one task."""
    envs = slurm_env.job(nodes=2, gpus=8, tasks_per_node=1)
    local_ids = [resolved(env, {}, monkeypatch)[3] for env in envs]
    assert local_ids == [[0], [0]]
    assert gpus_used(envs, local_ids) == [("gpu017", "0"), ("gpu018", "0")]


def test_the_gpu_count_comes_from_slurm_when_cuda_visible_devices_is_unset():
    env = slurm_env.task_env(1, 0, nodes=2, gpus=4)
    del env["CUDA_VISIBLE_DEVICES"]
    assert distributed.initialize_kwargs(env) == {"local_device_ids": [0, 1, 2, 3]}


def test_uneven_tasks_per_node_are_read_at_this_node():
    env = slurm_env.task_env(1, 0, nodes=2, gpus=8)
    env.update(SLURM_NTASKS="3", SLURM_STEP_TASKS_PER_NODE="2,1", SLURM_TASKS_PER_NODE="2,1")
    assert distributed.initialize_kwargs(env) == {"local_device_ids": list(range(8))}


@pytest.mark.parametrize("change", [
    {"SLURM_NTASKS": "1"},                      # one task: one process, nothing to start
    {"SLURM_STEP_ID": None},                    # sbatch's batch shell, not an srun step
    {"JAX_LOCAL_DEVICE_IDS": "0,1"},            # the user's choice: JAX reads it
    {"CUDA_VISIBLE_DEVICES": None, "SLURM_GPUS_ON_NODE": None, "JAX_PLATFORMS": "cpu"},
])
def test_nothing_is_passed_where_jax_needs_no_devices_from_us(change):
    env = changed(slurm_env.task_env(0, 0), change)
    assert distributed.initialize_kwargs(env) == {}


@pytest.mark.parametrize("change,message", [
    ({"CUDA_VISIBLE_DEVICES": None, "SLURM_GPUS_ON_NODE": None}, "no GPUs in its environment"),
    ({"SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_NTASKS": "4"},
     "2 SLURM tasks on this node share 8 GPUs"),
    ({"SLURM_STEP_TASKS_PER_NODE": "two"}, "cannot read SLURM_STEP_TASKS_PER_NODE"),
    ({"SLURM_NODEID": "5"}, "SLURM_NODEID=5 is past the 2 node"),
])
def test_a_layout_without_a_clear_device_choice_is_refused(change, message):
    env = changed(slurm_env.task_env(0, 0), change)
    with pytest.raises(ValueError, match=message):
        distributed.initialize_kwargs(env)


def test_init_passes_initialize_kwargs_to_jax(monkeypatch):
    env = slurm_env.task_env(1, 0)
    calls = []
    monkeypatch.setattr(os, "environ", env)
    monkeypatch.setattr(distributed, "_FLAGS", {})  # no --coordinator flags: the environment
    monkeypatch.setattr(jax.config, "update", lambda *a: None)  # leave this process's config
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
    assert distributed.init()
    # the SLURM task's devices, and the bound on a lost peer (launch/distributed.py)
    assert calls == [{"local_device_ids": list(range(8)),
                      "heartbeat_timeout_seconds": distributed.HEARTBEAT_TIMEOUT_S}]
