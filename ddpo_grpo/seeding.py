"""Deterministic seeds for independent random streams (numpy only, cheap to import).

Every random draw of a run (initial noise, SDE noise, window placement, shuffling, evaluation noise)
is seeded from integers such as (config.seed, epoch, process, batch), so a resumed run replays
exactly what an uninterrupted one would have drawn.
"""

import numpy as np


def derive_seed(*parts: int) -> int:
    """A well-mixed 63-bit seed from integers (numpy SeedSequence)."""
    return int(np.random.SeedSequence([int(p) & 0xFFFFFFFF for p in parts]).generate_state(2, dtype=np.uint64)[0] >> 1)
