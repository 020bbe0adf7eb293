"""psnr / ssim on torchmetrics agree with the former hand-written versions; psnr_ssim; load_image."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from foundation.images import load_image
from reward_models import similarity  # noqa: F401  (registers the rewards)
from reward_models.registry import load_reward
from reward_models.similarity import psnr, ssim


def _old_psnr(x, y, max_db=100.0):
    """reward_models/similarity.py before torchmetrics (commit 60be4ac)."""
    mse = (x.float() - y.float()).pow(2).flatten(1).mean(dim=1).double()
    return (10.0 * torch.log10(1.0 / mse.clamp_min(1e-300))).clamp(max=max_db).float()


def _old_ssim(x, y, win=11, sigma=1.5, k1=0.01, k2=0.03):
    """reward_models/similarity.py before torchmetrics: separable valid Gaussian windows, moments about the mean."""
    c = x.shape[1]
    m = 0.5 * (x.mean(dim=(2, 3), keepdim=True) + y.mean(dim=(2, 3), keepdim=True))
    xc, yc = x - m, y - m
    r = torch.arange(win, dtype=torch.float64) - (win - 1) / 2.0
    g = torch.exp(-(r**2) / (2.0 * sigma**2))
    g = (g / g.sum()).to(x.dtype)
    stats = torch.cat([xc, yc, xc * xc, yc * yc, xc * yc], dim=1)
    ch = stats.shape[1]
    stats = F.conv2d(stats, g.view(1, 1, 1, -1).expand(ch, 1, 1, win), groups=ch)
    stats = F.conv2d(stats, g.view(1, 1, -1, 1).expand(ch, 1, win, 1), groups=ch)
    mc_x, mc_y, e_xx, e_yy, e_xy = stats.split(c, dim=1)
    var_x, var_y, cov = e_xx - mc_x * mc_x, e_yy - mc_y * mc_y, e_xy - mc_x * mc_y
    mu_x, mu_y = mc_x + m, mc_y + m
    c1, c2 = k1**2, k2**2
    s = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x * mu_x + mu_y * mu_y + c1) * (var_x + var_y + c2))
    return s.flatten(1).mean(dim=1)


def _restoration_pairs():
    """Degraded / clean ShapesWorld pairs, two of every degradation level of the restoration test split."""
    from worlds.shapes_i2i.data import restore_test

    rows = restore_test()[::8]
    src = torch.from_numpy(np.stack([r["source_image"] for r in rows])).float() / 255
    gt = torch.from_numpy(np.stack([r["ground_truth"] for r in rows])).float() / 255
    return src, gt


@pytest.mark.slow  # a refactoring's record; the metrics' own checks above stay in the default suite
def test_agreement_with_former_implementations():
    """Measured: |Δ PSNR| ≤ 2e-6 dB, |Δ SSIM| ≤ 5e-6.

    On random images, 24 ShapesWorld restoration pairs and an affine change of them (the former version, in
    float32, is itself within 5e-6 of a float64 reference).
    """
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 3, 40, 40, generator=g)
    noisy = (x + 0.05 * torch.randn(x.shape, generator=g)).clamp(0, 1)
    src, gt = _restoration_pairs()
    for a, b in ((noisy, x), (src, gt), (gt * 0.9 + 0.05, gt)):
        assert (psnr(a, b) - _old_psnr(a, b)).abs().max() < 1e-4
        assert (ssim(a, b) - _old_ssim(a, b)).abs().max() < 1e-5
        assert (ssim(a, b).double() - _old_ssim(a.double(), b.double())).abs().max() < 1e-6
    assert psnr(gt, gt).tolist() == [100.0] * len(gt)
    # torchmetrics' own convention (reflect-padded border windows) counts the flat padding as agreement
    reflect = ssim(src, gt, border="reflect")
    assert (reflect - ssim(src, gt)).mean() > 0


def test_psnr_ssim_reward_mixes_both():
    src, gt = _restoration_pairs()
    meta = [{"ground_truth": t.numpy()} for t in gt[:3]] + [{}]
    images = torch.cat([src[:3], src[:1]])
    scores, info = load_reward("psnr_ssim")(images, ["restore the image"] * 4, meta)
    p, q = psnr(src[:3], gt[:3]).numpy(), ssim(src[:3], gt[:3]).numpy()
    np.testing.assert_allclose(scores[:3], 0.5 * np.minimum(p, 40) / 40 + 0.5 * q, rtol=1e-5)
    np.testing.assert_allclose(info["psnr"][:3], p, rtol=1e-6)
    assert np.isnan(scores[3]) and np.isnan(info["ssim"][3]) and info["missing"] == 1
    with pytest.raises(ValueError, match="psnr_scale_db must be > 0"):
        load_reward("psnr_ssim", psnr_scale_db=0)


def test_load_image_names_row_and_key(tmp_path):
    arr = np.zeros((3, 8, 8), np.uint8)
    assert load_image(arr.tolist(), key="source_image").shape == (3, 8, 8)
    with pytest.raises(ValueError, match=r"row 3, 'source_image': source image .* does not exist"):
        load_image("missing.png", root=str(tmp_path), index=3, key="source_image")
