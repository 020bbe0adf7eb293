"""Tests for the PSNR / SSIM reference-image rewards (reward_models.similarity)."""

import math

import numpy as np
import pytest
import torch
from PIL import Image

from reward_models import similarity  # noqa: F401  (registers psnr / ssim)
from reward_models.registry import REGISTRY, build_reward, load_reward
from reward_models.similarity import PSNR_CAP_DB, psnr, ssim


def _rand(shape, seed=0):
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed))


def _ssim_numpy(x, y, win=11, sigma=1.5, k1=0.01, k2=0.03):
    """Direct transcription of Wang et al. (2004): a Gaussian window at every valid position."""
    r = np.arange(win) - (win - 1) / 2
    g = np.exp(-(r**2) / (2 * sigma**2))
    w = np.outer(g, g)
    w /= w.sum()
    c1, c2 = (k1 * 1.0) ** 2, (k2 * 1.0) ** 2
    vals = []
    for ch in range(x.shape[0]):
        for i in range(x.shape[1] - win + 1):
            for j in range(x.shape[2] - win + 1):
                a = x[ch, i : i + win, j : j + win]
                b = y[ch, i : i + win, j : j + win]
                mx, my = (w * a).sum(), (w * b).sum()
                vx = (w * (a - mx) ** 2).sum()
                vy = (w * (b - my) ** 2).sum()
                cxy = (w * (a - mx) * (b - my)).sum()
                vals.append(((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2)))
    return float(np.mean(vals))


def test_registered():
    assert {"psnr", "ssim"} <= set(REGISTRY)


def test_identical_images():
    x = _rand((2, 3, 16, 16))
    np.testing.assert_allclose(psnr(x, x).numpy(), [PSNR_CAP_DB] * 2)
    np.testing.assert_allclose(ssim(x, x).numpy(), [1.0, 1.0], atol=1e-5)
    assert PSNR_CAP_DB == 100.0


def test_psnr_constant_offset():
    x = torch.full((1, 3, 16, 16), 0.5)
    np.testing.assert_allclose(psnr(x, x + 0.1).item(), 20.0, atol=1e-4)
    np.testing.assert_allclose(psnr(x, x - 0.01).item(), 40.0, atol=1e-3)
    assert psnr(x, x + 1e-7, max_db=50.0).item() == 50.0  # the cap applies to near-identical images too


def test_ssim_constant_images_closed_form():
    # flat images: σ terms vanish, only the luminance term remains
    x, y = torch.full((1, 3, 12, 12), 0.5), torch.full((1, 3, 12, 12), 0.6)
    c1 = 0.01**2
    expected = (2 * 0.5 * 0.6 + c1) / (0.5**2 + 0.6**2 + c1)
    np.testing.assert_allclose(ssim(x, y).item(), expected, rtol=1e-5)


def test_ssim_matches_numpy_reference():
    x = _rand((1, 3, 18, 20), seed=1)
    y = (x + 0.2 * _rand((1, 3, 18, 20), seed=2)).clamp(0, 1)
    ref = _ssim_numpy(x[0].double().numpy(), y[0].double().numpy())
    np.testing.assert_allclose(ssim(x, y).item(), ref, rtol=1e-5)
    np.testing.assert_allclose(ssim(y, x).item(), ref, rtol=1e-5)  # symmetric


def test_ssim_decreases_with_noise():
    x = _rand((1, 3, 32, 32), seed=3) * 0.5 + 0.25
    noise = _rand((1, 3, 32, 32), seed=4) - 0.5
    values = [ssim(x, (x + s * noise).clamp(0, 1)).item() for s in (0.0, 0.05, 0.2, 0.5)]
    assert values[0] == pytest.approx(1.0, abs=1e-5)
    assert all(a > b for a, b in zip(values, values[1:]))
    with pytest.raises(ValueError, match="smaller than the 11"):
        ssim(torch.zeros(1, 3, 8, 8), torch.zeros(1, 3, 8, 8))


def test_rewards_from_metadata_arrays_and_missing():
    gen = _rand((4, 3, 16, 16), seed=5)
    gen[1] = gen[1].clamp(0, 0.9)  # so that gen[1] + 0.1 stays in [0, 1]
    meta = [
        {"ground_truth": gen[0].clone()},  # tensor
        {"ground_truth": (gen[1] + 0.1).numpy()},  # array, offset 0.1 → 20 dB
        {},  # missing
        {"ground_truth": None},  # missing
    ]
    scores, info = load_reward("psnr")(gen, ["p"] * 4, meta)
    assert scores.dtype == np.float32 and scores.shape == (4,)
    np.testing.assert_allclose(scores[:2], [100.0, 20.0], atol=1e-3)
    assert np.isnan(scores[2:]).all() and info == {"missing": 2}
    s_scores, _ = load_reward("ssim")(gen, ["p"] * 4, meta)
    assert s_scores[0] == pytest.approx(1.0, abs=1e-5) and s_scores[1] < 1.0 and np.isnan(s_scores[2:]).all()


def test_file_paths_root_key_and_resize(tmp_path):
    arr = (np.random.default_rng(0).random((16, 16, 3)) * 255).round().astype(np.uint8)
    Image.fromarray(arr).save(tmp_path / "gt.png")
    Image.fromarray(arr).resize((32, 32), Image.BICUBIC).save(tmp_path / "big.png")
    gen = torch.from_numpy(arr).permute(2, 0, 1).float()[None].expand(3, -1, -1, -1) / 255.0
    meta = [
        {"ground_truth_image": "gt.png"},
        {"ground_truth_image": str(tmp_path / "gt.png")},
        {"ground_truth_image": "big.png"},
    ]
    fn = load_reward("psnr", key="ground_truth_image", root=str(tmp_path))
    scores, _ = fn(gen, ["a", "b", "c"], meta)
    np.testing.assert_allclose(scores[:2], [100.0, 100.0])  # relative (root) and absolute paths
    assert 15.0 < scores[2] < 100.0  # resized back to 16×16 (bicubic): close, not identical
    rf = build_reward({"ssim": 1.0}, {"ssim": {"key": "ground_truth_image", "root": str(tmp_path)}})
    per, _ = rf(gen, ["a", "b", "c"], meta)
    np.testing.assert_allclose(per["ssim"][:2], [1.0, 1.0], atol=1e-5)
    with pytest.raises(ValueError, match=r"sample 0.*'ground_truth_image'.*does not exist"):
        fn(gen[:1], ["a"], [{"ground_truth_image": "nope.png"}])
    with pytest.raises(ValueError, match=r"shape \(3, H, W\)"):
        fn(gen[:1], ["a"], [{"ground_truth_image": np.zeros((16, 16, 3))}])
    assert not math.isnan(load_reward("psnr")(gen[:1], ["a"], [{"ground_truth": Image.fromarray(arr)}])[0][0])
