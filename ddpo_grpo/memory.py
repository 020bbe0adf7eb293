"""Memory levers of a run that are not sharding: the trajectory store's dtype and the encoders kept off the device.

``store_dtype(name)``: ``sample.store_dtype`` as a torch dtype (the rollout rounds the trajectory to it:
``rollout.sample_rollout``). ``offloaded(policy)`` splits the pipeline's frozen modules into the text encoders and
the decoder (VAE), which ``sample.offload_encoders`` keeps on the CPU; ``resident(modules, device)`` brings them to
the device for a block and sends them back after.
"""

from __future__ import annotations

import contextlib

import torch

#: sample.store_dtype -> torch dtype
STORE_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def store_dtype(name: str) -> torch.dtype:
    return STORE_DTYPES[name]


def offloaded(policy) -> tuple[list[torch.nn.Module], list[torch.nn.Module]]:
    """(text encoders and other frozen conditioning modules, the decoder: the VAE when the pipeline has one)."""
    vae = getattr(policy.pipeline, "vae", None)
    frozen = policy.frozen_modules()
    return [m for m in frozen if m is not vae], [m for m in frozen if m is vae]


@contextlib.contextmanager
def resident(modules, device, enabled: bool = True):
    """``modules`` on ``device`` inside the block, back on the CPU after (nothing moves when not ``enabled``)."""
    if not enabled:
        yield
        return
    for module in modules:
        module.to(device)
    try:
        yield
    finally:
        for module in modules:
            module.to("cpu")
