"""Fixtures shared by the launch tests.

`two_process_flat` runs tests/launch/multiprocess_config.py:flat with 2 processes × 4 CPU
devices (30-40 s here) once per test worker that runs a test reading what such a run writes
(the multi-process equality test and the reshard restore): once in all when both land on one
worker.
"""

import os

import pytest

from tests.launch import processes

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "tests", "launch", "multiprocess_config.py")


@pytest.fixture(scope="session")
def two_process_flat(tmp_path_factory):
    """(workdir, [process 0's, process 1's result]) of the 3-step flat run on a 2 × 2 × 2
    mesh: checkpoints 2 and 3 and the step-3 export. Tests copy the workdir before they
    write into it."""
    workdir = tmp_path_factory.mktemp("two_process_flat") / "run"
    results = processes.two_processes(f"{CONFIG}:flat", workdir)
    return workdir, results
