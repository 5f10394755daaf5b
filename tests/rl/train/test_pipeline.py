"""The rollout thread's schedule (`rl.train.pipeline`): which version each call samples
under, capture and restart at a checkpoint, a failed call, a dropped batch. A fake
`produce` stands in for the sampler: its "batch" records the call, the version it was
given and the parameters it saw, so a wrong version or a stale weight shows."""

import threading

import pytest

from rl.train.pipeline import Pipeline, Produced, Stopped, Weights, call_version


def params_of(version):
    return {"w": version * 10}  # what the learner publishes as `version`


class Fake:
    """`produce` for the pipeline: a batch names its call, version and the params seen; the
    state after call c is its count of calls so far (a rollout's data position)."""

    def __init__(self, fail_at=None):
        self.fail_at, self.made = fail_at, 0

    def produce(self, call, params, version):
        if call == self.fail_at:
            raise RuntimeError(f"call {call} failed")
        self.made += 1
        assert params == params_of(version)
        return Produced({"call": call, "version": version, "w": params["w"]},
                        {"made": self.made, "after": call}, version)


def learn(pipe, weights, steps, start_version=0):
    """The learner: step n takes its batch, then publishes version n."""
    out = []
    for n in range(start_version + 1, steps + 1):
        call = pipe.next_to_take()
        out.append(pipe.take(call).batch)
        weights.publish(n, params_of(n))
    return out


@pytest.mark.parametrize("lag", [0, 1, 2, 4])
def test_call_c_samples_under_version_c_minus_1_minus_lag(lag):
    fake, weights = Fake(), Weights()
    pipe = Pipeline(fake.produce, weights, lag, last_call=lambda: 9)
    pipe.start(1, {"made": 0, "after": 0})
    weights.publish(0, params_of(0))
    batches = learn(pipe, weights, 9)
    pipe.stop()
    assert [b["call"] for b in batches] == list(range(1, 10))
    assert [b["version"] for b in batches] == [max(0, c - 1 - lag) for c in range(1, 10)]
    # a batch is never from a version newer than the learner's (step c trains at c - 1)
    assert all(b["version"] <= c - 1 for c, b in enumerate(batches, 1))


def test_a_capture_restarts_into_the_same_batches():
    lag, steps = 2, 8
    straight_weights, fake = Weights(), Fake()
    pipe = Pipeline(fake.produce, straight_weights, lag, last_call=lambda: steps)
    pipe.start(1, {"made": 0, "after": 0})
    straight_weights.publish(0, params_of(0))
    straight = learn(pipe, straight_weights, steps)
    pipe.stop()

    weights, fake = Weights(), Fake()
    pipe = Pipeline(fake.produce, weights, lag, last_call=lambda: steps)
    pipe.start(1, {"made": 0, "after": 0})
    weights.publish(0, params_of(0))
    first = learn(pipe, weights, 3)
    through = pipe.through(3 - 1)  # the checkpoint at the end of step 3 (learner version 3)
    ready, state = pipe.capture(through)
    assert through == 3 + lag and sorted(ready) == [4, 5] and state["after"] == through
    pipe.stop()

    weights, fake = Weights(), Fake()
    fake.made = state["made"]
    resumed = Pipeline(fake.produce, weights, lag, last_call=lambda: steps)
    resumed.start(through + 1, state, ready, taken=3, floor=3)
    weights.publish(3, params_of(3))
    rest = learn(resumed, weights, steps, start_version=3)
    resumed.stop()
    assert first + rest == straight


def test_an_error_in_a_call_is_raised_by_the_learners_take():
    weights = Weights()
    pipe = Pipeline(Fake(fail_at=3).produce, weights, 1, last_call=lambda: 5)
    pipe.start(1, {"made": 0, "after": 0})
    weights.publish(0, params_of(0))
    learn(pipe, weights, 2)
    with pytest.raises(RuntimeError, match="call 3 failed"):
        pipe.take(3)
    pipe.stop()


def test_a_dropped_batch_is_skipped_and_the_lag_is_kept():
    lag = 1
    assert [call_version(c, lag, {3}) for c in range(1, 7)] == [0, 0, 1, 1, 2, 3]
    weights = Weights()
    pipe = Pipeline(Fake().produce, weights, lag, last_call=lambda: 6)
    pipe.drop(3)
    pipe.start(1, {"made": 0, "after": 0}, dropped={3})
    weights.publish(0, params_of(0))
    batches = learn(pipe, weights, 5)
    pipe.stop()
    assert [b["call"] for b in batches] == [1, 2, 4, 5, 6]
    # step n trains at version n - 1: after the drop the sampler is again one version behind
    assert [n - 1 - b["version"] for n, b in enumerate(batches, 1)] == [0, 1, 1, 1, 1]


def test_a_restart_after_a_drop_uses_no_version_older_than_its_own():
    # restarted at learner version 3 with call 5 next and call 4 dropped: call 5 would need
    # version 2 (5 - 1 - 1 - 1), which is gone; it takes 3, and the lag comes back at call 6
    weights = Weights()
    pipe = Pipeline(Fake().produce, weights, 1, last_call=lambda: 7)
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
