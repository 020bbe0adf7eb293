"""Kill and resume at scale: ``kill -9`` of one process of a two-process FSDP run in the middle of a sharded save.

The save is stopped deterministically by the ``checkpoint.sharded.HALT_ENV`` hook: process 1 sleeps inside the save
of epoch 1 after writing its shards, and the test sends it SIGKILL; torchrun then ends the other process. The last
good checkpoint (epoch 0) must be the newest complete one, the run must resume from it in the same directory, and its
result must equal a run that was never killed, bit for bit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from tests.test_scale import _args, _rows, _two

LORA = "final/pytorch_lora_weights.safetensors"


def _killed_in_save(args, run, cwd, *, rank: int, epoch: int) -> subprocess.CompletedProcess:
    """Launch two processes with the halt hook set, SIGKILL process ``rank`` once it sleeps in the save of
    ``epoch``, and return what the launcher left when it ended."""
    from ddpo_grpo.checkpoint.sharded import HALT_ENV

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", HALT_ENV: f"{rank}:{epoch}"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]
    launcher = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    marker = run / "checkpoints" / f".tmp-epoch_{epoch:06d}-sharded" / f"halted_rank{rank}"
    deadline = time.monotonic() + 600
    while not marker.is_file() and launcher.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert marker.is_file(), launcher.communicate(timeout=60)[1][-3000:]
    time.sleep(0.5)  # the pid is written before the sleep starts
    os.kill(int(marker.read_text()), signal.SIGKILL)
    out, err = launcher.communicate(timeout=300)
    return subprocess.CompletedProcess(cmd, launcher.returncode, out, err)


@pytest.mark.slow  # three launches of two processes (≈ 4 min on the loaded 2-core test machine)
def test_kill_9_during_a_sharded_save_leaves_the_last_checkpoint_and_resumes_bit_identically(tiny_dirs, tmp_path):
    sd3 = tiny_dirs["sd3"]
    from ddpo_grpo.checkpoint import find_checkpoint, leftovers, list_checkpoints

    logs = tmp_path / "logs"
    fsdp = ("--config.distributed.strategy=fsdp",)
    _two(_args(sd3, logs, "straight", 3, *fsdp), tmp_path)

    run = logs / "killed"
    killed = _killed_in_save(_args(sd3, logs, "killed", 3, *fsdp), run, tmp_path, rank=1, epoch=1)
    assert killed.returncode != 0
    assert [p.name for p in list_checkpoints(run)] == ["epoch_000000"]  # epoch 1 never committed
    assert find_checkpoint(run).name == "epoch_000000" and not (run / "final").exists()
    assert [p.name for p in leftovers(run)] == [".tmp-epoch_000001-sharded"]

    resumed = _two(_args(sd3, logs, "killed", 3, *fsdp, f"--config.resume_from={run}"), tmp_path)
    assert "resumed from" in resumed.stdout and "epoch_000000" in resumed.stdout
    assert not leftovers(run)  # the killed save's directory was removed at the start
    assert [r["epoch"] for r in _rows(run)] == [0, 1, 2]
    straight, again = load_file(str(logs / "straight" / LORA)), load_file(str(run / LORA))
    assert straight.keys() == again.keys() and all(torch.equal(straight[k], again[k]) for k in straight)
    for a, b in zip(_rows(logs / "straight"), _rows(run)):  # the same samples and rewards, epoch by epoch
        assert a["reward/mean"] == b["reward/mean"] and a["train/loss"] == b["train/loss"]
    state = json.loads((run / "checkpoints" / "epoch_000002" / "state.json").read_text())
    assert state["sharded"] and state["world_size"] == 2
