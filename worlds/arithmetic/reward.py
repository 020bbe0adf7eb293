r"""ArithmeticWorld's own judge as a reward, ``arithmetic``: exact match of the final answer by the world's rule
(``problems.is_correct``: the number after the FIRST ``####``), written apart from the core's ``verifiable`` reward
(which reads the LAST ``####``, else ``\boxed{}``, else the last number), so the two can score the same held-out
responses as two scorers (``scripts/evaluate.py --reward verifiable,arithmetic``).

Per-sample info: ``exact`` (1 / 0) and ``held_out``, the row's stratum (``template`` / ``number`` / ``both``; ``train``
for a train row), a group label (``--group_by held_out``)."""

from __future__ import annotations

import numpy as np

from reward_models import declare_kinds
from worlds.arithmetic.problems import is_correct


def arithmetic():
    """Factory of the ``arithmetic`` reward (no options)."""

    def score(samples, prompts, metadata):
        exact = [float(is_correct(text, str(row.get("ground_truth", "")))) for text, row in zip(samples, metadata)]
        strata = [((row.get("extra_info") or {}).get("held_out") or "train") for row in metadata]
        return np.asarray(exact, dtype=np.float32), {"exact": exact, "held_out": strata}

    return declare_kinds(score, "text")
