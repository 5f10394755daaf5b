"""DAPO's soft overlong penalty against a re-derivation of verl's reward manager."""

import numpy as np
import pytest

from rl.algorithms import overlong


def reference(length, max_len, buffer, factor):
    """verl DAPORewardManager: expected_len = max_resp_len - buffer_len,
    overlong_reward = min(-(valid_response_length - expected_len) / buffer_len * factor, 0)."""
    expected = max_len - buffer
    return min(-(length - expected) / buffer * factor, 0.0)


@pytest.mark.parametrize("buffer,factor", [(4, 1.0), (16, 0.5), (63, 2.0)])
def test_penalty_matches_verl(buffer, factor):
    lengths = np.arange(0, 65)
    got = overlong.penalty(lengths, max_len=64, buffer=buffer, factor=factor)
    want = [reference(n, 64, buffer, factor) for n in lengths]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert got[64] == pytest.approx(-factor)            # the limit: the full penalty
    assert np.all(got[:64 - buffer + 1] == 0)           # before the buffer: nothing
    assert np.all(np.diff(got[64 - buffer:]) < 0)       # linear over the buffer


def test_off_and_bad_settings():
    np.testing.assert_array_equal(overlong.penalty([64, 10], max_len=64, buffer=0), 0.0)
    with pytest.raises(ValueError, match="rl.overlong.buffer must be in"):
        overlong.check(64, 1.0, 64)
    with pytest.raises(ValueError, match="rl.overlong.factor"):
        overlong.check(8, -1.0, 64)
