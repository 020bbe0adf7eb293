"""Degradations: specs and the differentiable loss operator (ddpo_grpo/degradations.py), the simulation of
restoration data (worlds/shapes_i2i/degradations.py)."""

import numpy as np
import pytest
import torch

from ddpo_grpo import degradations as D
from worlds.shapes_i2i import degradations as W


def _img(seed=0, b=2, side=32):
    return torch.rand(b, 3, side, side, generator=torch.Generator().manual_seed(seed))


def test_specs_parse_and_name():
    expected = (D.Degradation("downsample", 2.0),)
    assert D.parse("downsample:2") == D.parse({"kind": "downsample", "factor": 2}) == expected
    assert D.name([{"kind": "blur", "sigma": 1.5}, "noise:0.05"]) == "blur_s1.5+noise_s0.05"
    assert D.name("jpeg:20") == "jpeg_q20" and D.name("identity") == "identity"
    assert D.parse("jpeg:20")[0].to_dict() == {"kind": "jpeg", "quality": 20.0}


@pytest.mark.parametrize(
    "spec, message",
    [
        ("sharpen:2", "unknown degradation 'sharpen'"),
        ("blur:x", r"'blur:x' needs a number after ':'"),
        ({"kind": "noise"}, "needs its 'sigma'"),
        ({"kind": "noise", "sigma": 2.0}, r"sigma=2.0 must be in \(0, 1\]"),
        ({"kind": "jpeg", "quality": 20.5}, "quality must be an integer"),
        ({"kind": "blur", "sigma": 1.0, "radius": 2}, "unexpected \\['radius'\\]"),
        ([], "non-empty list"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(ValueError, match=message):
        D.parse(spec, where="train.degradation")


def test_downsample_and_blur_are_exact_and_differentiable():
    flat = torch.full((1, 3, 20, 20), 0.3)
    for spec in ("downsample:2", "downsample:3", "blur:1.5"):
        torch.testing.assert_close(W.degrade(flat, spec), flat)  # a constant image is unchanged
    x = _img()
    small = torch.nn.functional.avg_pool2d(x, 2)
    ups = torch.nn.functional.interpolate(small, size=(32, 32), mode="bilinear", align_corners=False)
    torch.testing.assert_close(D.downsample(x, 2), ups)  # area average = 2×2 mean for an integer factor
    blurred = D.gaussian_blur(x, 1.0)
    assert blurred.shape == x.shape and blurred.std() < x.std()
    torch.testing.assert_close(blurred.mean(dim=(2, 3)), x.mean(dim=(2, 3)), atol=2e-2, rtol=0)
    x_hat = x.clone().requires_grad_(True)
    D.consistency_loss(x_hat, W.degrade(x, "blur:1"), "blur:1").sum().backward()  # D(x) = y: zero loss and gradient
    assert x_hat.grad.abs().max() < 1e-6


def test_noise_and_jpeg_simulation_and_identity_operator():
    x = _img(1)
    a = W.degrade(x, "noise:0.1", generator=torch.Generator().manual_seed(5))
    b = W.degrade(x, "noise:0.1", generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(a, b)
    assert 0.05 < (a - x).std() < 0.11 and a.min() >= 0 and a.max() <= 1
    smooth = torch.zeros(1, 3, 32, 32)
    smooth[:, 0, 8:24, 8:24] = 1.0  # a red square on black: JPEG changes it by a few levels
    j = W.degrade(smooth, "jpeg:90")
    assert j.shape == smooth.shape and 0 < (j - smooth).abs().mean() < 0.02
    assert torch.equal(D.operator("noise:0.1")(x), x) and torch.equal(D.operator("jpeg:10")(x), x)


def test_consistency_loss_per_sample_specs():
    x, y = _img(2, b=3), _img(3, b=3)
    specs = [{"kind": "blur", "sigma": 1.0}, "downsample:2", {"kind": "blur", "sigma": 1.0}]
    per = D.consistency_loss(x, y, specs)
    for i, s in enumerate(specs):
        expected = (D.operator(s)(x[i : i + 1]) - y[i : i + 1]).pow(2).mean()
        np.testing.assert_allclose(per[i].item(), expected.item(), rtol=1e-6)
    with pytest.raises(ValueError, match="one per sample"):
        D.consistency_loss(x, y, specs[:2])
