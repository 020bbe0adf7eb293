"""config.cudnn_attention: the run's process turns torch's cuDNN attention off unless the config allows it.

The fault it avoids (cuDNN's attention backward failing in FLUX.1-dev LoRA training on an H200, torch 2.11 + CUDA
13.0) cannot happen on a CPU, which never runs that kernel; what can be checked here is that the switch is the
config's, in both directions, and that it is off by default."""

import pytest
import torch

from config.base import get_config
from ddpo_grpo import wiring


@pytest.fixture
def restore_flag():
    """The flag as it was, and accelerate's one-per-process state fresh on both sides (as in a run's own process)."""
    from accelerate.state import AcceleratorState

    before = torch.backends.cuda.cudnn_sdp_enabled()
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)
    torch.backends.cuda.enable_cudnn_sdp(before)


@pytest.mark.parametrize("allowed", [False, True])
def test_the_accelerator_sets_cudnn_attention_from_the_config(restore_flag, allowed):
    torch.backends.cuda.enable_cudnn_sdp(not allowed)
    config = get_config()
    config.cudnn_attention = allowed
    wiring.accelerator(config)
    assert torch.backends.cuda.cudnn_sdp_enabled() is allowed


def test_cudnn_attention_is_off_by_default():
    assert get_config().cudnn_attention is False
