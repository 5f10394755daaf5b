"""The rollout thread's schedule (`rl.train.pipeline`): which version each call samples
under, capture and restart at a checkpoint, a failed call, a dropped batch. A fake
`produce` stands in for the sampler: its "batch" records the call, the version it was
given and the parameters it saw, so a wrong version or a stale weight shows."""

import threading

import pytest

from rl.train.pipeline import CallFailed, Pipeline, Produced, Stopped, Weights, call_version


def params_of(version):
    return {"w": version * 10}  # what the learner publishes as `version`


class Fake:
    """`produce` for the pipeline: a batch names its call, version and the params seen; the
    state after call c is its count of calls so far (a rollout's data position)."""

    def __init__(self, fail_at=None):
        self.fail_at, self.made, self.skipped = fail_at, 0, []

    def skip(self, call):
        self.skipped.append(call)
        return {"made": self.made, "after": call}

    def produce(self, call, params, version):
        if call == self.fail_at:
            raise RuntimeError(f"call {call} failed")
        self.made += 1
        assert params == params_of(version)
        return Produced({"call": call, "version": version, "w": params["w"]},
                        {"made": self.made, "after": call}, version)


def pipeline_of(fake, weights, lag, last, **kw):
    return Pipeline(fake.produce, weights, lag, last_call=lambda: last, skip=fake.skip, **kw)


def learn(pipe, weights, steps, start_version=0):
    """The learner: step n takes its batch, then publishes version n."""
    out = []
    for n in range(start_version + 1, steps + 1):
        call = pipe.next_to_take()
        out.append(pipe.take(call).batch)
        weights.publish(n, params_of(n))
        pipe.pump(n - 1)  # inline pipelines make their calls here
    return out


def start(pipe, weights):
    pipe.start(1, {"made": 0, "after": 0})
    weights.publish(0, params_of(0))


@pytest.mark.parametrize("threaded", [True, False])
@pytest.mark.parametrize("lag", [0, 1, 2, 4])
def test_call_c_samples_under_version_c_minus_1_minus_lag(lag, threaded):
    fake, weights = Fake(), Weights()
    pipe = pipeline_of(fake, weights, lag, 9, threaded=threaded)
    start(pipe, weights)
    batches = learn(pipe, weights, 9)
    pipe.stop()
    assert [b["call"] for b in batches] == list(range(1, 10))
    assert [b["version"] for b in batches] == [max(0, c - 1 - lag) for c in range(1, 10)]
    # a batch is never from a version newer than the learner's (step c trains at c - 1)
    assert all(b["version"] <= c - 1 for c, b in enumerate(batches, 1))


def test_a_capture_restarts_into_the_same_batches():
    lag, steps = 2, 8
    weights, fake = Weights(), Fake()
    pipe = pipeline_of(fake, weights, lag, steps)
    start(pipe, weights)
    straight = learn(pipe, weights, steps)
    pipe.stop()

    weights, fake = Weights(), Fake()
    pipe = pipeline_of(fake, weights, lag, steps)
    start(pipe, weights)
    first = learn(pipe, weights, 3)
    # the checkpoint at the end of step 3 (learner version 3): calls up to version 2
    ready, state, through = pipe.capture(pipe.through(3 - 1))
    assert through == 3 + lag and sorted(ready) == [4, 5] and state["after"] == through
    pipe.stop()

    weights, fake = Weights(), Fake()
    fake.made = state["made"]
    resumed = pipeline_of(fake, weights, lag, steps)
    resumed.start(through + 1, state, ready, taken=3, floor=3)
    weights.publish(3, params_of(3))
    rest = learn(resumed, weights, steps, start_version=3)
    resumed.stop()
    assert first + rest == straight


@pytest.mark.parametrize("threaded", [True, False])
def test_a_failed_call_is_raised_by_its_take_and_a_capture_keeps_what_came_before(threaded):
    weights = Weights()
    pipe = pipeline_of(Fake(fail_at=4), weights, 1, 6, threaded=threaded)
    start(pipe, weights)
    learn(pipe, weights, 2)
    # a checkpoint at step 2 would hold calls 3 and 4: call 4 failed, so it holds call 3
    ready, state, through = pipe.capture(pipe.through(2 - 1))
    assert sorted(ready) == [3] and through == 3 and state["after"] == 3
    learn(pipe, weights, 3, start_version=2)
    with pytest.raises(CallFailed, match="call 4 failed") as failed:
        pipe.take(4)
    assert failed.value.call == 4
    pipe.stop()


def test_a_dropped_call_is_skipped_not_made_and_the_lag_is_kept():
    lag = 1
    assert [call_version(c, lag, {3}) for c in range(1, 7)] == [0, 0, 1, 1, 2, 3]
    weights, fake = Weights(), Fake(fail_at=3)  # the drop is what lets the run go on
    pipe = pipeline_of(fake, weights, lag, 6)
    pipe.drop(3)
    pipe.start(1, {"made": 0, "after": 0}, dropped={3})
    weights.publish(0, params_of(0))
    batches = learn(pipe, weights, 5)
    pipe.stop()
    assert [b["call"] for b in batches] == [1, 2, 4, 5, 6] and fake.skipped == [3]
    # step n trains at version n - 1: after the drop the sampler is again one version behind
    assert [n - 1 - b["version"] for n, b in enumerate(batches, 1)] == [0, 1, 1, 1, 1]


def test_a_restart_after_a_drop_uses_no_version_older_than_its_own():
    # restarted at learner version 3 with call 5 next and call 4 dropped: call 5 would need
    # version 2 (5 - 1 - 1 - 1), which is gone; it takes 3, and the lag comes back at call 6
    weights = Weights()
    pipe = pipeline_of(Fake(), weights, 1, 7)
    pipe.start(5, {"made": 4, "after": 4}, dropped={4}, taken=3, floor=3)
    assert [pipe.version_of(c) for c in (5, 6, 7)] == [3, 3, 4]
    pipe.stop()


def test_stop_wakes_a_call_waiting_for_a_version():
    weights = Weights()
    waiting = threading.Thread(target=lambda: pytest.raises(Stopped, weights.get, 5))
    waiting.start()
    weights.stop()
    waiting.join(timeout=10)
    assert not waiting.is_alive()
