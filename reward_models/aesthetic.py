"""``aesthetic``: the LAION aesthetic predictor v2 ("improved aesthetic predictor"), as used by DDPO.

Score (float32 ``[B]``, the LAION 1-10 rating scale; prompts are ignored)::

    e = E_img(x) / ||E_img(x)||_2          # CLIP ViT-L/14 projected image embedding, 768-d
    aesthetic = MLP(e)                       # 768 -> 1024 -> 128 -> 64 -> 16 -> 1, no activations

The head is purely linear (the published model was trained with the ReLUs commented out; the
dropouts are inactive in eval mode). Stable Diffusion 1.5 samples typically score about 5-6.5.

Weights:

* CLIP: ``clip_model="openai/clip-vit-large-patch14"`` (transformers; only the vision tower and
  ``visual_projection`` are loaded), or a local directory with the same layout;
* head: ``sac+logos+ava1-l14-linearMSE.pth`` from
  https://github.com/christophschuhmann/improved-aesthetic-predictor (DDPO ships the same file as
  ``ddpo_pytorch/assets/sac+logos+ava1-l14-linearMSE.pth``); ``.pth`` (loaded with
  ``weights_only=True``) or ``.safetensors`` with the same keys ``layers.0.weight`` ... ``layers.7.bias``.

Preprocessing matches ``CLIPImageProcessor`` of that checkpoint on float tensors: shortest side to
224 (bicubic, antialiased), centre crop 224, OpenAI CLIP mean/std.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ._clip_backbones import (
    OPENAI_CLIP_MEAN,
    OPENAI_CLIP_STD,
    as_image_batch,
    batch_slices,
    check_batch_size,
    from_hub,
    hf_image_embeds,
    hf_image_size,
    l2_normalize,
    load_state_dict_file,
    preprocess,
    require_file,
    resolve_device,
    resolve_dtype,
)
from .registry import register

HOW_TO_GET = (
    "download sac+logos+ava1-l14-linearMSE.pth from "
    "https://github.com/christophschuhmann/improved-aesthetic-predictor (DDPO ships it as "
    "ddpo_pytorch/assets/sac+logos+ava1-l14-linearMSE.pth)"
)


class AestheticMLP(nn.Module):
    """The LAION aesthetic head; module layout (and so state-dict keys) of the published file.

    ``layers``: Linear(d,1024) Dropout(0.2) Linear(1024,128) Dropout(0.2) Linear(128,64)
    Dropout(0.1) Linear(64,16) Linear(16,1) -> keys ``layers.{0,2,4,6,7}.{weight,bias}``.
    """

    def __init__(self, input_dim: int = 768):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(input_dim, 1024),
            nn.Dropout(0.2),
            nn.Linear(1024, 128),
            nn.Dropout(0.2),
            nn.Linear(128, 64),
            nn.Dropout(0.1),
            nn.Linear(64, 16),
            nn.Linear(16, 1),
        )

    def forward(self, embeds: torch.Tensor) -> torch.Tensor:
        """``(B, d)`` L2-normalised embeddings -> ``(B, 1)`` ratings."""
        return self.layers(embeds)

    @classmethod
    def from_file(cls, path: str) -> AestheticMLP:
        """Load a head state dict (``.pth`` with ``weights_only=True``, or ``.safetensors``)."""
        sd = load_state_dict_file(path)
        if "layers.0.weight" not in sd:
            raise ValueError(
                f"{path!r} is not an aesthetic head state dict: expected keys layers.0.weight ... "
                f"layers.7.bias, got {sorted(sd)[:6]}"
            )
        head = cls(int(sd["layers.0.weight"].shape[1]))
        head.load_state_dict(sd)
        return head


def _load_clip_vision(clip_model: str):
    from transformers import CLIPVisionModelWithProjection

    return from_hub(CLIPVisionModelWithProjection.from_pretrained, clip_model, reward="aesthetic", kwarg="clip_model")


@register("aesthetic")
def aesthetic(
    head_path: str | None = None,
    clip_model: str = "openai/clip-vit-large-patch14",
    *,
    batch_size: int = 32,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = torch.float32,
    image_mean: Sequence[float] = OPENAI_CLIP_MEAN,
    image_std: Sequence[float] = OPENAI_CLIP_STD,
    clip: Any = None,
    head: nn.Module | None = None,
):
    """Build the ``aesthetic`` reward fn (LAION 1-10 scale, see the module docstring).

    Args:
        head_path: the head's state dict (``sac+logos+ava1-l14-linearMSE.pth`` or a
            ``.safetensors`` with the same keys). Required unless ``head`` is given.
        clip_model: local directory or hub id loadable by transformers
            ``CLIPVisionModelWithProjection`` (a full ``CLIPModel`` checkpoint works).
        batch_size: images per CLIP forward pass.
        device: ``"cuda"`` if available else ``"cpu"`` when ``None``.
        dtype: CLIP dtype; preprocessing, the normalisation and the head run in float32.
        image_mean, image_std: CLIP normalisation (OpenAI constants for ViT-L/14).
        clip, head: already built modules (a transformers ``CLIPModel`` or
            ``CLIPVisionModelWithProjection``; an :class:`AestheticMLP`), used instead of loading.
    """
    batch_size = check_batch_size(batch_size, "aesthetic")
    device, dtype = resolve_device(device), resolve_dtype(dtype)
    if head is None:
        head = AestheticMLP.from_file(
            require_file(head_path, reward="aesthetic", kwarg="head_path", how_to_get=HOW_TO_GET)
        )
    head = head.to(device=device, dtype=torch.float32).eval().requires_grad_(False)
    if clip is None:
        clip = _load_clip_vision(clip_model)
    clip = clip.to(device=device, dtype=dtype).eval().requires_grad_(False)
    size = hf_image_size(clip.config)

    @torch.no_grad()
    def fn(images: Any, prompts: list[str], metadata: list[dict]):
        x = as_image_batch(images, "aesthetic")
        scores = []
        for s in batch_slices(x.shape[0], batch_size):
            pix = preprocess(x[s].to(device), size, image_mean, image_std, "shortest").to(dtype)  # (b, 3, S, S)
            emb = l2_normalize(hf_image_embeds(clip, pix))  # (b, 768)
            scores.append(head(emb).squeeze(-1).float().cpu())  # (b,)
        if not scores:
            return np.zeros(0, dtype=np.float32), {}
        return torch.cat(scores).numpy().astype(np.float32), {}

    return fn
