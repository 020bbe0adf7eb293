"""The token and latent sizes of one sample, from the pipeline's configs and the sample.* settings.

Per family (``model_index.json`` ``_class_name`` -> its ``FamilySpec``: ``geometry`` names the token model below,
``source_tokens`` says a source image's tokens join the sequence, ``video`` comes from its adapter), with f = the
VAE's spatial factor (2^(levels − 1)), r = sample.resolution, L = sample.max_sequence_length (0: the pipeline's
default, ``policies.base.pipeline_text_length``):

    FLUX.1 / Kontext   image tokens (r/f/2)² (2×2 packing; Kontext × 2: the source image's tokens join), text L
    SD3 / SD3.5        image tokens (r/f/p)² (p = the transformer's patch), text 77 (CLIP) + L (T5)
    Qwen-Image(-Edit)  image tokens (r/f/2)² (Edit × 2), text L (an upper bound: prompts are padded to the batch's
                       longest, the template's prefix dropped)
    Wan 2.1 / 2.2      video tokens F'·(r/f/2)², F' = (F − 1)/4 + 1 latent frames (F = sample.num_frames, 81 when 0),
                       text L
The latent of a sample is C·(r/f)² (video: C·F'·(r/f)²), C the VAE's latent channels: what the trajectory store
keeps T + 1 times.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ddpo_grpo.policies.base import pipeline_text_length

#: the frame count of a video sample when sample.num_frames is 0 (Wan's pipeline default)
VIDEO_DEFAULT_FRAMES = 81


def family_of(pipeline: str) -> tuple[str, bool, bool]:
    """(geometry key, source tokens join, video) of pipeline class ``pipeline``'s family spec; ("", False, False) for
    a class without one."""
    from ddpo_grpo.policies.family import families

    spec = families().get(pipeline)
    return (spec.geometry, spec.source_tokens, spec.video) if spec else ("", False, False)


@dataclass(frozen=True)
class Geometry:
    family: str  # "flux" | "sd3" | "qwen" | "wan" | "" (not modelled)
    image_tokens: int  # tokens of the noisy latent (and of a source image, for editing families)
    text_tokens: int
    latent_numel: int  # elements of one latent
    sample_numel: int  # elements of one decoded sample (3·H·W, video F·3·H·W)
    text_width: int  # width of the text encoder's hidden states (the stored condition)
    latent_side: int = 0  # the latent's height (= width) in latent pixels, r / f


def _read(path: Path) -> dict:
    return json.loads(path.read_text())


def geometry(directory: Path, sample) -> Geometry:
    """The sizes of one sample of the pipeline in ``directory`` under ``sample`` (config.sample)."""
    directory = Path(directory)
    index = _read(directory / "model_index.json")
    pipeline = index.get("_class_name", "")
    family, editing, video = family_of(pipeline)
    denoiser = "transformer" if (directory / "transformer").is_dir() else "unet"
    dcfg = _read(directory / denoiser / "config.json")
    vcfg = _read(directory / "vae" / "config.json") if (directory / "vae" / "config.json").is_file() else {}
    if "block_out_channels" in vcfg:
        factor, channels = 2 ** (len(vcfg["block_out_channels"]) - 1), vcfg.get("latent_channels", 4)
    else:  # the Wan / Qwen-Image causal VAEs: 3 spatial downsamplings, z_dim channels
        factor, channels = 2 ** len(vcfg.get("temperal_downsample", [0, 0, 0])), vcfg.get("z_dim", 16)
    r = int(sample.resolution) or 8 * int(_side(dcfg.get("sample_size", 64)))
    side = r // factor
    frames = 1
    if video:
        num_frames = int(getattr(sample, "num_frames", 0) or VIDEO_DEFAULT_FRAMES)
        frames = (num_frames - 1) // 4 + 1
    patch = dcfg.get("patch_size", 2)
    patch = patch[-1] if isinstance(patch, (list, tuple)) else patch
    patch = 2 if family in ("flux",) else patch  # FLUX packs 2×2 latent patches (its own patch_size is 1)
    image_tokens = frames * (side // patch) ** 2 * (2 if editing else 1)
    length = int(sample.max_sequence_length) or pipeline_text_length(pipeline)  # 0 = the pipeline's default
    text_tokens = 77 + length if family == "sd3" else length
    text_width = dcfg.get("joint_attention_dim") or dcfg.get("text_dim") or dcfg.get("cross_attention_dim") or 0
    pixels = 3 * r * r * (int(getattr(sample, "num_frames", 0) or VIDEO_DEFAULT_FRAMES) if video else 1)
    return Geometry(family, image_tokens, text_tokens, channels * frames * side * side, pixels, int(text_width), side)


def _side(size) -> int:
    return size[0] if isinstance(size, (list, tuple)) else size
