"""rl.train.arms.Batcher's turns: at most `workers` arms compute at once, and an arm
waiting for its sampler batch gives its turn away (else a group of more arms than turns
could never fill a batch)."""

import threading
import time
from types import SimpleNamespace

import pytest

from rl.train import arms


class _Counting(arms.Batcher):
    """The real Batcher's scheduling; its sampler call only records who it served (the
    sampler itself is tested in tests/launch/test_arms.py)."""

    def __init__(self, n: int, workers: int):
        super().__init__(frozen=None, arms=n, workers=workers)
        self.batches: list[list[int]] = []

    def _call(self, part):
        self.batches.append([r.arm for r in part])
        return [(r.arm, None, len(part)) for r in part]


# what a request's batch key reads of its run
_RUN = SimpleNamespace(cfg=SimpleNamespace(sampling=SimpleNamespace(page_size=16,
                                                                    segment_len=64)),
                       sampling_params=None)


def _run_arms(arm, n: int) -> None:
    """Runs arm(0..n-1) in threads; fails if one is still waiting after 20 s (deadlock)."""
    threads = [threading.Thread(target=arm, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    assert not any(t.is_alive() for t in threads), "an arm waits forever"


def _group(n: int, workers: int, rounds: int = 3):
    batcher = _Counting(n, workers)
    lock, busy, peak, errors = threading.Lock(), [0], [0], []

    def compute():
        with lock:
            busy[0] += 1
            peak[0] = max(peak[0], busy[0])
        time.sleep(0.002)  # long enough for another thread to run meanwhile
        with lock:
            busy[0] -= 1

    def arm(i: int) -> None:
        try:
            with batcher.turn():
                for _ in range(rounds):
                    compute()
                    assert batcher.sample(i, _RUN, None, [0], 1, None)[0] == i
                compute()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            batcher.leave(i)

    _run_arms(arm, n)
    assert not errors, errors
    return batcher, peak[0]


@pytest.mark.parametrize("workers", [1, 2])
def test_at_most_workers_compute_and_every_batch_holds_every_arm(workers):
    batcher, peak = _group(4, workers)
    assert peak <= workers
    assert batcher.batches == [[0, 1, 2, 3]] * 3  # waiting gave the turn away: no deadlock


def test_without_a_limit_all_arms_may_compute():
    batcher, peak = _group(4, 0)
    assert batcher.turns is None and batcher.batches == [[0, 1, 2, 3]] * 3
    assert peak <= 4


def test_a_request_that_cannot_be_keyed_fails_every_arm_of_its_batch_not_hangs():
    batcher = _Counting(2, 1)
    errors = []

    def arm(i: int) -> None:
        try:
            with batcher.turn():
                batcher.sample(i, _RUN if i == 0 else None, None, [0], 1, None)
        except AttributeError as e:  # arm 1's run has no config
            errors.append(i)
            del e
        finally:
            batcher.leave(i)

    _run_arms(arm, 2)
    assert sorted(errors) == [0, 1] and batcher.batches == []


def test_an_arm_with_non_finite_adapters_is_refused_and_the_others_are_served():
    import jax.numpy as jnp  # noqa: PLC0415

    batcher = _Counting(3, 0)
    got = {}

    def arm(i: int) -> None:
        adapters = {"a": jnp.array([1.0, jnp.nan if i == 1 else 2.0])}
        try:
            got[i] = batcher.sample(i, _RUN, adapters, [0], 1, None)[0]
        except FloatingPointError as e:
            got[i] = str(e)
        finally:
            batcher.leave(i)

    _run_arms(arm, 3)
    assert got[0] == 0 and got[2] == 2 and "arm 1's adapters hold NaN or inf" in got[1]
    assert batcher.batches == [[0, 2]]
