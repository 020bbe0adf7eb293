"""MotionWorld's text–motion evaluator: the shipped model, the motion_matching reward, set metrics, training."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reward_models import REGISTRY
from reward_models.contract import coerce_scores, per_sample_entries
from worlds.motion import grammar
from worlds.motion.evaluator import (
    MODEL_DIR,
    WEIGHTS_NAME,
    batch_order,
    diversity,
    fid,
    load_evaluator,
    r_precision,
    segment_prompts,
    set_metrics,
)
from worlds.motion.evaluator_train import TrainConfig, train
from worlds.motion.features import features_from_joints
from worlds.motion.generator import dataset_seed, generate
from worlds.motion.reward import MATCHING_INVALID, motion_matching

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def real():
    """One real clip for each of 32 test prompts (seeds no training run used) and the rows."""
    rows = grammar.test_rows()
    rows = [rows[i] for i in np.random.default_rng(3).permutation(len(rows))[:32]]
    motions = [generate(r, dataset_seed(4242, i, 0)) for i, r in enumerate(rows)]
    return rows, motions


def test_shipped_evaluator_ranks_real_clips(real):
    assert (MODEL_DIR / WEIGHTS_NAME).stat().st_size <= 5 * 2**20
    ev = load_evaluator()
    assert load_evaluator() is ev  # loaded once
    rows, motions = real
    prompts = [r["prompt"] for r in rows]
    m = ev.embed_motions([x.features() for x in motions])
    t = ev.embed_texts(prompts)
    assert m.shape == t.shape == (32, ev.cfg.dim)
    np.testing.assert_allclose(np.linalg.norm(m, axis=1), 1.0, atol=1e-5)
    rp = r_precision(m, t, prompts)
    assert rp["r_precision_top3"] >= 0.8 and rp["r_precision_top1"] >= 0.6, rp
    # a clip's embedding does not depend on what it is batched with (padding is masked)
    alone = ev.embed_motions(motions[0].features()[None])
    np.testing.assert_allclose(alone[0], m[0], atol=1e-4)
    # padded batch + lengths == list of ragged clips
    feats = [x.features() for x in motions[:3]]
    padded = np.zeros((3, max(len(f) for f in feats) + 5, 263), dtype=np.float32)
    for i, f in enumerate(feats):
        padded[i, : len(f)] = f
    np.testing.assert_allclose(ev.embed_motions(torch.tensor(padded), [len(f) for f in feats]), m[:3], atol=1e-4)


def _padded(feats: list[np.ndarray], frames: int) -> torch.Tensor:
    out = torch.zeros(len(feats), frames, 263)
    for i, f in enumerate(feats):
        out[i, : min(frames, len(f))] = torch.as_tensor(f[:frames])
    return out


def test_motion_matching_contract(real):
    assert REGISTRY["motion_matching"] is motion_matching
    rows, motions = real
    then = [i for i, r in enumerate(rows) if r["compose"] == "then"][:2]
    other = [i for i, r in enumerate(rows) if r["compose"] == "while"][:1]
    idx = then + other
    feats = [motions[i].features() for i in idx]
    x = _padded(feats + feats[:1] + feats[:1], 125)
    x[4] = float("nan")
    prompts = [rows[i]["prompt"] for i in idx] + ["a photo of a cat", rows[idx[0]]["prompt"]]
    metadata = [{"length": len(f)} for f in feats] + [{}, {"length": len(feats[0])}]
    scores, info = motion_matching()(x, prompts, metadata)
    scores = coerce_scores("motion_matching", scores, 5)
    assert np.isnan(scores[3]) and scores[4] == MATCHING_INVALID
    assert np.all((scores[:3] > 0.5) & (scores[:3] <= 1.0))
    per = per_sample_entries(info, 5)
    assert set(per) == {"task", "cosine"}
    assert per["task"] == ["sequence", "sequence", "simultaneous", "", "sequence"]
    assert info["motion_matching/not_applicable"] == pytest.approx(0.2)
    assert info["motion_matching/invalid"] == pytest.approx(0.2)
    assert "motion_matching/cosine/sequence" in info
    # the other order of a "then" prompt scores lower, whole-clip and dense
    swapped = [" then ".join(p[len("a person ") :].split(" then ")[::-1]) for p in prompts[:2]]
    swapped = ["a person " + s for s in swapped]
    for dense in (False, True):
        own, _ = motion_matching(dense=dense)(x[:2], prompts[:2], metadata[:2])
        wrong, _ = motion_matching(dense=dense)(x[:2], swapped, metadata[:2])
        assert np.all(np.asarray(own) > np.asarray(wrong) + 0.1), (dense, own, wrong)
    # the segment-dense path: "then" = mean of the halves against their clauses, others = whole clip
    dense_scores, dinfo = motion_matching(dense=True)(x.numpy(), prompts, metadata)
    assert {"cosine_first", "cosine_second"} <= set(per_sample_entries(dinfo, 5))
    ev = load_evaluator()
    h = len(feats[0]) // 2
    halves = ev.embed_motions([feats[0][:h], feats[0][h:]])
    want = float((halves * ev.embed_texts(list(segment_prompts(prompts[0])))).sum(-1).mean())
    assert dense_scores[0] == pytest.approx(want, abs=1e-4)
    assert dinfo["cosine_first"][0] > 0.5 and dinfo["cosine_second"][0] > 0.5
    assert dense_scores[2] == pytest.approx(scores[2], abs=1e-5) and np.isnan(dinfo["cosine_first"][2])
    with pytest.raises(ValueError, match="263"):
        motion_matching()(torch.zeros(2, 30, 100), prompts[:2], [{}] * 2)
    with pytest.raises(ValueError, match="dense"):
        motion_matching(dense="yes")


def test_set_metrics_real_vs_mismatched(real):
    rows, motions = real
    prompts = [r["prompt"] for r in rows]
    feats = [m.features() for m in motions]
    good = set_metrics(feats, rows)
    assert good["n"] == 32 and good["r_precision_top3"] >= 0.8
    # each motion labelled with the next prompt: ranked against a prompt it does not show
    bad = set_metrics(feats[1:] + feats[:1], prompts)
    assert bad["r_precision_top3"] <= 0.4 and bad["matching_score"] > good["matching_score"] + 0.3
    assert bad["cosine"] < good["cosine"] - 0.3
    frozen = [features_from_joints(np.repeat(m.joints[:1], m.frames, 0)).astype(np.float32) for m in motions]
    still = set_metrics(frozen, prompts)
    assert still["fid"] > 5 * good["fid"] + 0.05 and still["r_precision_top3"] < good["r_precision_top3"]
    assert good["diversity"] > 0.3 and abs(good["diversity"] - good["reference_diversity"]) < 0.2
    assert {"cosine/sequence", "cosine/simultaneous"} <= set(good)


def test_metric_functions():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(64, 8))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    names = [f"p{i}" for i in range(64)]
    assert r_precision(e, e, names) == {"r_precision_top1": 1.0, "r_precision_top2": 1.0, "r_precision_top3": 1.0}
    assert r_precision(e, np.roll(e, 1, 0), names)["r_precision_top1"] < 0.2
    # a prompt identical to the motion's own never counts against it
    dup = ["same"] * 64
    assert r_precision(e, np.roll(e, 1, 0), dup)["r_precision_top1"] == 1.0
    # round-robin batches: distinct prompts per batch when the set allows
    order = batch_order([f"p{i % 40}" for i in range(80)], 32, seed=1)
    assert len({i % 40 for i in order[:32]}) == 32 and sorted(order) == list(range(80))
    assert fid(e, e) == pytest.approx(0.0, abs=1e-9)
    assert fid(e, e + 0.5) == pytest.approx(8 * 0.25, abs=1e-9)
    assert fid(rng.normal(size=(500, 4)), rng.normal(size=(500, 4)) * 2) > 2.0
    pts = np.array([[0.0, 0.0], [3.0, 4.0]])
    assert diversity(pts, pairs=10) == pytest.approx(5.0)


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_training_reproducible_and_resumable(tmp_path):
    cfg = TrainConfig.tiny()
    a = _weights(train(cfg, tmp_path / "a", log=None))
    b = _weights(train(cfg, tmp_path / "b", log=None))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    c = _weights(train(TrainConfig.tiny(seed=1), tmp_path / "c", log=None))
    assert not all(torch.equal(a[k], c[k]) for k in a)
    # interrupted after 2 steps, resumed: the same weights as the uninterrupted run
    train(cfg, tmp_path / "d", stop_after=2, log=None)
    assert not (tmp_path / "d" / "final").exists()
    d = _weights(train(cfg, tmp_path / "d", resume=True, export=tmp_path / "export", log=None))
    assert all(torch.equal(a[k], d[k]) for k in a)
    loaded = load_evaluator(tmp_path / "export")
    assert all(torch.equal(loaded.state_dict()[k], a[k]) for k in a)
    assert loaded.config_json["train"]["seed"] == 0 and loaded.config_json["summary"]["steps"] == cfg.steps


def test_train_script_tiny(tmp_path):
    from worlds.motion.__main__ import main

    main(["train-evaluator", "--out", str(tmp_path / "run"), "--tiny", "--steps", "2", "--dim", "8"])
    ev = load_evaluator(tmp_path / "run" / "final")
    assert ev.cfg.dim == 8 and ev.config_json["train"]["steps"] == 2
    with pytest.raises(SystemExit):
        main(["train-evaluator", "--out", str(tmp_path / "x"), "--resume"])
