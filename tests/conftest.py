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


def run_captured(script, argv: list[str]) -> tuple[int, str, str]:
    """``script.main(argv)`` with its stdout and stderr captured: ``(exit status, stdout, stderr)``."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = script.main(argv)
    return rc, out.getvalue(), err.getvalue()


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


def sampled(trainer, epoch: int = 0):
    """(Epoch, this process's scores per reward) of a trainer's sample and reward phases."""
    ep, timing = trainer.sample_phase(epoch)
    return ep, trainer.reward_phase(ep, timing)
