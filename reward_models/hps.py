"""``hps``: Human Preference Score v2 / v2.1 (Wu et al., 2023).

HPSv2 is an open_clip ViT-H-14 fine-tuned on human preference pairs (HPD v2); the score is the
cosine similarity of its image and prompt embeddings, exactly as ``hpsv2.score`` computes it
(``diag(image_features @ text_features.T)`` with L2-normalised features). Returned as float32
``[B]``, range ``[-1, 1]``; real images score about 0.2-0.35. The HPSv2 paper and leaderboard
report this number ×100 (e.g. "27.5"); multiply the weight in ``reward.fns`` if you want that.

Preprocessing follows HPSv2's evaluation transform: longest side resized to 224 (bicubic), padded
with black to a square, OpenAI CLIP mean/std (``resize_mode="longest"``); for square images this
is a plain resize.

Weights: ``HPS_v2.1_compressed.pt`` (or ``HPS_v2_compressed.pt`` for v2.0) from the Hugging Face
Hub repo ``xswu/HPSv2``, e.g. ``huggingface-cli download xswu/HPSv2 HPS_v2.1_compressed.pt``. The
file holds the complete fine-tuned model (``{"state_dict": ...}``), so no LAION weights are
needed beside it. It is loaded with ``torch.load(..., weights_only=True)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ._clip_backbones import (
    build_open_clip,
    check_batch_size,
    open_clip_reward,
    require_file,
    resolve_device,
    resolve_dtype,
)
from .registry import register

HOW_TO_GET = (
    "download HPS_v2.1_compressed.pt from the Hugging Face Hub repo xswu/HPSv2 "
    "(`huggingface-cli download xswu/HPSv2 HPS_v2.1_compressed.pt`)"
)


@register("hps")
def hps(
    checkpoint: str | None = None,
    model_name: str = "ViT-H-14",
    *,
    batch_size: int = 32,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = torch.float32,
    resize_mode: str = "longest",
    model: Any = None,
    tokenizer: Callable | None = None,
):
    """Build the ``hps`` reward fn (HPSv2 cosine in ``[-1, 1]``, see the module docstring).

    Args:
        checkpoint: path of the HPSv2 checkpoint (``HPS_v2.1_compressed.pt``); a
            ``{"state_dict": ...}`` wrapper or a plain open_clip state dict, ``.safetensors`` too.
            Required unless ``model`` is given.
        model_name: open_clip architecture the checkpoint was trained from (``"ViT-H-14"``).
        batch_size: images (and unique prompts) per forward pass.
        device: ``"cuda"`` if available else ``"cpu"`` when ``None``.
        dtype: model dtype (HPSv2's own scorer runs fp16 autocast); the cosine is float32.
        resize_mode: ``"longest"`` (HPSv2), ``"shortest"`` or ``"squash"``.
        model, tokenizer: an already built open_clip model (used as is) and its tokenizer
            (default: ``open_clip.get_tokenizer(model_name)``).
    """
    batch_size = check_batch_size(batch_size, "hps")
    device, dtype = resolve_device(device), resolve_dtype(dtype)
    if model is None:
        path = require_file(checkpoint, reward="hps", kwarg="checkpoint", how_to_get=HOW_TO_GET)
        model = build_open_clip(model_name, path, device, dtype)
    return open_clip_reward(
        model,
        tokenizer,
        model_name,
        device=device,
        dtype=dtype,
        batch_size=batch_size,
        resize_mode=resize_mode,
        reward="hps",
    )
