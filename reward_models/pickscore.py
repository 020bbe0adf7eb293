"""``pickscore``: PickScore (Kirstain et al., 2023), a CLIP-H fine-tuned on Pick-a-Pic preferences.

Score (float32 ``[B]``), as in the PickScore README::

    pickscore = exp(logit_scale) * cos(E_img(x), E_txt(prompt))

``exp(logit_scale)`` is read from the checkpoint (100 for ``yuvalkirstain/PickScore_v1``), so the
score is a scaled cosine: Stable Diffusion samples typically land around 18-23. It is returned raw;
flow_grpo divides it by 26 to bring it to about [0.7, 0.9] -- put that factor in the weight
(``reward.fns = {"pickscore": 1/26}``) if you want the same scale.

Weights (transformers): ``model="yuvalkirstain/PickScore_v1"`` (``CLIPModel``) and
``processor="laion/CLIP-ViT-H-14-laion2B-s32B-b79K"`` (tokenizer + image-processor settings), or
local directories with those layouts.

Only the processor's tokenizer runs as is (``padding="max_length"``, truncation to the text
model's 77 positions, so a prompt's embedding does not depend on its batch); the images are
preprocessed in torch with the processor's settings (shortest side to 224, bicubic, centre crop
224, its mean/std).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._clip_backbones import (
    OPENAI_CLIP_MEAN,
    OPENAI_CLIP_STD,
    as_image_batch,
    check_batch_size,
    check_prompts,
    encode_in_batches,
    from_hub,
    hf_features,
    hf_image_embeds,
    hf_image_size,
    l2_normalize,
    preprocess,
    resolve_device,
    resolve_dtype,
    unique_index,
)
from .registry import register


def _crop_size(image_processor: Any, default: int) -> int:
    crop = getattr(image_processor, "crop_size", None)
    if crop is None:
        return default
    if isinstance(crop, int):
        return crop
    height = crop.get("height") if hasattr(crop, "get") else getattr(crop, "height", None)
    return int(height or default)


@register("pickscore")
def pickscore(
    model: Any = "yuvalkirstain/PickScore_v1",
    processor: Any = "laion/CLIP-ViT-H-14-laion2B-s32B-b79K",
    *,
    batch_size: int = 32,
    device: str | torch.device | None = None,
    dtype: str | torch.dtype | None = torch.float32,
    max_length: int | None = None,
):
    """Build the ``pickscore`` reward fn (``exp(logit_scale) * cosine``, see the module docstring).

    Args:
        model: hub id / local directory of a transformers ``CLIPModel``, or a built ``CLIPModel``.
        processor: hub id / local directory of a ``CLIPProcessor``, or a built processor; a bare
            tokenizer also works (the images then use the model's input size and the OpenAI
            CLIP mean/std).
        batch_size: images (and unique prompts) per forward pass.
        device: ``"cuda"`` if available else ``"cpu"`` when ``None``.
        dtype: model dtype; preprocessing, the cosine and the scale are computed in float32.
        max_length: token length prompts are padded/truncated to (default: the text model's
            ``max_position_embeddings``, 77 for CLIP).
    """
    batch_size = check_batch_size(batch_size, "pickscore")
    device, dtype = resolve_device(device), resolve_dtype(dtype)
    if isinstance(model, str):
        from transformers import CLIPModel

        model = from_hub(CLIPModel.from_pretrained, model, reward="pickscore", kwarg="model")
    if isinstance(processor, str):
        from transformers import AutoProcessor

        processor = from_hub(AutoProcessor.from_pretrained, processor, reward="pickscore", kwarg="processor")
    model = model.to(device=device, dtype=dtype).eval().requires_grad_(False)
    tokenizer = getattr(processor, "tokenizer", processor)
    image_processor = getattr(processor, "image_processor", None)
    size = _crop_size(image_processor, hf_image_size(model.config))
    mean = tuple(getattr(image_processor, "image_mean", None) or OPENAI_CLIP_MEAN)
    std = tuple(getattr(image_processor, "image_std", None) or OPENAI_CLIP_STD)
    if max_length is None:
        max_length = int(model.config.text_config.max_position_embeddings)
    scale = float(model.logit_scale.detach().float().exp())

    @torch.no_grad()
    def fn(images: Any, prompts: list[str], metadata: list[dict]):
        x = as_image_batch(images, "pickscore")
        prompts = check_prompts(prompts, x.shape[0], "pickscore")
        if x.shape[0] == 0:
            return np.zeros(0, dtype=np.float32), {}
        uniq, idx = unique_index(prompts)

        def enc_image(s: slice) -> torch.Tensor:
            pix = preprocess(x[s].to(device), size, mean, std, "shortest").to(dtype)  # (b, 3, S, S)
            return hf_image_embeds(model, pix)  # (b, D)

        def enc_text(s: slice) -> torch.Tensor:
            tok = tokenizer(uniq[s], padding="max_length", truncation=True, max_length=max_length, return_tensors="pt")
            return hf_features(
                model.get_text_features(
                    input_ids=tok["input_ids"].to(device), attention_mask=tok["attention_mask"].to(device)
                )
            )  # (u, D)

        img = l2_normalize(encode_in_batches(enc_image, x.shape[0], batch_size))  # (B, D)
        txt = l2_normalize(encode_in_batches(enc_text, len(uniq), batch_size))[idx]  # (B, D)
        return (scale * (img * txt).sum(-1)).numpy().astype(np.float32), {}

    return fn
