"""rl.checkpoint.agreement in one process: the verdict of a step (its failure, the signal,
the time-based save on a given clock) and the cause named for the log. The two-process
decisions are tests/launch/test_multiprocess_faults.py."""

import signal

import pytest

from rl.checkpoint import agreement


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_time_based_save_is_due_after_every_s_seconds_since_the_last_save():
    clock = Clock()
    agree = agreement.Agreement(every_s=10, clock=clock)
    clock.now += 9.99
    assert agree.decide(None, None) == agreement.Verdict(None, 0, False)
    clock.now += 0.01
    assert agree.decide(None, None).save_due
    agree.saved()  # the clock starts again at a save, whatever caused it
    clock.now += 5
    assert not agree.decide(None, None).save_due
    off = agreement.Agreement(every_s=0, clock=clock)
    clock.now += 1e6
    assert not off.decide(None, None).save_due


def test_a_verdict_carries_this_process_failure_and_signal():
    verdict = agreement.Agreement().decide(ValueError("bad row\nmore"), signal.SIGTERM)
    assert verdict == agreement.Verdict("ValueError: bad row", signal.SIGTERM, False)


def test_settle_in_one_process_raises_the_error_itself():
    agreement.settle(None)
    error = KeyError("k")
    with pytest.raises(KeyError) as raised:
        agreement.settle(error)
    assert raised.value is error


@pytest.mark.parametrize("causes, expected", [
    ([None, None], None),
    (["A: x"], "A: x"),
    ([None, "A: x"], "A: x (process 1)"),
    (["A: x", None, "B: y"], "A: x (process 0 and 1 more)"),
])
def test_the_cause_names_the_first_failed_process(causes, expected):
    assert agreement.failure_of(causes) == expected
