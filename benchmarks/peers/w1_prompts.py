"""W1's prompts for the peer scripts: countdown problems phrased as our countdown task
phrases them ("Using the numbers 3, 13, 18, make 34. "). Standard library only, so
it imports in the peers' own virtualenvs (the scripts' directory is on sys.path)."""

from __future__ import annotations

import random


def countdown_prompts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        nums = [rng.randint(1, 30) for _ in range(3)]
        out.append(f"Using the numbers {', '.join(map(str, nums))}, make {rng.randint(1, 60)}. ")
    return out
