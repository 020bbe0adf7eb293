"""MotionWorld physics metrics, the motion_judge / motion_physics rewards (reward contract) and rendering."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reward_models import REGISTRY
from reward_models.contract import coerce_scores, per_sample_entries
from worlds.motion.features import features_from_joints
from worlds.motion.generator import generate
from worlds.motion.physics import physics_metrics, physics_score
from worlds.motion.render import filmstrip_png, stick_figure_gif
from worlds.motion.reward import motion_judge, motion_physics
from worlds.motion.skeleton import FPS


@pytest.fixture(scope="module")
def clips():
    return {
        p: generate(p, 11)
        for p in ("a person walks forward", "a person waves the right hand", "a person jumps once then turns left")
    }


def test_physics_skating_vs_clean(clips):
    walk = clips["a person walks forward"].joints
    stand = clips["a person waves the right hand"].joints
    # hand-made skating: the standing clip glides forward at 1 m/s without stepping
    glide = stand.copy()
    glide[..., 2] += np.arange(len(glide))[:, None] / FPS
    clean_m, skate_m = physics_metrics(walk), physics_metrics(glide)
    assert clean_m["skate"] < 0.02 and physics_metrics(stand)["skate"] < 1e-6
    assert abs(skate_m["skate"] - 1.0) < 1e-6  # the balls of the feet (below 5 cm) slide at 1 m/s
    assert physics_score(clean_m) > 0.9 and physics_score(skate_m) < 0.2
    assert clean_m["penetration"] == 0.0 and clean_m["bone_drift"] < 1e-9
    sunk = walk.copy()
    sunk[..., 1] -= 0.05
    assert physics_metrics(sunk)["penetration"] > 0.0 and physics_metrics(sunk)["max_penetration"] >= 0.05 - 1e-9
    noisy = walk + np.random.default_rng(0).normal(0, 0.01, walk.shape)
    noisy_m = physics_metrics(noisy)
    assert noisy_m["jerk"] > 3 * clean_m["jerk"] and noisy_m["bone_drift"] > 0.01
    assert physics_score(noisy_m) < 0.6
    batch = physics_metrics(np.stack([walk[:60], glide[:60]]))
    assert batch["skate"].shape == (2,)
    with pytest.raises(ValueError, match="22, 3"):
        physics_metrics(np.zeros((10, 20, 3)))


def _batch(clips):
    feats = [clips[p].features()[:59] for p in clips]  # equal lengths for one tensor
    return torch.tensor(np.stack(feats))


def test_motion_judge_contract(clips):
    assert REGISTRY["motion_judge"] is motion_judge and REGISTRY["motion_physics"] is motion_physics
    prompts = list(clips)
    x = _batch(clips)  # (3, 59, 263)
    x = torch.cat([x, x[:1], x[:1]])
    x[4] = float("nan")
    prompts += ["a photo of a cat", "a person walks forward"]
    metadata = [{"task": "x"}] * 5
    metadata[1] = {"prompt": prompts[1], **generate(prompts[1], 0).spec.to_row()}
    fn = motion_judge()
    scores, info = fn(x, prompts, metadata)
    scores = coerce_scores("motion_judge", scores, 5)
    assert scores.shape == (5,) and np.isnan(scores[3]) and scores[4] == 0.0
    assert scores[1] == 1.0  # the standing wave clip, spec from the row
    per = per_sample_entries(info, 5)
    assert set(per) == {"task", "strict", "partial", "soft"}
    assert per["task"] == ["locomotion", "arms", "sequence", "", "locomotion"]
    assert info["motion_judge/not_applicable"] == pytest.approx(0.2)
    assert info["motion_judge/invalid"] == pytest.approx(0.2)
    assert "motion_judge/strict/arms" in info
    partial, _ = motion_judge(score="partial")(x.numpy(), prompts, metadata)
    assert np.all((np.asarray(partial)[[0, 1, 2]] >= 0) & (np.asarray(partial)[[0, 1, 2]] <= 1))
    soft, _ = motion_judge(score="soft")(x.numpy(), prompts, metadata)
    assert np.all(np.asarray(soft)[[0, 1, 2]] >= np.asarray(partial)[[0, 1, 2]]) and soft[4] == 0.0
    with pytest.raises(ValueError, match="score"):
        motion_judge(score="best")
    with pytest.raises(ValueError, match="263"):
        fn(torch.zeros(2, 30, 100), ["a person walks forward"] * 2, [{}] * 2)
    with pytest.raises(ValueError, match="one prompt per sample"):
        fn(torch.zeros(2, 30, 263), ["a person walks forward"], [{}])


def test_motion_judge_scores_clean_clips(clips):
    prompts = list(clips)
    feats = [clips[p].features() for p in prompts]  # ragged list is accepted
    scores, info = motion_judge()(feats, prompts, [{} for _ in prompts])
    assert np.all(np.asarray(scores) == 1.0) and info["motion_judge/strict"] == 1.0
    # a padded sample is cut to its row's "length"
    padded = np.concatenate([feats[0], np.zeros((30, 263), np.float32)])[None]
    s_cut, _ = motion_judge()(padded, prompts[:1], [{"length": len(feats[0])}])
    assert float(np.asarray(s_cut)[0]) == 1.0


def test_motion_physics_contract(clips):
    x = _batch(clips)
    x = torch.cat([x, torch.full_like(x[:1], float("nan"))])
    fn = motion_physics()
    scores, info = fn(x, ["anything"] * 4, [{}] * 4)
    scores = coerce_scores("motion_physics", scores, 4)
    assert np.all((scores[:3] > 0.8) & (scores[:3] <= 1.0)) and scores[3] == 0.0
    per = per_sample_entries(info, 4)
    assert {"skate", "penetration", "max_penetration", "accel", "jerk", "bone_drift"} <= set(per)
    assert np.isnan(per["jerk"][3]) and info["motion_physics/jerk"] > 0
    strict_fn = motion_physics(lambda_skate=0.0, lambda_jerk=1e-3)
    assert np.all(np.asarray(strict_fn(x[:3], ["a"] * 3, [{}] * 3)[0]) < np.asarray(scores[:3]))
    with pytest.raises(ValueError, match="lambda_jerk"):
        motion_physics(lambda_jerk=-1.0)


@pytest.mark.parametrize("field", ["lambda_skate", "lambda_jerk", "lambda_penetration", "lambda_floating"])
def test_negative_physics_weight_is_one_fix_it_line(field):
    with pytest.raises(ValueError) as err:
        motion_physics(**{field: -0.5})
    msg = str(err.value)
    assert "\n" not in msg and "negative" in msg and f"reward.kwargs['motion_physics']['{field}']" in msg


def test_floating_bone_groups_and_sane(clips):
    """floating = mean height of the lowest foot joint above the 5 cm contact band; bone CV per group; sane flag."""
    from worlds.motion.physics import BONE_GROUPS, CONTACT_HEIGHT, METRICS

    walk = clips["a person walks forward"].joints.copy()
    clean = physics_metrics(walk)
    assert clean["floating"] == 0.0 and clean["sane"] == 1.0 and clean["bone_cv_max"] < 1e-9
    assert {f"bone_cv_{g}" for g in BONE_GROUPS} <= set(clean) and set(METRICS) == set(clean)
    assert sorted(c for bones in BONE_GROUPS.values() for c in bones) == list(range(1, 22))  # every bone once
    lifted = walk.copy()
    lifted[..., 1] += 0.30  # hovering 30 cm up: floating = 0.30 - 0.05 above the lowest foot's own height (0)
    assert abs(physics_metrics(lifted)["floating"] - (0.30 - CONTACT_HEIGHT)) < 1e-9
    stretched = walk.copy()  # the left shin (knee 4 -> ankle 7, the foot 10 with it) 10 % longer on odd frames
    stretched[1::2, [7, 10]] += 0.1 * (walk[1::2, 7:8] - walk[1::2, 4:5])
    m = physics_metrics(stretched)  # lengths L and 1.1 L alternately: CV = 0.05 / 1.05
    assert abs(m["bone_cv_shin"] - 0.05 / 1.05) < 2e-3 and m["bone_cv_thigh"] < 1e-9
    assert m["bone_cv_max"] == m["bone_cv_shin"] and m["sane"] == 1.0
    arm = walk.copy()  # the left upper arm (shoulder 16 -> elbow 18, the wrist 20 with it) 50 % longer: CV ≈ 0.2
    arm[1::2, [18, 20]] += 0.5 * (walk[1::2, 18:19] - walk[1::2, 16:17])
    m = physics_metrics(arm)
    assert m["bone_cv_upper_arm"] > 0.1 and m["max_penetration"] == 0.0 and m["sane"] == 0.0
    sunk = walk.copy()
    sunk[..., 1] -= 0.06  # a foot 6 cm under the floor: not sane, and the penetration term lowers the reward
    assert physics_metrics(sunk)["sane"] == 0.0
    fn, pen = motion_physics(), motion_physics(lambda_penetration=10.0, lambda_floating=10.0)
    f = features_from_joints(walk)  # (features put the lowest joint on the floor: move every height, dims 3, 5, 8 ...)
    up = np.zeros(f.shape[1])
    up[3], up[5:67:3] = 1.0, 1.0  # the root height and the ric joints' y (absolute heights, as HumanML3D's)
    x = np.stack([f, f - 0.06 * up, f + 0.30 * up])
    plain, weighted = np.asarray(fn(x, ["a"] * 3, [{}] * 3)[0]), np.asarray(pen(x, ["a"] * 3, [{}] * 3)[0])
    assert abs(weighted[0] - plain[0]) < 1e-6  # clean: both extra terms are 0
    assert weighted[1] < plain[1] * np.exp(-10 * 0.05) and weighted[2] < plain[2] * np.exp(-10 * 0.2)


def test_render_writes_files(tmp_path, clips):
    from PIL import Image

    j = clips["a person jumps once then turns left"].joints[:12]
    gif = stick_figure_gif(j, tmp_path / "sub" / "clip.gif", fps=20, title="jump")
    png = filmstrip_png(torch.tensor(j), tmp_path / "strip.png", n=4)
    with Image.open(gif) as im:
        assert im.format == "GIF" and im.n_frames == 12
    with Image.open(png) as im:
        assert im.format == "PNG" and im.size[0] == 4 * im.size[1] // 2
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["clip.gif", "strip.png", "sub"]  # no temp files left
    with pytest.raises(ValueError, match="n must be"):
        filmstrip_png(j, tmp_path / "x.png", n=0)
    with pytest.raises(ValueError, match="22, 3"):
        stick_figure_gif(features_from_joints(j), tmp_path / "x.gif")
