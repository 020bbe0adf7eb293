"""Reference-image similarity rewards: PSNR and SSIM against a ground-truth image per row.

Both rewards compare each generated image with the ground-truth image of its dataset row,
``metadata[i][key]`` (``key="ground_truth"`` by default; e.g. ``key="ground_truth_image"``), given as

* a path to an image file (``str`` / ``os.PathLike``); a relative path is resolved against the
  ``root`` kwarg (default: the current working directory at call time); read with PIL, converted
  to RGB and scaled to ``[0, 1]``; decoded files are cached (keyed by path, size and mtime, so an
  edited file is reread);
* a float tensor / array ``(3, H, W)`` in ``[0, 1]`` (a ``uint8`` one is divided by 255), or a
  ``PIL.Image``;
* a nested list ``(3, H, W)`` of numbers, as JSON carries an array (what ``scripts/serve_reward.py``
  receives): all integers -> ``uint8`` levels ``0..255`` (divided by 255), any float -> values in ``[0, 1]``
  (which is how :func:`reward_models.remote.to_jsonable` writes a ``uint8`` / a float array).

**Path policy.** Inside a ``with foundation.images.image_path_policy(policy):`` block (on the calling thread /
context), a path is not resolved as above: ``policy(path, index, key)`` receives the raw string (no
``root``, no ``~`` expansion) and returns the real path to read, or raises to refuse it. The reward
server uses this to refuse client-named paths, or to confine them to its ``--data_root``. A policy's
``TypeError`` / ``ValueError`` / ``OSError`` is reported like any other invalid ground truth (with the
row index and key); any other exception (the server's HTTP errors) propagates unchanged. Under a policy,
error messages never contain the path. Without one (local training), paths behave as described above.

A ground truth whose size differs from the generated image's is resized to the generated size
with bicubic interpolation (antialiased when shrinking) and clamped to ``[0, 1]``; generated
images are clamped to ``[0, 1]`` too. Rows without a ground truth (key absent or ``None``) score
NaN, "not applicable", and are counted in ``info["missing"]``. The maths runs on the images'
device, in float32.

The metrics are torchmetrics' (``torchmetrics.functional.image``), a maintained implementation, with
this module's conventions on top (the PSNR cap; SSIM over the windows that lie inside the image, as in
Wang et al.'s reference code, rather than torchmetrics' default of reflect-padded border windows, which
counts flat padding as agreement; ``ssim(..., border="reflect")`` gives torchmetrics' own number). On
ShapesWorld restoration pairs and on random images they agree with this module's former hand-written
versions to 2e-6 dB (PSNR) and 5e-6 (SSIM); ``tests/test_i2i_similarity.py`` measures it. SSIM runs in
float64: torchmetrics takes the local moments as E[x²] − μ², which in float32 cancels on flat regions (up
to 7e-4 of error on flat ShapesWorld backgrounds); in float64 it costs tens of ms per 64×64 image on one
CPU thread (the former version, which centred the moments, ran in float32 at under 1 ms).

Registered rewards (factory kwargs ``key``, ``root``):

* ``psnr`` (also ``max_db``): peak signal-to-noise ratio in dB for a peak value of 1,
  ``PSNR = 10·log10(1 / MSE)``, MSE over all channels and pixels; identical images (MSE = 0) and
  anything above ``max_db`` score ``max_db`` = 100 dB, a finite cap, so that a perfect sample does
  not produce an infinite reward. A uniform offset of 0.1 gives 20 dB.
* ``ssim``: the structural similarity index of Wang, Bovik, Sheikh & Simoncelli (2004),
  see :func:`ssim`; in ``[-1, 1]``, 1 for identical images.
* ``psnr_ssim`` (also ``psnr_weight``, ``ssim_weight``, ``psnr_scale_db``): their mix for restoration,
  ``psnr_weight · min(PSNR, s) / s + ssim_weight · SSIM`` with ``s = psnr_scale_db`` (default 0.5, 0.5,
  40 dB: both terms on [0, 1]-ish scales, PSNR saturating at 40 dB, where ShapesWorld renders are visually
  exact); per-sample ``psnr`` and ``ssim`` in ``info`` (the evaluation's metrics).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from foundation.images import read_image

from .registry import register

#: PSNR reported for identical images (and the ceiling of every PSNR), dB
PSNR_CAP_DB = 100.0
SSIM_WIN_SIZE = 11
SSIM_SIGMA = 1.5
SSIM_K1 = 0.01
SSIM_K2 = 0.03


# ---------------------------------------------------------------------------------- metrics
def _check_pair(name: str, x: torch.Tensor, y: torch.Tensor) -> None:
    if x.shape != y.shape or x.ndim != 4:
        raise ValueError(
            f"{name}: expected two [B, C, H, W] tensors of one shape, got {tuple(x.shape)}, {tuple(y.shape)}"
        )


def psnr(x: torch.Tensor, y: torch.Tensor, max_db: float = PSNR_CAP_DB) -> torch.Tensor:
    """PSNR in dB of images ``x``, ``y`` ``[B, C, H, W]`` in ``[0, 1]`` (peak 1): ``[B]`` float32.

    ``PSNR = 10·log10(1 / MSE)``, ``MSE = mean over C, H, W of (x − y)²`` (torchmetrics'
    ``peak_signal_noise_ratio`` per image); capped at ``max_db`` (identical images give exactly ``max_db``).
    """
    from torchmetrics.functional.image import peak_signal_noise_ratio

    _check_pair("psnr", x, y)
    db = peak_signal_noise_ratio(x.double(), y.double(), data_range=1.0, reduction="none", dim=(1, 2, 3))
    return torch.nan_to_num(db, posinf=max_db).clamp(max=max_db).float()


def ssim(
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    win_size: int = SSIM_WIN_SIZE,
    sigma: float = SSIM_SIGMA,
    k1: float = SSIM_K1,
    k2: float = SSIM_K2,
    data_range: float = 1.0,
    border: str = "valid",
) -> torch.Tensor:
    """Mean SSIM of images ``x``, ``y`` ``[B, C, H, W]`` (Wang et al. 2004): ``[B]`` float32.

    torchmetrics' ``structural_similarity_index_measure``: with ``w`` the normalised Gaussian window
    (σ = ``sigma``, side ``win_size`` = ``2·⌊3.5σ + 0.5⌋ + 1``, 11 for σ = 1.5) and ``*`` a 2-D correlation,
    per channel:

        μx = w * x,   μy = w * y
        σx² = w * x² − μx²,   σy² = w * y² − μy²,   σxy = w * (x·y) − μx·μy      (biased, Gaussian-weighted)
        C1 = (K1·L)²,  C2 = (K2·L)²,  L = data_range = 1
        SSIM map = ((2·μx·μy + C1)·(2·σxy + C2)) / ((μx² + μy² + C1)·(σx² + σy² + C2))       (eq. 13)

    and the score is the mean of the map **over the RGB channels** (per-channel SSIM, averaged, as skimage's
    ``channel_axis`` does, rather than SSIM of the luminance Y alone: a colour error that keeps luminance still
    costs) and over the window positions: ``border="valid"`` (default) the positions whose window lies fully
    inside the image, as in the authors' reference code; ``"reflect"`` every pixel, windows reflect-padded
    (torchmetrics' default). Defaults are the paper's: 11×11 window, σ = 1.5, K1 = 0.01, K2 = 0.03. Images
    must be at least ``win_size`` on each side.
    """
    from torchmetrics.functional.image import structural_similarity_index_measure

    _check_pair("ssim", x, y)
    if border not in ("valid", "reflect"):
        raise ValueError(f"ssim: border must be 'valid' or 'reflect', got {border!r}")
    if win_size != 2 * int(3.5 * sigma + 0.5) + 1:
        raise ValueError(
            f"ssim: win_size={win_size} with sigma={sigma}: torchmetrics derives the window from "
            f"sigma ({2 * int(3.5 * sigma + 0.5) + 1} px); pass that win_size"
        )
    h, w = x.shape[-2:]
    if min(h, w) < win_size:
        raise ValueError(f"ssim: images are {h}×{w}, smaller than the {win_size}×{win_size} window")
    # float64: torchmetrics takes the local moments as E[x²] − μ², which in float32 cancels on flat regions
    # (≈ 7e-4 of error for a 0.95 vs 1.0 background) — ShapesWorld images are mostly flat white
    _, full = structural_similarity_index_measure(
        x.double(),
        y.double(),
        gaussian_kernel=True,
        sigma=float(sigma),
        data_range=float(data_range),
        k1=k1,
        k2=k2,
        reduction="none",
        return_full_image=True,
    )  # full: [B, C, H, W], the map at every pixel
    if border == "valid":
        pad = (win_size - 1) // 2
        full = full[..., pad : h - pad, pad : w - pad]
    return full.flatten(1).mean(dim=1).float()


def _paired(
    images: Any, metadata: list[dict], key: str, root: str | None, reward: str
) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """(generated [N, 3, H, W], ground truths [N, 3, H, W], row indices) of the rows that have one."""
    images = torch.as_tensor(images) if not isinstance(images, torch.Tensor) else images
    if images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(f"{reward}: expected images of shape (B, 3, H, W), got {tuple(images.shape)}")
    h, w = images.shape[-2:]
    refs, idx = [], []
    for i, row in enumerate(metadata):
        value = (row or {}).get(key)
        if value is None:
            continue
        try:
            ref = read_image(value, root, i, key)
        except (TypeError, ValueError, OSError) as exc:
            raise ValueError(f"{reward}: sample {i}, metadata[{key!r}]: {exc}") from exc
        if ref.shape[-2:] != (h, w):
            ref = F.interpolate(ref[None], size=(h, w), mode="bicubic", align_corners=False, antialias=True)[0]
        refs.append(ref.clamp(0.0, 1.0))
        idx.append(i)
    if not idx:
        return images[:0], images[:0], idx
    sel = torch.as_tensor(idx, dtype=torch.long, device=images.device)
    gen = images[sel].float().clamp(0.0, 1.0)
    return gen, torch.stack(refs).to(gen.device), idx


def _similarity_reward(metric, reward: str, key: str, root: str | None):
    def fn(images: Any, prompts: list[str], metadata: list[dict]):
        scores = np.full(len(metadata), np.nan, dtype=np.float32)
        gen, ref, idx = _paired(images, metadata, key, root, reward)
        if idx:
            with torch.no_grad():
                scores[idx] = metric(gen, ref).cpu().numpy()
        return scores, {"missing": len(metadata) - len(idx)}

    return fn


@register("psnr")
def psnr_reward(key: str = "ground_truth", root: str | None = None, max_db: float = PSNR_CAP_DB):
    """Reward = PSNR (dB, peak 1, capped at ``max_db``) of each image against ``metadata[i][key]``."""
    return _similarity_reward(functools.partial(psnr, max_db=float(max_db)), "psnr", key, root)


@register("ssim")
def ssim_reward(key: str = "ground_truth", root: str | None = None):
    """Reward = SSIM (Wang et al. 2004, per-channel mean) of each image against ``metadata[i][key]``."""
    return _similarity_reward(ssim, "ssim", key, root)


@register("psnr_ssim")
def psnr_ssim_reward(
    key: str = "ground_truth",
    root: str | None = None,
    psnr_weight: float = 0.5,
    ssim_weight: float = 0.5,
    psnr_scale_db: float = 40.0,
):
    """Reward = ``psnr_weight · min(PSNR, s) / s + ssim_weight · SSIM`` against ``metadata[i][key]``.

    ``s = psnr_scale_db``; per-sample ``psnr`` and ``ssim`` (NaN where missing) in ``info``.
    """
    if psnr_scale_db <= 0 or psnr_weight < 0 or ssim_weight < 0:
        raise ValueError(
            f"reward 'psnr_ssim': psnr_scale_db must be > 0 and the weights ≥ 0; got psnr_scale_db="
            f"{psnr_scale_db}, psnr_weight={psnr_weight}, ssim_weight={ssim_weight}"
        )
    scale = float(psnr_scale_db)

    def fn(images: Any, prompts: list[str], metadata: list[dict]):
        n = len(metadata)
        scores, p, q = (np.full(n, np.nan, dtype=np.float32) for _ in range(3))
        gen, ref, idx = _paired(images, metadata, key, root, "psnr_ssim")
        if idx:
            with torch.no_grad():
                p[idx] = psnr(gen, ref).cpu().numpy()
                q[idx] = ssim(gen, ref).cpu().numpy()
            scores[idx] = psnr_weight * np.minimum(p[idx], scale) / scale + ssim_weight * q[idx]
        return scores, {"psnr": p.tolist(), "ssim": q.tolist(), "missing": n - len(idx)}

    return fn


__all__ = [
    "PSNR_CAP_DB",
    "psnr",
    "psnr_reward",
    "psnr_ssim_reward",
    "ssim",
    "ssim_reward",
]
