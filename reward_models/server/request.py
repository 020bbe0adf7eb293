"""A ``/score`` request body: JSON shape checks and the decoding of its base64 PNGs (sizes from headers first)."""

from __future__ import annotations

import base64
import binascii
import io
import json
import struct
from typing import Any

import numpy as np

from ..remote import PROTOCOL
from .limits import DEFAULT_MAX_PIXELS, MAX_JSON_CONTAINERS, MAX_JSON_DEPTH, PNG_SIGNATURE, HTTPError


def json_numbers(value: Any, depth: int = 1) -> int:
    """Numbers in the arrays of parsed JSON ``value`` (found at nesting level ``depth``); 400 past ``MAX_JSON_DEPTH``.

    Only array elements count (the pixels of an image sent as nested lists), not scalars of objects.
    """
    numbers, stack = 0, [(value, depth)] if type(value) in (list, dict) else []
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise HTTPError(400, f"body is nested too deeply (the server's limit is {MAX_JSON_DEPTH} levels)")
        in_array = type(value) is list
        for item in value if in_array else value.values():
            kind = type(item)
            if kind is list or kind is dict:
                stack.append((item, depth + 1))
            elif in_array and (kind is int or kind is float):
                numbers += 1
    return numbers


def parse_request(body: bytes) -> tuple[list, list, list, int]:
    """Validate a ``/score`` body; returns ``(images_b64, prompts, metadata, numbers in metadata arrays)``.

    Raises :class:`HTTPError` (400) for invalid JSON, more than ``MAX_JSON_CONTAINERS`` arrays / objects
    (counted on the raw bytes, before parsing) or nesting deeper than ``MAX_JSON_DEPTH``.
    """
    containers = body.count(b"[") + body.count(b"{")  # counts brackets inside strings too: an upper bound
    if containers > MAX_JSON_CONTAINERS:
        raise HTTPError(
            400, f"body has up to {containers} JSON arrays/objects, more than the server's limit {MAX_JSON_CONTAINERS}"
        )
    try:
        req = json.loads(body)
    except RecursionError:  # deeper than the parser's own limit (~1000)
        raise HTTPError(400, f"body is nested too deeply (the server's limit is {MAX_JSON_DEPTH} levels)") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPError(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(req, dict):
        raise HTTPError(400, f"body must be a JSON object with images, prompts, metadata; got {type(req).__name__}")
    numbers = {key: json_numbers(value, 2) for key, value in req.items()}.get("metadata", 0)
    version = req.get("protocol", PROTOCOL)
    if version != PROTOCOL:
        raise HTTPError(400, f"unsupported protocol version {version!r}; this server speaks protocol {PROTOCOL}")
    missing = [k for k in ("images", "prompts", "metadata") if k not in req]
    if missing:
        raise HTTPError(400, f"missing field(s) {missing}; expected images, prompts, metadata")
    images, prompts, metadata = req["images"], req["prompts"], req["metadata"]
    for key, value in (("images", images), ("prompts", prompts), ("metadata", metadata)):
        if not isinstance(value, list):
            raise HTTPError(400, f"field {key!r} must be a list, got {type(value).__name__}")
    if not (len(images) == len(prompts) == len(metadata)):
        raise HTTPError(
            400,
            f"lengths differ: {len(images)} images, {len(prompts)} prompts, {len(metadata)} metadata rows",
        )
    for i, p in enumerate(prompts):
        if not isinstance(p, str):
            raise HTTPError(400, f"prompts[{i}] must be a string, got {type(p).__name__}")
    for i, m in enumerate(metadata):
        if not isinstance(m, dict):
            raise HTTPError(400, f"metadata[{i}] must be an object, got {type(m).__name__}")
    return images, prompts, metadata, numbers


def png_size(item: Any, i: int) -> tuple[int, int]:
    """``(width, height)`` of base64 PNG ``images[i]`` from its IHDR chunk, decoding only its first 33 bytes."""
    if not isinstance(item, str):
        raise HTTPError(400, f"images[{i}] must be a base64 string, got {type(item).__name__}")
    try:
        head = base64.b64decode(item[:44], validate=True)  # 44 base64 characters = 33 bytes
    except (binascii.Error, ValueError) as exc:
        raise HTTPError(400, f"images[{i}] is not valid base64: {exc}") from None
    if not head.startswith(PNG_SIGNATURE):
        raise HTTPError(400, f"images[{i}] is not a PNG (starts with {head[:8]!r}); encode images as PNG")
    if len(head) < 24 or head[12:16] != b"IHDR":
        raise HTTPError(400, f"images[{i}] is not a decodable PNG: it does not start with an IHDR chunk")
    w, h = struct.unpack(">II", head[16:24])
    if not (0 < w < 2**31 and 0 < h < 2**31):
        raise HTTPError(400, f"images[{i}] is not a decodable PNG: its header claims {w}x{h} pixels")
    return w, h


def png_sizes(items: list, max_pixels: int = DEFAULT_MAX_PIXELS) -> list[tuple[int, int]]:
    """Sizes of a request's PNGs, from their headers: 413 for an image over ``max_pixels``, 400 for mixed sizes."""
    sizes: list[tuple[int, int]] = []
    for i, item in enumerate(items):
        w, h = png_size(item, i)
        if w * h > max_pixels:
            raise HTTPError(413, f"images[{i}] has {w}x{h} pixels, more than the server's limit {max_pixels}")
        if sizes and (w, h) != sizes[0]:
            w0, h0 = sizes[0]
            raise HTTPError(
                400,
                f"images must all have the same size in one request: images[0] is {w0}x{h0} "
                f"but images[{i}] is {w}x{h}; send one request per size",
            )
        sizes.append((w, h))
    return sizes


def decode_images(items: list, max_pixels: int = DEFAULT_MAX_PIXELS):
    """List of base64 PNG strings -> float32 tensor ``(B, 3, H, W)`` in ``[0, 1]``; raises :class:`HTTPError`.

    Sizes are checked from the headers first (:func:`png_sizes`); each image is then decoded straight
    into a preallocated batch, so the peak is the batch plus one decoded image.
    """
    import torch
    from PIL import Image

    sizes = png_sizes(items, max_pixels)
    w, h = sizes[0] if sizes else (0, 0)
    out = torch.empty((len(items), 3, h, w), dtype=torch.float32)
    for i, item in enumerate(items):
        try:
            raw = base64.b64decode(item, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise HTTPError(400, f"images[{i}] is not valid base64: {exc}") from None
        try:
            with Image.open(io.BytesIO(raw), formats=["PNG"]) as img:
                if img.size != (w, h):
                    raise HTTPError(400, f"images[{i}] is not a decodable PNG: its header does not match the image")
                arr = np.array(img if img.mode == "RGB" else img.convert("RGB"), dtype=np.uint8)  # writable
        except HTTPError:
            raise
        except Exception as exc:  # truncated / corrupt data, ...
            raise HTTPError(400, f"images[{i}] is not a decodable PNG: {type(exc).__name__}: {exc}") from None
        out[i].copy_(torch.from_numpy(arr).permute(2, 0, 1))
        del raw, arr
    return out.div_(255.0)  # [B, 3, H, W] in [0, 1]
