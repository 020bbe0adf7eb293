"""Shared helpers for the CLIP-backbone rewards (``aesthetic``, ``clip_score``, ``pickscore``, ``hps``).

Everything here is plain torch; ``open_clip`` / ``transformers`` are imported only inside the
functions that need them, so importing :mod:`reward_models` stays cheap.

Image preprocessing is done on the float tensor (no PIL round trip, no uint8 quantisation):

1. clamp to ``[0, 1]``;
2. resize with antialiased bicubic interpolation (``torch.nn.functional.interpolate(...,
   antialias=True)``, which follows PIL's bicubic filter) according to ``resize_mode``:

   * ``"shortest"``: shortest side -> ``size``, then centre crop (CLIP / open_clip default,
     transformers ``CLIPImageProcessor``);
   * ``"longest"``: longest side -> ``size``, then pad with ``fill`` (HPSv2's evaluation
     transform, open_clip ``ResizeMaxSize``);
   * ``"squash"``: both sides -> ``size`` (aspect ratio not kept);

   the result is clamped to ``[0, 1]`` again (bicubic overshoots, PIL clips to uint8);
3. normalise with the model's per-channel ``mean`` / ``std``.

For square inputs all three modes are the same resize. Sizes and offsets follow the reference
pipelines: in ``"shortest"`` mode the long side is truncated (torchvision ``Resize(int)``,
``CLIPImageProcessor``) and the crop offset rounded (torchvision ``CenterCrop``); in
``"longest"`` mode the short side is rounded and the padding split as open_clip's ``ResizeMaxSize``.
What remains is PIL's uint8 rounding, which this float path skips.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

#: The OpenAI CLIP normalisation constants, also used by LAION's open_clip ViT-H-14,
#: PickScore's processor and HPSv2.
OPENAI_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

RESIZE_MODES = ("shortest", "longest", "squash")

_DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
}


# ----------------------------------------------------------------------------- arguments


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` -> ``"cuda"`` if available else ``"cpu"``; strings/devices pass through."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return torch.device(device)


def resolve_dtype(dtype: str | torch.dtype | None) -> torch.dtype:
    """A ``torch.dtype`` or one of ``float32|fp32|float16|fp16|bfloat16|bf16`` (``None`` -> float32)."""
    if dtype is None:
        return torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    key = str(dtype).lower().replace("torch.", "")
    if key not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(_DTYPES)} or a torch.dtype")
    return _DTYPES[key]


def check_batch_size(batch_size: int, reward: str) -> int:
    """Validate the ``batch_size`` kwarg (images per model call)."""
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"{reward}: batch_size must be a positive integer, got {batch_size!r}")
    return int(batch_size)


def batch_slices(n: int, batch_size: int) -> Iterator[slice]:
    """Consecutive slices of at most ``batch_size`` covering ``range(n)``."""
    for start in range(0, n, batch_size):
        yield slice(start, min(start + batch_size, n))


def as_image_batch(images: Any, reward: str) -> torch.Tensor:
    """Images (tensor or array) -> float tensor ``(B, 3, H, W)`` on its own device."""
    x = images if isinstance(images, torch.Tensor) else torch.as_tensor(np.asarray(images))
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"{reward}: expected images of shape (B, 3, H, W) in [0, 1], got shape {tuple(x.shape)}")
    return x.detach().float()


def check_prompts(prompts: Sequence[str], batch: int, reward: str) -> list[str]:
    """One prompt per image, as ``list[str]``."""
    prompts = list(prompts)
    if len(prompts) != batch:
        raise ValueError(f"{reward}: got {batch} images but {len(prompts)} prompts")
    return [str(p) for p in prompts]


def require_file(path: str | None, *, reward: str, kwarg: str, how_to_get: str) -> str:
    """Return ``path`` if it is an existing file, else raise a ValueError that says how to fix it."""
    if path is None or str(path) == "":
        raise ValueError(
            f"reward {reward!r} needs {kwarg}: {how_to_get} and pass its local path as "
            f"reward.kwargs.{reward}.{kwarg}=/path/to/file"
        )
    path = os.path.expanduser(str(path))
    if not os.path.isfile(path):
        raise ValueError(
            f"reward {reward!r}: {kwarg}={path!r} is not a file (cwd: {os.getcwd()}); {how_to_get} and pass "
            f"its local path as reward.kwargs.{reward}.{kwarg}"
        )
    return path


def from_hub(load: Callable[[str], Any], name: str, *, reward: str, kwarg: str) -> Any:
    """``load(name)`` (a transformers ``from_pretrained``); weights that are neither a local directory nor in the
    hub cache, and cannot be downloaded (HF_HUB_OFFLINE, no network), are a RewardError naming the reward, the model
    and how to get them."""
    try:
        return load(name)
    except OSError as exc:
        from foundation.errors import RewardError

        if os.path.isdir(os.path.expanduser(name)):
            detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RewardError(f"reward {reward!r}: {kwarg}={name!r} could not be loaded: {detail}") from exc
        home = os.environ.get("HF_HOME") or "~/.cache/huggingface"
        raise RewardError(
            f"reward {reward!r}: the weights of {name!r} ({kwarg}) are not in the local hub cache (HF_HOME={home}) "
            f"and could not be downloaded: download them once with network access (`hf download {name}`), set "
            f"HF_HOME to a cache that holds them, or give a local directory as reward.kwargs.{reward}.{kwarg}"
        ) from exc


def load_state_dict_file(path: str) -> dict:
    """Tensors from a ``.safetensors`` file or a ``torch.save`` file (``weights_only=True``).

    A ``{"state_dict": ...}`` wrapper (Lightning / HPSv2 checkpoints) is unwrapped and a
    ``module.`` prefix (DDP) is stripped.
    """
    if str(path).endswith(".safetensors"):
        from safetensors.torch import load_file

        sd = load_file(path, device="cpu")
    else:
        sd = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(sd, dict) and isinstance(sd.get("state_dict"), dict):
        sd = sd["state_dict"]
    if not isinstance(sd, dict):
        raise ValueError(f"{path!r} does not hold a state dict (got {type(sd).__name__})")
    if sd and all(k.startswith("module.") for k in sd):
        sd = {k[len("module.") :]: v for k, v in sd.items()}
    return sd


# ----------------------------------------------------------------------------- preprocessing


def _resize(x: torch.Tensor, h: int, w: int) -> torch.Tensor:
    if tuple(x.shape[-2:]) == (h, w):
        return x
    return F.interpolate(x, size=(h, w), mode="bicubic", align_corners=False, antialias=True)


def preprocess(
    images: torch.Tensor,
    size: int | tuple[int, int],
    mean: Sequence[float] = OPENAI_CLIP_MEAN,
    std: Sequence[float] = OPENAI_CLIP_STD,
    resize_mode: str = "shortest",
    fill: float = 0.0,
) -> torch.Tensor:
    """Float images ``(B, 3, H, W)`` in ``[0, 1]`` -> normalised model input ``(B, 3, th, tw)`` (float32).

    See the module docstring for the steps and the meaning of ``resize_mode``; ``fill`` is the
    padding value in ``[0, 1]`` pixel units for ``"longest"`` (0 = black, as HPSv2).
    """
    th, tw = (int(size), int(size)) if isinstance(size, (int, np.integer)) else (int(size[0]), int(size[1]))
    x = images.float().clamp(0.0, 1.0)  # (B, 3, H, W)
    h, w = x.shape[-2:]
    if resize_mode == "shortest":
        if th == tw:  # torchvision Resize(int) / CLIPImageProcessor: the long side is truncated
            nh, nw = (th, int(th * w / h)) if h <= w else (int(tw * h / w), tw)
        else:
            scale = max(th / h, tw / w)
            nh, nw = max(th, int(h * scale)), max(tw, int(w * scale))
        x = _resize(x, nh, nw).clamp(0.0, 1.0)
        top, left = int(round((nh - th) / 2.0)), int(round((nw - tw) / 2.0))
        x = x[..., top : top + th, left : left + tw]  # (B, 3, th, tw)
    elif resize_mode == "longest":
        scale = min(th / h, tw / w)
        nh, nw = min(th, round(h * scale)), min(tw, round(w * scale))
        x = _resize(x, nh, nw).clamp(0.0, 1.0)
        pad_h, pad_w = th - nh, tw - nw
        if pad_h or pad_w:
            x = F.pad(x, (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2), value=float(fill))
    elif resize_mode == "squash":
        x = _resize(x, th, tw).clamp(0.0, 1.0)
    else:
        raise ValueError(f"unknown resize_mode {resize_mode!r}; use one of {RESIZE_MODES}")
    mean_t = torch.as_tensor(mean, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    std_t = torch.as_tensor(std, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
    return (x - mean_t) / std_t


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    """``x / ||x||_2`` over the last dimension, in float32."""
    x = x.float()
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def unique_index(prompts: list[str]) -> tuple[list[str], torch.Tensor]:
    """Unique prompts (first-seen order) and, per input prompt, its index among them.

    GRPO batches repeat each prompt ``group_size`` times; text is encoded once per unique prompt.
    """
    uniq: dict = {}
    idx = [uniq.setdefault(p, len(uniq)) for p in prompts]
    return list(uniq), torch.as_tensor(idx, dtype=torch.long)


def encode_in_batches(encode: Callable[[slice], torch.Tensor], n: int, batch_size: int) -> torch.Tensor:
    """``cat([encode(s) for s in batch_slices(n, batch_size)])`` as float32 on the CPU."""
    return torch.cat([encode(s).float().cpu() for s in batch_slices(n, batch_size)])


# ----------------------------------------------------------------------------- open_clip


def build_open_clip(model_name: str, pretrained: str | None, device: torch.device, dtype: torch.dtype):
    """``open_clip.create_model(model_name, pretrained)`` in eval mode on ``device`` / ``dtype``.

    ``pretrained`` is an open_clip tag (downloaded into the hub cache on first use) or a local
    checkpoint file (loaded with ``weights_only=True``; a ``state_dict`` wrapper and a ``module.``
    prefix are handled by open_clip).
    """
    import open_clip

    model = open_clip.create_model(model_name, pretrained=pretrained, device=device, require_pretrained=True)
    return model.to(device=device, dtype=dtype).eval().requires_grad_(False)


def open_clip_tokenizer(model_name: str, model: Any):
    """The tokenizer open_clip pairs with ``model_name`` (the BPE vocab ships with the package)."""
    import open_clip

    return open_clip.get_tokenizer(model_name, context_length=getattr(model, "context_length", None))


def open_clip_image_cfg(model: Any) -> dict:
    """``size``, ``mean``, ``std``, ``resize_mode`` of an open_clip model (OpenAI defaults if unset)."""
    visual = model.visual
    cfg = dict(getattr(visual, "preprocess_cfg", None) or {})
    size = cfg.get("size") or getattr(visual, "image_size", 224)
    return {
        "size": size,
        "mean": tuple(cfg.get("mean") or getattr(visual, "image_mean", None) or OPENAI_CLIP_MEAN),
        "std": tuple(cfg.get("std") or getattr(visual, "image_std", None) or OPENAI_CLIP_STD),
        "resize_mode": cfg.get("resize_mode", "shortest") or "shortest",
        "fill": float(cfg.get("fill_color") or 0) / 255.0,  # open_clip gives it in 0..255
    }


def open_clip_reward(
    model: Any, tokenizer: Any, model_name: str, *, device, dtype, batch_size: int, resize_mode, reward: str
):
    """The cosine reward fn of an open_clip ``model`` (already built, or injected: moved to device/dtype),
    with ``tokenizer`` defaulting to the architecture's and ``resize_mode`` (None = the model's own)."""
    model = model.to(device=device, dtype=dtype).eval()
    if tokenizer is None:
        tokenizer = open_clip_tokenizer(model_name, model)
    image_cfg = open_clip_image_cfg(model)
    if resize_mode is not None:
        image_cfg["resize_mode"] = resize_mode
    return open_clip_cosine_fn(
        model, tokenizer, device=device, dtype=dtype, batch_size=batch_size, image_cfg=image_cfg, reward=reward
    )


def open_clip_cosine_fn(
    model: Any,
    tokenizer: Callable[[list[str]], torch.Tensor],
    *,
    device: torch.device,
    dtype: torch.dtype,
    batch_size: int,
    image_cfg: dict,
    reward: str,
):
    """Reward fn: cosine(image embedding, prompt embedding) of an open_clip model, float32 ``[B]``."""
    model.eval()

    @torch.no_grad()
    def fn(images: Any, prompts: list[str], metadata: list[dict]):
        x = as_image_batch(images, reward)
        prompts = check_prompts(prompts, x.shape[0], reward)
        if x.shape[0] == 0:
            return np.zeros(0, dtype=np.float32), {}
        uniq, idx = unique_index(prompts)

        def enc_image(s: slice) -> torch.Tensor:
            pix = preprocess(x[s].to(device), **image_cfg).to(dtype)  # (b, 3, S, S)
            return model.encode_image(pix)  # (b, D)

        def enc_text(s: slice) -> torch.Tensor:
            return model.encode_text(tokenizer(uniq[s]).to(device))  # (u, D)

        img = l2_normalize(encode_in_batches(enc_image, x.shape[0], batch_size))  # (B, D)
        txt = l2_normalize(encode_in_batches(enc_text, len(uniq), batch_size))[idx]  # (B, D)
        return (img * txt).sum(-1).numpy().astype(np.float32), {}

    return fn


# ----------------------------------------------------------------------------- transformers


def hf_features(out: Any) -> torch.Tensor:
    """Projected embeddings from ``CLIPModel.get_{image,text}_features`` (tensor in transformers
    4.x, ``BaseModelOutputWithPooling`` whose ``pooler_output`` is projected in 5.x)."""
    if isinstance(out, torch.Tensor):
        return out
    return out.pooler_output


def hf_image_embeds(model: Any, pixel_values: torch.Tensor) -> torch.Tensor:
    """Projected image embeddings of a transformers ``CLIPModel`` or ``CLIPVisionModelWithProjection``."""
    if hasattr(model, "get_image_features"):
        return hf_features(model.get_image_features(pixel_values=pixel_values))
    return model(pixel_values=pixel_values).image_embeds


def hf_image_size(config: Any) -> int:
    """Input resolution from a ``CLIPConfig`` or ``CLIPVisionConfig``."""
    vision = getattr(config, "vision_config", config)
    return int(vision.image_size)
