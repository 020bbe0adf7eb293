"""Tests for per-sample (verl-style) user scorers and data_source routing (reward_models.per_sample)."""

import numpy as np
import pytest
import torch

from reward_models.per_sample import is_per_sample
from reward_models.registry import _is_factory, build_reward, load_reward

USER_FILE = """
import numpy as np
from PIL import Image

CALLS = []

def compute_score(data_source, solution, ground_truth, extra_info):
    CALLS.append(dict(data_source=data_source, solution=solution, ground_truth=ground_truth,
                      extra_info=extra_info))
    assert isinstance(solution, Image.Image) and solution.mode == "RGB"
    red = np.asarray(solution)[..., 0].mean() / 255.0
    return float(red) + (ground_truth or 0.0)

def verl_style(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0):
    return {"score": 1.0 + bonus, "acc": extra_info["index"] * 10}

def maybe(data_source, solution, ground_truth, extra_info):
    return None if ground_truth is None else ground_truth

def bad_type(data_source, solution, ground_truth, extra_info):
    return "abc" if extra_info["index"] == 1 else 0.5

def no_score_key(data_source, solution, ground_truth, extra_info):
    return {"acc": 1.0}

def raises(data_source, solution, ground_truth, extra_info):
    if extra_info["index"] == 1:
        raise KeyError("needle")
    return 0.0

def tensor_score(data_source, solution, ground_truth, extra_info):
    import torch
    return torch.tensor([0.25])

def batched_len(images, prompts, metadata):
    return [float(len(p)) for p in prompts], {"n": len(prompts)}

def make_factory(scale=1.0):
    def fn(images, prompts, metadata):
        return [scale] * len(prompts), {}
    return fn

def count(data_source, solution, ground_truth, extra_info):
    return 1.0

def ocr(data_source, solution, ground_truth, extra_info):
    return 2.0

REWARDS = {"count": count, "ocr": ocr, "length": batched_len}
BAD_ROUTES = {"x": make_factory}
"""

ONLY_SCORE = """
def compute_score(data_source, solution, ground_truth, extra_info):
    return 7.0
"""


@pytest.fixture()
def user_file(tmp_path):
    path = tmp_path / "per_sample_rewards.py"
    path.write_text(USER_FILE)
    return str(path)


def _images(b=3, size=8):
    imgs = torch.zeros(b, 3, size, size)
    for i in range(b):
        imgs[i, 0] = i / max(b - 1, 1)  # red channel: 0, 0.5, 1
    return imgs


def test_signature_detection():
    def per_sample(data_source, solution, ground_truth, extra_info):
        pass

    def verl(data_source, solution_str, ground_truth, extra_info=None, **kw):
        pass

    def batched(images, prompts, metadata):
        pass

    def factory(scale=1.0, *, size=3):
        pass

    def extra_required(data_source, solution, ground_truth, extra_info, other):
        pass

    assert is_per_sample(per_sample) and is_per_sample(verl)
    assert not is_per_sample(batched) and not is_per_sample(factory) and not is_per_sample(extra_required)
    assert not is_per_sample({"a": 1})
    # the batched / factory split is unchanged, and per-sample scorers are not factories
    assert not _is_factory(batched) and _is_factory(factory)
    assert not _is_factory(per_sample) and not _is_factory(verl)


def test_per_sample_call_contract(user_file):
    fn = load_reward(f"{user_file}:compute_score")
    calls = fn.scorer.__globals__["CALLS"]  # what the user function saw
    meta = [
        {"data_source": "a", "ground_truth": 1.0, "tag": "x", "extra_info": {"split": "train", "index": 99}},
        {},
        {"data_source": "b", "ground_truth": 2.0},
    ]
    scores, info = fn(_images(), ["p0", "p1", "p2"], meta)
    assert isinstance(scores, np.ndarray) and scores.dtype == np.float32
    np.testing.assert_allclose(scores, [1.0, 128 / 255, 3.0], rtol=1e-6)
    assert info == {}
    assert [c["data_source"] for c in calls] == ["a", None, "b"]
    assert [c["ground_truth"] for c in calls] == [1.0, None, 2.0]
    # other row fields + flattened row-level extra_info, then prompt and batch index (which win)
    assert calls[0]["extra_info"] == {"tag": "x", "split": "train", "prompt": "p0", "index": 0}
    assert calls[1]["extra_info"] == {"prompt": "p1", "index": 1}
    assert calls[0]["solution"].size == (8, 8)
    assert meta[0] == {
        "data_source": "a",
        "ground_truth": 1.0,
        "tag": "x",
        "extra_info": {"split": "train", "index": 99},
    }


def test_verl_style_dict_return_and_kwargs(user_file):
    fn = load_reward(f"{user_file}:verl_style")
    scores, info = fn(_images(2), ["a", "b"], [{}, {}])
    np.testing.assert_allclose(scores, [1.0, 1.0])
    np.testing.assert_allclose(info["extras"]["acc"], [0.0, 10.0])
    fn = load_reward(f"{user_file}:verl_style", bonus=0.5)  # reward.kwargs reach every call
    np.testing.assert_allclose(fn(_images(2), ["a", "b"], [{}, {}])[0], [1.5, 1.5])
    with pytest.raises(ValueError, match=r"kwargs \['nope'\] do not match"):
        load_reward(f"{user_file}:verl_style", nope=1)


def test_none_is_not_applicable(user_file):
    fn = load_reward(f"{user_file}:maybe")
    scores, info = fn(_images(), ["a", "b", "c"], [{"ground_truth": 0.5}, {}, {"ground_truth": 2}])
    assert scores[0] == 0.5 and np.isnan(scores[1]) and scores[2] == 2.0
    assert info == {"num_none": 1}
    scores, _ = load_reward(f"{user_file}:tensor_score")(_images(1), ["a"], [{}])
    np.testing.assert_allclose(scores, [0.25])


def test_per_sample_errors(user_file):
    imgs = _images(2)
    prompts = ["first prompt", "a very particular prompt"]
    with pytest.raises(
        ValueError,
        match=r"'[^']*:bad_type' returned 'abc' \(str\) for sample 1 \(prompt 'a very particular prompt'.*"
        r"expected a float or \{'score': float\}",
    ):
        load_reward(f"{user_file}:bad_type")(imgs, prompts, [{}, {}])
    with pytest.raises(ValueError, match=r"returned \{'acc': 1\.0\} \(dict\) for sample 0"):
        load_reward(f"{user_file}:no_score_key")(imgs, prompts, [{}, {}])
    with pytest.raises(RuntimeError, match=r":raises' raised KeyError for sample 1 \(prompt 'a very particular") as ei:
        load_reward(f"{user_file}:raises")(imgs, prompts, [{}, {"data_source": "d"}])
    assert isinstance(ei.value.__cause__, KeyError) and "data_source 'd'" in str(ei.value)


def test_routing_by_data_source(user_file):
    for spec in (f"{user_file}:REWARDS", user_file):  # a bare file path picks its REWARDS
        fn = load_reward(spec)
        meta = [
            {"data_source": "ocr"},
            {"data_source": "count"},
            {"data_source": "other"},
            {},
            {"data_source": "length"},
            {"data_source": ["unhashable"]},
        ]
        prompts = ["a", "b", "c", "d", "eeeee", "f"]
        scores, info = fn(torch.zeros(6, 3, 4, 4), prompts, meta)
        np.testing.assert_allclose(scores[[0, 1, 4]], [2.0, 1.0, 5.0])
        assert np.isnan(scores[[2, 3, 5]]).all()
        assert info["unrouted"] == 3
        assert info["routed"] == {"ocr": 1, "count": 1, "length": 1}
        assert info["length"] == {"n": 1}  # a batched route sees only its own rows


def test_routing_errors(user_file):
    with pytest.raises(ValueError, match=r"BAD_ROUTES\['x'\].*per-sample scorer"):
        load_reward(f"{user_file}:BAD_ROUTES")
    with pytest.raises(ValueError, match="cannot take reward.kwargs"):
        load_reward(f"{user_file}:REWARDS", scale=2)


def test_bare_file_defaults(tmp_path):
    path = tmp_path / "only_score.py"
    path.write_text(ONLY_SCORE)
    scores, _ = load_reward(str(path))(torch.zeros(2, 3, 4, 4), ["a", "b"], [{}, {}])
    np.testing.assert_allclose(scores, [7.0, 7.0])
    empty = tmp_path / "empty.py"
    empty.write_text("def helper(x):\n    return x\n")
    with pytest.raises(ValueError, match=r"defines none of \['REWARDS', 'compute_score'\].*helper"):
        load_reward(str(empty))


def test_batched_and_factories_unchanged(user_file):
    imgs = torch.zeros(2, 3, 4, 4)
    scores, info = load_reward(f"{user_file}:batched_len")(imgs, ["ab", "abc"], [{}, {}])
    assert scores == [2.0, 3.0] and info == {"n": 2}
    scores, _ = load_reward(f"{user_file}:make_factory", scale=3.0)(imgs, ["a", "b"], [{}, {}])
    assert scores == [3.0, 3.0]


def test_build_reward_with_per_sample(user_file):
    rf = build_reward(
        {"score": 1.0, "routed": 2.0},
        sources={"score": f"{user_file}:compute_score", "routed": f"{user_file}:REWARDS"},
    )
    meta = [{"data_source": "count", "ground_truth": 0.0}, {"data_source": "nowhere", "ground_truth": 1.0}]
    per, info = rf(_images(2), ["a", "b"], meta)
    np.testing.assert_allclose(per["score"], [0.0, 2.0])
    assert per["routed"][0] == 1.0 and np.isnan(per["routed"][1])
    np.testing.assert_allclose(rf.combine(per), [2.0, 2.0])  # NaN term skipped
    assert info["routed"]["unrouted"] == 1
