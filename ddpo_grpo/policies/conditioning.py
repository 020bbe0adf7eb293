"""Conditioning helpers shared by several family adapters: source images of rows, fixed-length text embeddings.

Source images. Image-conditioned families (InstructPix2Pix, FLUX.1 Kontext, Qwen-Image-Edit(-Plus), Wan image-to-video)
read each row's ``source_image`` field (``SOURCE_KEY``): a path (relative to ``sample.source_root``, default the working
directory), a (3, H, W) array / tensor / nested list (uint8 levels or floats in [0, 1]) or a PIL image, read by
``foundation.images.load_image``; Qwen-Image-Edit-Plus rows may give a list of them (paths, arrays or PIL images). ``check_source_rows`` refuses a
prompt file with a row lacking one before anything is sampled, naming the file and line.

Fixed-length text. A rollout stores the condition of every sample, and batches are concatenated (``Rollout.cat``), so
families whose text encoder gives variable-length embeddings (Qwen-Image, Z-Image) pad them to one length with a
validity mask (``pad_to``); the denoiser is then called on the batch trimmed to its longest valid length (``trim``),
which changes no output: padded positions are masked out of the attention.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

#: row field holding the condition image
SOURCE_KEY = "source_image"


def source_list(row: dict, index: int, family: str) -> list:
    """The row's ``source_image`` value(s) as a list; ValueError naming the row when it has none."""
    value = row.get(SOURCE_KEY)
    if value is None or (isinstance(value, (list, tuple)) and len(value) == 0):
        raise ValueError(
            f"row {index} (prompt {row.get('prompt')!r}) has no {SOURCE_KEY!r}: {family} conditions on a source "
            f"image; give every row one (an image path, a (3, H, W) array or nested list)"
        )
    if isinstance(value, (list, tuple)) and not isinstance(value[0], (list, tuple, int, float)):
        return list(value)  # several images: paths, arrays or PIL images (Qwen-Image-Edit-Plus)
    return [value]  # one image (a nested list of numbers is one image too)


def load_source(value, size: tuple[int, int], root: str | None, index: int, key: str = SOURCE_KEY) -> torch.Tensor:
    """One row's image (field ``key``) as float [3, H, W] in [0, 1], resized (bicubic, antialiased) to ``size``."""
    from foundation.images import load_image

    image = load_image(value, root=root, index=index, key=key)
    if tuple(image.shape[-2:]) != tuple(size):
        image = F.interpolate(image[None], size=tuple(size), mode="bicubic", align_corners=False, antialias=True)[0]
    return image.clamp(0.0, 1.0)


def source_images(rows: list[dict], size: tuple[int, int], root: str | None, family: str) -> torch.Tensor:
    """The first ``source_image`` of every row as float [B, 3, H, W] in [0, 1] at ``size``."""
    return torch.stack([load_source(source_list(r, i, family)[0], size, root, i) for i, r in enumerate(rows)])


def check_source_rows(source: str, rows: list[dict], family: str) -> None:
    """ValueError ``"<file> line <n>: ..."`` (or ``row <i>`` for built-in sources) for the first of ``rows`` without a
    ``source_image``: an image-conditioned family refuses such a prompt source before anything is sampled."""
    for i, row in enumerate(rows):
        if row.get(SOURCE_KEY) is None:
            where = _row_location(source, i)
            raise ValueError(
                f"{where}: the row (prompt {row.get('prompt')!r}) has no {SOURCE_KEY!r}, and {family} edits a source "
                f'image: give every row one, e.g. {{"prompt": "...", "{SOURCE_KEY}": "images/0001.png"}}'
            )


def _row_location(source: str, index: int) -> str:
    """Where row ``index`` of ``source`` is: "<path> line <n>" for a .jsonl file (blank lines skipped, as the loader
    does), "<path> item [i]" for a .json list, else "prompt source <name> row <i>"."""
    path = os.path.expanduser(str(source))
    if os.path.isfile(path) and path.endswith(".jsonl"):
        with open(path, encoding="utf-8") as f:
            numbers = [n for n, line in enumerate(f, start=1) if line.strip()]
        if index < len(numbers):
            return f"{path} line {numbers[index]}"
    if os.path.isfile(path) and path.endswith(".json"):
        return f"{path} item [{index}]"
    if os.path.isfile(path):
        return f"{path} line {index + 1}"
    return f"prompt source {source!r} row {index}"


def pad_to(embeds: torch.Tensor, mask: torch.Tensor | None, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Embeddings [B, L, D] and mask [B, L] (None = all valid) truncated or zero-padded to ``length``: ([B, length, D],
    [B, length] with 1 = valid, 0 = padding), the mask as the embeddings' dtype-independent int64."""
    b, n, _ = embeds.shape
    mask = torch.ones(b, n, dtype=torch.long, device=embeds.device) if mask is None else mask.long()
    if n >= length:
        return embeds[:, :length], mask[:, :length]
    pad = length - n
    return F.pad(embeds, (0, 0, 0, pad)), F.pad(mask, (0, pad))


def trim(embeds: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Padded embeddings [B, L, D] and mask [B, L] cut to the batch's longest valid length n: ([B, n, D], mask
    [B, n], or None when every position is valid, as the diffusers pipelines pass it)."""
    n = max(int(mask.sum(dim=1).max()), 1)
    embeds, mask = embeds[:, :n], mask[:, :n]
    return embeds, (None if bool(mask.all()) else mask)
