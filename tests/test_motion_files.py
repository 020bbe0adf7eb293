"""Motion files read back for scoring (worlds/motion/files.py): a bad file is one line naming it and the shape."""

from __future__ import annotations

import json

import numpy as np
import pytest

from worlds.motion.features import FEATURE_DIM
from worlds.motion.files import MotionFileError, read_motion, read_samples, write_motion
from worlds.motion.generator import generate
from worlds.motion.reward import MIN_FRAMES


@pytest.fixture(scope="module")
def features():
    return generate("a person walks forward", 3).features().astype(np.float32)


def _one_line(err, *words):
    msg = str(err.value)
    assert "\n" not in msg, msg
    for w in words:
        assert w in msg, (w, msg)


def test_round_trip(tmp_path, features):
    names = write_motion(features, tmp_path, "walk")
    x = read_motion(tmp_path / names["file"])
    assert x.dtype == np.float32 and x.shape == features.shape and np.array_equal(x, features)


@pytest.mark.parametrize(
    "case, array, words",
    [
        ("wrong width", np.zeros((40, 251), np.float32), ["(40, 251)", f"(frames >= {MIN_FRAMES}, {FEATURE_DIM})"]),
        ("one frame as 1-d", np.zeros(FEATURE_DIM, np.float32), [f"({FEATURE_DIM},)", "expected"]),
        ("joints, not features", np.zeros((40, 22, 3), np.float32), ["joint positions", "features_from_joints"]),
        ("too few frames", np.zeros((MIN_FRAMES - 1, FEATURE_DIM)), [f"{MIN_FRAMES - 1} frames, too short"]),
        ("strings", np.array(["a", "b"]), ["dtype <U1", "expected float features"]),
    ],
)
def test_bad_shapes_are_refused_in_one_line(tmp_path, case, array, words):
    path = tmp_path / "bad.npy"
    np.save(path, array)
    with pytest.raises(MotionFileError) as err:
        read_motion(path)
    _one_line(err, str(path), *words)


def test_nan_frames_are_named(tmp_path, features):
    x = features.copy()
    x[[3, 7], 10] = np.nan
    x[9, 0] = np.inf
    np.save(tmp_path / "nan.npy", x)
    with pytest.raises(MotionFileError) as err:
        read_motion(tmp_path / "nan.npy")
    _one_line(err, "nan.npy", f"3 of {len(x)} frames hold NaN or inf (frames 3, 7, 9)", f"{FEATURE_DIM})")


def test_not_an_array_and_missing(tmp_path):
    (tmp_path / "text.npy").write_text("hello", encoding="utf-8")
    with pytest.raises(MotionFileError) as err:
        read_motion(tmp_path / "text.npy")
    _one_line(err, "text.npy", "not a NumPy .npy array")
    with pytest.raises(MotionFileError) as err:
        read_motion(tmp_path / "gone.npy")
    _one_line(err, "gone.npy", "no such file")
    with pytest.raises(ValueError):  # MotionFileError is a ValueError: callers that catch those still work
        read_motion(tmp_path / "gone.npy")


def test_min_frames_is_the_callers(tmp_path, features):
    np.save(tmp_path / "short.npy", features[:20])
    assert read_motion(tmp_path / "short.npy", min_frames=20).shape == (20, FEATURE_DIM)
    with pytest.raises(MotionFileError, match="frames >= 21"):
        read_motion(tmp_path / "short.npy", min_frames=21)


def test_read_samples(tmp_path, features):
    with pytest.raises(MotionFileError, match="no index.jsonl"):
        read_samples(tmp_path)
    rows = []
    for i, n in enumerate((len(features), 30)):
        rows.append(
            {"prompt": "a person walks forward", "file": write_motion(features[:n], tmp_path, f"{i:05d}")["file"]}
        )
    (tmp_path / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    feats, got = read_samples(tmp_path)
    assert [len(x) for x in feats] == [len(features), 30] and got == rows
    np.save(tmp_path / "00001.npy", features[:30, :100])
    with pytest.raises(MotionFileError) as err:
        read_samples(tmp_path)
    _one_line(err, "00001.npy", "(30, 100)")
    (tmp_path / "index.jsonl").write_text('{"prompt": "x"}\n', encoding="utf-8")
    with pytest.raises(MotionFileError, match='line 1 needs "prompt" and "file"'):
        read_samples(tmp_path)
