"""Shared test set-up: offline hub, repo root importable (config/ is not an installed package)."""

import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
