"""Tests for reward_models: registry, JPEG rewards, MultiReward, user files."""

import numpy as np
import pytest
import torch

from foundation.errors import RewardError
from reward_models import REGISTRY, MultiReward, build_reward, load_reward, to_pil, to_uint8


def _flat_and_noisy(size=64):
    g = torch.Generator().manual_seed(0)
    flat = torch.full((1, 3, size, size), 0.5)
    noisy = torch.rand((1, 3, size, size), generator=g)
    return torch.cat([flat, noisy])


def _const(values):
    def fn(images, prompts, metadata):
        return np.asarray(values, dtype=np.float32), {}

    return fn


def test_to_uint8_and_pil():
    imgs = torch.tensor([0.0, 0.5, 1.0, 1.2]).view(1, 1, 2, 2).expand(1, 3, 2, 2)
    arr = to_uint8(imgs)
    assert arr.shape == (1, 2, 2, 3) and arr.dtype == np.uint8
    assert arr[0, :, :, 0].tolist() == [[0, 128], [255, 255]]
    pils = to_pil(imgs)
    assert len(pils) == 1 and pils[0].size == (2, 2) and pils[0].mode == "RGB"
    with pytest.raises(ValueError, match="B, 3, H, W"):
        to_uint8(torch.zeros(3, 4, 4))


def test_builtins_registered():
    assert {"jpeg_compressibility", "jpeg_incompressibility"} <= set(REGISTRY)


def test_compressibility_prefers_flat():
    imgs = _flat_and_noisy()
    scores, info = load_reward("jpeg_compressibility")(imgs, ["a", "b"], [{}, {}])
    assert isinstance(scores, np.ndarray) and scores.dtype == np.float32 and scores.shape == (2,)
    assert isinstance(info, dict)
    assert scores[0] > scores[1]
    assert (scores < 0).all()


def test_incompressibility_prefers_noisy():
    imgs = _flat_and_noisy()
    scores, _ = load_reward("jpeg_incompressibility")(imgs, ["a", "b"], [{}, {}])
    assert scores.shape == (2,) and scores.dtype == np.float32
    assert scores[1] > scores[0] > 0
    neg, _ = load_reward("jpeg_compressibility")(imgs, ["a", "b"], [{}, {}])
    np.testing.assert_allclose(scores, -neg)


def test_multireward_weighted_nan():
    rf = MultiReward(
        [
            ("a", 2.0, _const([1.0, np.nan, 3.0, np.nan])),
            ("b", 0.5, _const([4.0, 2.0, np.nan, np.nan])),
        ]
    )
    assert rf.names == ["a", "b"]
    imgs = torch.zeros(4, 3, 8, 8)
    per, info = rf(imgs, ["p"] * 4, [{}] * 4)
    assert set(per) == {"a", "b"} and all(v.dtype == np.float32 for v in per.values())
    comb = rf.combine(per)
    assert comb.dtype == np.float32
    np.testing.assert_allclose(comb[:3], [2.0 + 2.0, 1.0, 6.0])
    assert np.isnan(comb[3])
    st = rf.stats(per, comb)
    np.testing.assert_allclose(st["reward/mean"], np.mean([4.0, 1.0, 6.0]), rtol=1e-6)
    np.testing.assert_allclose(st["reward/std"], np.std([4.0, 1.0, 6.0]), rtol=1e-6)
    np.testing.assert_allclose(st["reward/a/mean"], 2.0)
    np.testing.assert_allclose(st["reward/b/mean"], 3.0)
    np.testing.assert_allclose(st["reward/b/std"], 1.0)


def test_multireward_coerces_tensor_and_list():
    rf = MultiReward(
        [("t", 1.0, lambda i, p, m: (torch.tensor([1.0, 2.0]), {"x": 1})), ("l", 1.0, lambda i, p, m: ([3, 4], {}))]
    )
    per, info = rf(torch.zeros(2, 3, 4, 4), ["a", "b"], [{}, {}])
    np.testing.assert_allclose(rf.combine(per), [4.0, 6.0])
    assert info == {"t": {"x": 1}}


def test_multireward_errors():
    imgs = torch.zeros(2, 3, 4, 4)
    args = (imgs, ["a", "b"], [{}, {}])
    with pytest.raises(ValueError, match=r"'short'.*returned 1 scores, expected 2"):
        MultiReward([("short", 1.0, _const([1.0]))])(*args)
    with pytest.raises(ValueError, match=r"'words'.*non-numeric"):
        MultiReward([("words", 1.0, lambda i, p, m: (["x", "y"], {}))])(*args)
    with pytest.raises(ValueError, match=r"'none'.*non-numeric"):
        MultiReward([("none", 1.0, lambda i, p, m: (None, {}))])(*args)

    def boom(i, p, m):
        raise KeyError("missing field")

    with pytest.raises(RewardError, match="'boom'") as ei:
        MultiReward([("boom", 1.0, boom)])(*args)
    assert isinstance(ei.value.__cause__, KeyError)

    # an infinite score names the reward, the sample and its prompt (NaN = not applicable is allowed)
    with pytest.raises(RewardError, match=r"reward 'big' returned inf for sample 1 \(prompt 'b'\)"):
        MultiReward([("big", 1.0, lambda i, p, m: ([np.nan, np.inf], {}))])(*args)


def test_build_reward_errors():
    with pytest.raises(ValueError, match=r"reward\.fns.*jpeg_compressibility"):
        build_reward({})
    with pytest.raises(ValueError, match=r"unknown reward 'nope'.*jpeg_compressibility.*file\.py:fn"):
        build_reward({"nope": 1.0})
    with pytest.raises(ValueError, match="not a number"):
        build_reward({"jpeg_compressibility": "heavy"})
    rf = build_reward(
        {"jpeg_compressibility": 1.0, "jpeg_incompressibility": 0.5}, {"jpeg_compressibility": {"quality": 80}}
    )
    assert rf.names == ["jpeg_compressibility", "jpeg_incompressibility"]


USER_FILE = """
import numpy as np

def prompt_len(images, prompts, metadata):
    return np.array([len(p) for p in prompts], dtype=np.float32), {}

def make_scaled(scale=1.0):
    def fn(images, prompts, metadata):
        return [scale * m.get("v", float("nan")) for m in metadata], {}
    return fn

NOT_CALLABLE = 3
"""


def test_user_file(tmp_path):
    path = tmp_path / "my_rewards.py"
    path.write_text(USER_FILE)
    imgs = torch.zeros(2, 3, 4, 4)
    fn = load_reward(f"{path}:prompt_len")
    scores, _ = fn(imgs, ["ab", "abcd"], [{}, {}])
    np.testing.assert_allclose(scores, [2, 4])

    rf = build_reward({f"{path}:make_scaled": 1.0, f"{path}:prompt_len": 0.5}, {f"{path}:make_scaled": {"scale": 10.0}})
    per, _ = rf(imgs, ["ab", "abcd"], [{"v": 1.0}, {}])
    np.testing.assert_allclose(rf.combine(per), [11.0, 2.0])

    with pytest.raises(ValueError, match=r"no attribute 'missing'.*prompt_len"):
        load_reward(f"{path}:missing")
    with pytest.raises(ValueError, match="not callable"):
        load_reward(f"{path}:NOT_CALLABLE")
    with pytest.raises(ValueError, match="does not exist"):
        load_reward(f"{tmp_path / 'nofile.py'}:fn")
    with pytest.raises(ValueError, match="cannot take"):
        load_reward(f"{path}:prompt_len", scale=2.0)
