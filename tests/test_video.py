"""Video as a sample kind: filmstrips and files (ddpo_grpo/video.py), frame-wise rewards and kind checks
(reward_models/video.py), the redness reward, and scripts/sample.py on a tiny Wan pipeline."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from ddpo_grpo.video import filmstrip, frame_indices, mp4_available, write_video
from reward_models import load_reward
from reward_models.video import FrameWise, check_kinds, declare_kinds, for_sample_kind, reduce_frames, sample_kinds


def _videos(b=2, f=5, side=8, seed=0):
    return torch.rand(b, f, 3, side, side, generator=torch.Generator().manual_seed(seed))


def test_filmstrip_lays_frames_side_by_side():
    v = _videos(f=5)
    strip = filmstrip(v)
    assert strip.shape == (2, 3, 8, 5 * 8)
    torch.testing.assert_close(strip[..., 16:24], v[:, 2])
    assert frame_indices(81, 8) == [0, 11, 23, 34, 46, 57, 69, 80] and frame_indices(3, 8) == [0, 1, 2]
    assert filmstrip(_videos(f=81)).shape[-1] == 8 * 8
    with pytest.raises(ValueError, match=r"expected videos of shape \(B, F, 3, H, W\)"):
        filmstrip(torch.rand(2, 3, 8, 8))


def test_write_video_gif_png_and_mp4_when_available(tmp_path):
    v = _videos(b=1, f=4, side=10)[0]
    files = write_video(v, tmp_path, "00000", fps=8)
    gif = Image.open(tmp_path / files["gif"])
    assert gif.n_frames == 4 and gif.size == (10, 10) and abs(gif.info["duration"] - 125) <= 10  # 10 ms units
    gif.seek(2)
    frame = np.asarray(gif.convert("RGB"), dtype=np.float32) / 255
    assert np.abs(frame - v[2].permute(1, 2, 0).numpy()).mean() < 0.1  # a palette image: close, not exact
    assert Image.open(tmp_path / files["png"]).size == (40, 10)
    assert files["file"] == ("00000.mp4" if mp4_available() else "00000.gif")
    if mp4_available():
        import av

        with av.open(str(tmp_path / "00000.mp4")) as container:
            frames = list(container.decode(video=0))
        assert len(frames) == 4 and (frames[0].width, frames[0].height) == (10, 10)


def test_reduce_frames_rules_and_nan():
    s = np.array([[1.0, 2.0, 6.0], [np.nan, 4.0, np.nan], [np.nan, np.nan, np.nan]], dtype=np.float32)
    np.testing.assert_allclose(reduce_frames(s, "mean")[:2], [3.0, 4.0])
    np.testing.assert_allclose(reduce_frames(s, "min")[:2], [1.0, 4.0])
    np.testing.assert_allclose(reduce_frames(s, "max")[:2], [6.0, 4.0])
    np.testing.assert_allclose(reduce_frames(s, "median")[:2], [2.0, 4.0])
    assert reduce_frames(s, "first")[0] == 1.0 and reduce_frames(s, "last")[0] == 6.0
    assert np.isnan(reduce_frames(s, "mean")[2])  # every frame not applicable -> not applicable
    with pytest.raises(ValueError, match=r"reward.frame_reduction='avg' must be one of"):
        reduce_frames(s, "avg")


def test_an_image_reward_scores_a_video_frame_wise():
    seen = {}

    def brightness(images, prompts, metadata):
        seen["shape"], seen["prompts"] = tuple(images.shape), list(prompts)
        scores = images.mean(dim=(1, 2, 3))
        return scores, {"bright": scores.tolist(), "task": [m["task"] for m in metadata]}

    v = _videos(b=2, f=3)
    fn = for_sample_kind(brightness, "video", "min")
    assert isinstance(fn, FrameWise) and for_sample_kind(brightness, "image") is brightness
    scores, info = fn(v, ["a", "b"], [{"task": "x"}, {"task": "y"}])
    assert seen["shape"] == (6, 3, 8, 8) and seen["prompts"] == ["a", "a", "a", "b", "b", "b"]
    expected = v.mean(dim=(2, 3, 4)).min(dim=1).values.numpy()
    np.testing.assert_allclose(scores, expected, rtol=1e-6)
    np.testing.assert_allclose(info["bright"], expected, rtol=1e-6)
    assert info["task"] == ["x", "y"]


def test_redness_takes_images_and_whole_videos():
    fn = load_reward("redness")
    assert sample_kinds(fn) == ("image", "video") and for_sample_kind(fn, "video") is fn
    red = torch.zeros(1, 3, 4, 4)
    red[:, 0] = 1.0
    images = torch.cat([red, torch.ones(1, 3, 4, 4)])
    np.testing.assert_allclose(fn(images, ["a", "b"], [{}, {}])[0], [1.0, 0.0])
    video = torch.stack([images, images.flip(0)], dim=0)  # 2 videos of 2 frames: red then white, white then red
    np.testing.assert_allclose(fn(video, ["a", "b"], [{}, {}])[0], [0.5, 0.5])


def test_a_reward_of_the_wrong_kind_is_refused():
    def video_only(videos, prompts, metadata):
        return [0.0] * len(prompts), {}

    declare_kinds(video_only, "video")
    plain = lambda images, prompts, metadata: ([0.0] * len(prompts), {})  # noqa: E731
    check_kinds({"clip": plain, "motion": video_only}, "video", "WanPolicy")
    check_kinds({"clip": plain}, "image", "FluxPolicy")
    with pytest.raises(ValueError, match=r"reward 'motion' scores video samples, but FluxPolicy samples images"):
        check_kinds({"clip": plain, "motion": video_only}, "image", "FluxPolicy")
    with pytest.raises(ValueError, match=r"reward 'red' scores image samples, but MDM samples arrays"):
        check_kinds({"red": declare_kinds(lambda s, p, m: None, "image")}, "array", "MDM")


def test_sample_script_writes_videos(tmp_path, capsys):
    from ddpo_grpo.tiny import build_tiny_wan
    from tests.conftest import load_script

    build_tiny_wan(tmp_path / "wan")
    (tmp_path / "p.txt").write_text("a red ball\na blue cube\n")
    sample = load_script("sample")
    args = sample.build_parser().parse_args(
        ["--model", str(tmp_path / "wan"), "--prompts", str(tmp_path / "p.txt"), "--out", str(tmp_path / "out")]
        + ["--resolution", "32", "--num_frames", "5", "--num_steps", "2", "--max_sequence_length", "16"]
    )
    index = sample.sample(args)
    assert [r["prompt"] for r in index] == ["a red ball", "a blue cube"]
    for row in index:
        assert (tmp_path / "out" / row["gif"]).is_file() and (tmp_path / "out" / row["file"]).is_file()
        assert Image.open(tmp_path / "out" / row["gif"]).n_frames == 5
        assert Image.open(tmp_path / "out" / row["png"]).size == (5 * 32, 32)
    lines = (tmp_path / "out" / "index.jsonl").read_text().splitlines()
    assert [json.loads(line)["file"] for line in lines] == [r["file"] for r in index]
    # its last line says which formats it wrote (the MP4 only with the video extra)
    said = capsys.readouterr().out.strip().splitlines()[-1]
    if mp4_available():
        assert said == 'video samples written as MP4 + GIF + PNG (index.jsonl\'s "file": the MP4)'
    else:
        assert said.startswith('video samples written as GIF + PNG (index.jsonl\'s "file": the GIF); no MP4: ')
        assert 'pip install "ddpo_grpo[video]"' in said
    bad = sample.build_parser().parse_args(
        ["--model", str(tmp_path / "wan"), "--prompts", str(tmp_path / "p.txt"), "--out", str(tmp_path / "o2")]
        + ["--resolution", "32", "--num_frames", "6"]
    )
    from ddpo_grpo.cli import UsageError

    with pytest.raises(UsageError, match=r"--num_frames 6: sample.num_frames=6: .*4k \+ 1 frames \(nearest: 5 or 9\)"):
        sample.sample(bad)


def test_a_video_run_scores_image_rewards_frame_wise(tmp_path, monkeypatch):
    """Through the trainer: an undeclared image reward scores a tiny Wan's videos frame by frame, reduced by
    reward.frame_reduction (here "min": each video's score is the least of its frames' scores)."""
    import reward_models
    from config.wan import tiny
    from ddpo_grpo.trainer import Trainer

    seen = []

    def red(frames, prompts, metadata):  # an image reward: [N, 3, H, W] -> [N] (no sample_kinds)
        seen.append(frames.clone())
        return frames[:, 0].float().mean(dim=(1, 2)).numpy(), {}

    monkeypatch.setitem(reward_models.REGISTRY, "frame_red", lambda: red)
    cfg = tiny()
    cfg.logdir, cfg.run_name, cfg.num_epochs = str(tmp_path), "v", 1
    cfg.reward.fns, cfg.reward.frame_reduction = {"frame_red": 1.0}, "min"
    trainer = Trainer(cfg)
    ep, timing = trainer.sample_phase(0)
    scores = trainer.reward_phase(ep, timing)["frame_red"]
    frames = torch.cat(seen)  # [B·F, 3, H, W], B videos of F = 5 frames
    assert frames.ndim == 4 and frames.shape[0] == 5 * len(scores)
    expected = frames[:, 0].float().mean(dim=(1, 2)).reshape(len(scores), 5).min(dim=1).values.numpy()
    np.testing.assert_allclose(scores, expected, rtol=1e-6)


def test_a_video_only_reward_is_refused_for_an_image_family(tmp_path, monkeypatch):
    import reward_models
    from config.quickstart import tiny
    from ddpo_grpo.trainer import Trainer
    from foundation.errors import ConfigError

    monkeypatch.setitem(reward_models.REGISTRY, "vid", lambda: declare_kinds(lambda s, p, m: (None, {}), "video"))
    cfg = tiny()
    cfg.logdir, cfg.run_name = str(tmp_path), "i"
    cfg.reward.fns = {"vid": 1.0}
    with pytest.raises(ConfigError, match=r"reward 'vid' scores video samples, but SD3Policy samples images"):
        Trainer(cfg)
    assert not (tmp_path / "i").exists()


def test_evaluate_script_scores_videos_frame_wise(tmp_path):
    """scripts/evaluate.py on a tiny Wan with an image reward (JPEG size takes (N, 3, H, W) only): every video scored,
    its frames scored and reduced."""
    from ddpo_grpo.tiny import build_tiny_wan
    from tests.conftest import load_script

    build_tiny_wan(tmp_path / "wan")
    (tmp_path / "p.txt").write_text("a red ball\na blue cube\n")
    evaluate = load_script("evaluate")
    argv = ["--model", str(tmp_path / "wan"), "--prompts", str(tmp_path / "p.txt"), "--reward", "jpeg_compressibility"]
    argv += ["--resolution", "32", "--num_frames", "5", "--num_steps", "2", "--max_sequence_length", "16"]
    argv += ["--group_by", "", "--frame_reduction", "min", "--out", str(tmp_path / "ev"), "--device", "cpu"]
    assert evaluate.main(argv) == 0
    data = json.loads((tmp_path / "ev" / "eval.json").read_text())
    assert data["metrics"]["eval/num_samples"] == 2 and np.isfinite(data["metrics"]["eval/score"])


def test_written_formats_names_the_files_and_the_missing_mp4():
    from ddpo_grpo.sample_kinds import written_formats

    mp4 = {"file": "00000.mp4", "gif": "00000.gif", "png": "00000.png"}
    assert written_formats("video", mp4) == 'video samples written as MP4 + GIF + PNG (index.jsonl\'s "file": the MP4)'
    gif = written_formats("video", {"file": "00000.gif", "gif": "00000.gif", "png": "00000.png"})
    assert gif.startswith("video samples written as GIF + PNG") and "ddpo_grpo[video]" in gif
    assert (
        written_formats("image", {"file": "00000.png"})
        == 'image samples written as PNG (index.jsonl\'s "file": the PNG)'
    )
