"""Shared test set-up: offline hub, repo root importable (config/ is not an installed package)."""

import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
# Tiny models gain nothing from intra-op threads, and on a shared 2-core machine spinning threads make
# them 10-30x slower; this also reaches the train.py / torchrun subprocesses the tests start.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import importlib.util  # noqa: E402

import pytest  # noqa: E402


def load_script(name: str):
    """Import scripts/<name>.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"{name}_script", REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory):
    """Paths of a tiny SD3 and a tiny SD pipeline, built once per test session."""
    from ddpo_grpo.tiny import build_tiny_sd, build_tiny_sd3

    root = tmp_path_factory.mktemp("tiny")
    build_tiny_sd3(root / "sd3")
    build_tiny_sd(root / "sd")
    return {"sd3": str(root / "sd3"), "sd": str(root / "sd")}


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread for the module (also when OMP_NUM_THREADS was set otherwise by the caller)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- slow tests: @pytest.mark.slow, run with --runslow (or RUN_SLOW=1); skipped otherwise
def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long check, run with --runslow (or RUN_SLOW=1)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow") or os.environ.get("RUN_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow (or RUN_SLOW=1)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
