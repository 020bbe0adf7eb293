"""load_state_dict_checked (ddpo_grpo/checkpoint.py): state dicts whose keys do not match exactly."""

import pytest
import torch

from ddpo_grpo.checkpoint import load_state_dict_checked


def _net(in_ch=4):
    return torch.nn.Sequential(torch.nn.Conv2d(in_ch, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1))


def test_exact_match_loads():
    src, dst = _net(), _net()
    report = load_state_dict_checked(dst, src.state_dict())
    assert report["missing"] == report["unexpected"] == report["mismatched"] == [] and len(report["loaded"]) == 4
    torch.testing.assert_close(dst[2].weight, src[2].weight)


def test_mismatch_refused_unless_not_strict():
    src, dst = _net(4), _net(8)  # e.g. a text-to-image UNet's conv_in into an image-conditioned one
    sd = {**src.state_dict(), "extra.weight": torch.zeros(1)}
    del sd["2.bias"]
    before = {k: v.clone() for k, v in dst.state_dict().items()}
    with pytest.raises(
        ValueError,
        match=r"1 missing \(2.bias\); 1 unexpected \(extra.weight\); 1 shape-mismatched "
        r"\(0.weight \(8, 4, 3, 3\)→\(8, 8, 3, 3\)\).*strict=False",
    ):
        load_state_dict_checked(dst, sd, source="base.safetensors")
    assert all(torch.equal(v, before[k]) for k, v in dst.state_dict().items())  # nothing loaded
    report = load_state_dict_checked(dst, sd, strict=False)
    assert report["missing"] == ["2.bias"] and report["unexpected"] == ["extra.weight"]
    assert report["mismatched"] == [("0.weight", (8, 4, 3, 3), (8, 8, 3, 3))]
    assert report["loaded"] == ["0.bias", "2.weight"]
    torch.testing.assert_close(dst[2].weight, src[2].weight)
    assert torch.equal(dst[0].weight, before["0.weight"]) and torch.equal(dst[2].bias, before["2.bias"])
