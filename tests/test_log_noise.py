"""What a run prints is ours: the library messages that are noise for our runs (loading and shard-writing progress
bars, a component absent on purpose "cannot be saved", no LoRA keys for the text encoders, diffusers' torch_dtype
deprecation) are kept out of a tiny run's output and of sampling its result (ddpo_grpo/console.py
quiet_library_logs). The end-to-end check runs in a separate process, so that every handler writes to the captured
stdout and stderr (slow: 35 s on the shared machine); the fast checks below catch the same messages in-process at
their sources: diffusers' loggers, warnings and the progress bars on stderr."""

import logging
import os
import subprocess
import sys
import textwrap
import warnings
from types import SimpleNamespace

import pytest
import torch
from ml_collections import ConfigDict

from tests.conftest import REPO

#: fragments of the library lines a run printed before (issue 33), one per kind of noise
NOISE = (
    "cannot be saved",
    "No LoRA keys associated",
    "Loading pipeline components",
    "Loading weights",
    "Writing model shards",
    "`torch_dtype` is deprecated",
)


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_a_tiny_run_and_sampling_its_result_print_no_library_noise(tmp_path):
    (tmp_path / "p.txt").write_text("a red circle\n")
    code = textwrap.dedent(
        f"""
        import sys
        from tests.conftest import load_script
        logs = {str(tmp_path / "logs")!r}
        train = ["train.py", "--config=config/quickstart.py:tiny", "--config.logdir=" + logs, "--config.run_name=run",
                 "--config.num_epochs=1", "--config.sample.num_steps=2", "--config.sample.eval_num_steps=2",
                 "--config.logging.progress=False"]
        assert load_script("train").main(train) == 0
        sample = ["--model", logs + "/run", "--prompts", {str(tmp_path / "p.txt")!r}, "--out", logs + "/out",
                  "--device", "cpu"]
        assert load_script("sample").main(sample) == 0
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    printed = proc.stdout + proc.stderr
    assert proc.returncode == 0, printed[-3000:]
    assert "final model written to" in printed and "1/1 samples written to" in printed  # the run's own lines
    found = [line for line in printed.splitlines() if any(n in line for n in NOISE)]
    assert not found, "library noise in the output:\n" + "\n".join(line[:200] for line in found)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def heard(capsys):
    """Everything diffusers and transformers log, warnings raised and stderr written while the test runs: a function
    returning the lines that hold a NOISE fragment."""
    handler, libraries = _Records(), [logging.getLogger("diffusers"), logging.getLogger("transformers")]
    for logger in libraries:
        logger.addHandler(handler)
    with warnings.catch_warnings(record=True) as raised:
        warnings.simplefilter("always")
        yield lambda: [
            line
            for line in handler.messages + [str(w.message) for w in raised] + capsys.readouterr().err.splitlines()
            if any(n in line for n in NOISE)
        ]
    for logger in libraries:
        logger.removeHandler(handler)


@pytest.mark.usefixtures("one_thread")
def test_building_the_tiny_model_and_loading_a_lora_result_are_quiet(tmp_path, heard):
    """The tiny SD3 built for a run (saved without T5: "cannot be saved", shards written) and a LoRA run's final/
    loaded in its dtype (loading bars, torch_dtype, no LoRA keys for the text encoders): nothing of NOISE."""
    from ddpo_grpo.checkpoint import RunState
    from ddpo_grpo.policies import build_policy, load_pipeline
    from ddpo_grpo.wiring.model import model_path

    config = ConfigDict({"pretrained": {"model": "", "tiny": "sd3"}, "logdir": str(tmp_path)})
    acc = SimpleNamespace(is_main_process=True, wait_for_everyone=lambda: None)
    path = model_path(config, acc)
    policy = build_policy(load_pipeline(path, torch_dtype=torch.float32), resolution=32)
    policy.add_lora(rank=2, alpha=2, target_modules=["to_q"])
    state = RunState(
        tmp_path / "run",
        ConfigDict({"train": {}}),
        SimpleNamespace(params={}, ema=None, reference=None, sampler=None),
        None,
        None,
        None,
    )
    state.export(policy, {"kind": "lora", "base_model": path, "sampling": {}})
    load_pipeline(str(tmp_path / "run"), torch_dtype=torch.float32)
    assert heard() == []
