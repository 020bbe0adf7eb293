"""``clip_score``: prompt-image alignment as the cosine similarity of open_clip embeddings.

Score (float32 ``[B]``, range ``[-1, 1]``)::

    clip_score = cos(E_img(x), E_txt(prompt))

the *plain* cosine, not scaled. Published "CLIPScore" numbers use other scales:
``100 * max(cos, 0)`` (torchmetrics, most T2I papers) or ``2.5 * max(cos, 0)`` (Hessel et al.,
2021); multiply the weight in ``reward.fns`` if you want those. With real CLIP weights a
matching prompt typically scores around 0.3 and an unrelated one clearly lower; the absolute
level depends on the backbone, so compare runs with the same ``model_name``/``pretrained``.

Weights: ``model_name="ViT-H-14"``, ``pretrained="laion2b_s32b_b79k"`` (open_clip tag; hub repo
``laion/CLIP-ViT-H-14-laion2B-s32B-b79K``, file ``open_clip_pytorch_model.bin``), or any local
open_clip checkpoint file passed as ``pretrained``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ._clip_backbones import (
    build_open_clip,
    check_batch_size,
    open_clip_reward,
    resolve_device,
    resolve_dtype,
)
from .registry import register


@register("clip_score")
def clip_score(
    model_name: str = "ViT-H-14",
    pretrained: str | None = "laion2b_s32b_b79k",
    *,
    batch_size: int = 32,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = torch.float32,
    resize_mode: str | None = None,
    model: Any = None,
    tokenizer: Callable | None = None,
):
    """Build the ``clip_score`` reward fn (cosine in ``[-1, 1]``, see the module docstring).

    Args:
        model_name: open_clip architecture name (``open_clip.list_models()``).
        pretrained: open_clip pretrained tag for ``model_name`` (``open_clip.list_pretrained()``)
            or the path of a local checkpoint file (``weights_only=True`` load).
        batch_size: images (and unique prompts) per forward pass.
        device: ``"cuda"`` if available else ``"cpu"`` when ``None``.
        dtype: model dtype (``torch.float32`` / ``"bfloat16"`` / ``"float16"``); preprocessing and
            the cosine are computed in float32.
        resize_mode: ``"shortest"`` (resize + centre crop), ``"longest"`` (resize + pad) or
            ``"squash"``; ``None`` = the model's own preprocess config (``"shortest"`` for
            ViT-H-14).
        model, tokenizer: an already built open_clip model (used as is, moved to
            ``device``/``dtype``) and its tokenizer (default: ``open_clip.get_tokenizer(model_name)``).
    """
    batch_size = check_batch_size(batch_size, "clip_score")
    device, dtype = resolve_device(device), resolve_dtype(dtype)
    if model is None:
        model = build_open_clip(model_name, pretrained, device, dtype)
    return open_clip_reward(
        model,
        tokenizer,
        model_name,
        device=device,
        dtype=dtype,
        batch_size=batch_size,
        resize_mode=resize_mode,
        reward="clip_score",
    )
