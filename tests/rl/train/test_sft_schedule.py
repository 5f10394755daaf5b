"""The SFT warm start's learning-rate schedule (rl/train/sft.py `learning_rate`)."""

import ml_collections
import numpy as np
import pytest

from rl.train import sft


def _section(steps, warmup, lr=1e-3):
    return ml_collections.ConfigDict({"steps": steps, "warmup_steps": warmup, "lr": lr})


@pytest.mark.parametrize("steps,warmup", [(1, 0), (1, 5), (2, 1), (10, 3)])
def test_warmup_then_cosine_to_a_tenth(steps, warmup):
    schedule = sft.learning_rate(_section(steps, warmup))
    w = max(min(warmup, steps - 1), 1)
    values = np.array([float(schedule(i)) for i in range(max(steps, w + 1) + 1)])
    assert np.all(np.isfinite(values)) and values[0] == 0.0
    np.testing.assert_allclose(values[w], 1e-3, rtol=1e-6)  # the peak, after the warmup
    np.testing.assert_allclose(values[max(steps, w + 1)], 1e-4, rtol=1e-5)  # lr / 10 at the end
