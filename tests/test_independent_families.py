"""The library trains pipelines it did not build: each family of tests/independent_families.py (built from diffusers /
transformers classes alone, in variants ``ddpo_grpo.tiny`` does not make) goes through the same end-to-end check as
the registered families (tests/test_family_train.py: 2 epochs of ``scripts/train.py``, every metric finite,
``train/logp_mismatch`` ≤ 1e-4, ``final/`` loads back and its LoRA changes the plain pipeline's samples).

Issue 24's "done when" (docs/experiments/2026-11-25-model-families.md §4), once experiments/families_done_when.py.
Slow: one train.py process per family (``python -m pytest -m slow tests/test_independent_families.py``).
"""

from __future__ import annotations

import pytest

from ddpo_grpo.policies import families
from tests.independent_families import FAMILIES, build
from tests.test_family_train import check_trains_and_exports


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_independent_pipeline_trains_through_the_cli_and_exports(family, tmp_path):
    model = tmp_path / "model"
    spec = families()[build(family, model)]
    check_trains_and_exports(spec, str(model), tmp_path)
