"""Shared test set-up: offline hub, repo root importable (config/ is not an installed package)."""

import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    """Paths of a tiny SD3 and a tiny SD pipeline, built once per test session."""
    from ddpo_grpo.tiny import build_tiny_sd, build_tiny_sd3

    root = tmp_path_factory.mktemp("tiny")
    build_tiny_sd3(root / "sd3")
    build_tiny_sd(root / "sd")
    return {"sd3": str(root / "sd3"), "sd": str(root / "sd")}
