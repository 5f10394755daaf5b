"""The verifier worker pool: parallel scoring, hard timeouts, crashes, late collection."""

import os
import time

import numpy as np
import pytest

from rl import rewards
from rl.rewards import pool
from tests.rl.rewards import pool_verifiers  # noqa: F401 - registers "misbehave"

IMPORTS = ("tests.rl.rewards.pool_verifiers",)


def _items(completions):
    return [("misbehave", c, None, {}) for c in completions]


@pytest.fixture
def workers():
    p = pool.Pool(2, imports=IMPORTS, memory_limit=1 << 30)
    yield p
    p.close()


def test_items_are_spread_over_the_workers(workers):
    out = workers.run(_items(["pid"] * 8), timeout_s=60.0)
    assert set(out.scores.astype(int)) == set(workers.pids())
    assert len(set(workers.pids())) == 2 and os.getpid() not in workers.pids()


def test_hung_item_is_killed_at_its_timeout_and_the_rest_is_scored(workers):
    # "spin" never returns (a C loop no signal stops); the worker is killed and
    # replaced, and the items queued behind it are sent to the new worker.
    workers.run(_items(["ok", "ok"]), timeout_s=60.0)  # start both workers
    before = set(workers.pids())
    out = workers.run(_items(["spin", "ok", "ok", "ok", "ok", "ok"]), timeout_s=1.0)
    np.testing.assert_array_equal(out.scores, [0, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(out.timed_out, [1, 0, 0, 0, 0, 0])
    assert not out.crashed.any()
    after = set(workers.pids())
    assert len(after) == 2 and len(after & before) == 1  # one worker was replaced
    out = workers.run(_items(["ok"] * 4), timeout_s=60.0)  # still usable
    np.testing.assert_array_equal(out.scores, 1)


def test_dead_worker_is_replaced_and_counted(workers):
    out = workers.run(_items(["ok", "exit", "ok", "ok"]), timeout_s=60.0)
    np.testing.assert_array_equal(out.scores, [1, 0, 1, 1])
    np.testing.assert_array_equal(out.crashed, [0, 1, 0, 0])
    assert workers.crashes == 1


def test_memory_limit_scores_zero_without_killing_the_machine(workers):
    out = workers.run(_items(["hog", "ok"]), timeout_s=60.0)
    np.testing.assert_array_equal(out.scores, [0, 1])  # MemoryError -> 0 (or a crash)
    np.testing.assert_array_equal(workers.run(_items(["ok"]), timeout_s=60.0).scores, [1])


def test_timeout_is_the_items_own_time_even_when_collected_late(workers):
    # The caller is busy for longer than the timeout before collecting: items that
    # took far less than the timeout are scored, the one that took longer is not.
    pending = workers.submit(_items(["sleep:0.01", "sleep:3", "sleep:0.01", "ok"]),
                             timeout_s=1.5)
    time.sleep(4.0)
    out = pending.result()
    np.testing.assert_array_equal(out.scores, [1, 0, 1, 1])
    np.testing.assert_array_equal(out.timed_out, [0, 1, 0, 0])


def test_a_new_submit_collects_the_previous_batch(workers):
    first = workers.submit(_items(["ok"] * 3), timeout_s=60.0)
    second = workers.submit(_items(["ok"] * 2), timeout_s=60.0)
    np.testing.assert_array_equal(first.result().scores, [1, 1, 1])
    np.testing.assert_array_equal(second.result().scores, [1, 1])


def test_empty_batch_and_bad_arguments(workers):
    assert workers.run([], timeout_s=1.0).scores.shape == (0,)
    with pytest.raises(ValueError, match="timeout_s"):
        workers.submit(_items(["ok"]), timeout_s=0)
    with pytest.raises(ValueError, match="workers >= 1"):
        pool.Pool(0)


ADVERSARIAL = [
    "\\boxed{9^{9^{9^{9}}}}",
    "\\boxed{2^{2^{2^{2^{2^{2}}}}}}",
    "\\boxed{" + "{" * 5000 + "1" + "}" * 5000 + "}",
    "\\boxed{" + "(" * 5000 + "1" + ")" * 5000 + "}",
    "The answer is " + "1+" * 150_000 + "1",
    "\\boxed{" + "x" * 300_000 + "}",
    "\\boxed{5\x00}",
    "\\boxed{\\def\\a{\\a\\a}\\a}",
    "\\boxed{\\newcommand{\\x}{\\x}\\x}",
    "\\boxed{__import__('os').system('touch /tmp/pwned')}",
    "\\boxed{eval('5')}",
    "\\boxed{\\input{/etc/passwd}}",
    "\\boxed{(10^{10})!}",
    "\\boxed{5^{999999999999}}",
    "\\boxed{x^{10^{10}}}",
]


@pytest.mark.parametrize("workers_n", [0, 2])
def test_adversarial_inputs_score_zero_and_the_pool_stays_usable(workers_n):
    spec = rewards.RewardSpec.build("math", workers=workers_n, timeout_s=3.0)
    out = spec.score(ADVERSARIAL, ["5"] * len(ADVERSARIAL))
    np.testing.assert_array_equal(out.total, 0.0)
    assert not os.path.exists("/tmp/pwned")
    again = spec.score(["\\boxed{5}", "\\boxed{(x+1)^2}"], ["5", "x^2+2x+1"])
    np.testing.assert_array_equal(again.total, [1, 1])
