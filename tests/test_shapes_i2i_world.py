"""The image-to-image worlds (worlds/shapes_i2i): determinism, splits, the edit judge and preservation on renders."""

import numpy as np
import pytest
import torch

from worlds.shapes.grammar import constraints_of, split_of
from worlds.shapes.judge import perturb
from worlds.shapes_i2i import data
from worlds.shapes_i2i.edit import EDIT_TYPES, edit_row, make_edit
from worlds.shapes_i2i.judge import PRESERVE_IOU, box_iou, judge_edit, preservation
from worlds.shapes_i2i.restore import KINDS, LEVELS
from worlds.shapes_i2i.scenes import from_rows, render_chw


def test_shipped_splits_are_reproducible_and_sized():
    assert data.check() == []  # the shipped files = make_split(SPLIT_SEED), no train edit touches a held-out pair
    assert data.make_split(1)["edit"]["train"][:3] != data.make_split(0)["edit"]["train"][:3]
    restore_test, edit_train = data.restore_test(), data.edit_train()
    assert len(data.restore_train()) == 256 and len(restore_test) == 192
    assert len(edit_train) == 512 and len(data.edit_test()) == 192
    held_out = {"downsample_x3", "blur_s1.5", "noise_s0.15", "jpeg_q20"}  # held-out levels: test only
    assert {r["degradation_name"] for r in restore_test if r["held_out_level"]} == held_out
    assert {r["degradation_name"] for r in data.restore_train()}.isdisjoint(held_out)
    held = [
        r
        for r in data.edit_test()
        if split_of(constraints_of(r["target"])) == "test" or split_of(constraints_of(r["source_caption"])) == "test"
    ]
    assert len(held) == 192  # every test edit touches a held-out composition, no train edit does


def test_rows_carry_images_deterministically():
    a, b = data.images(data.restore_test()[50]), data.images(data.restore_test()[50])
    row = data.restore_test()[50]
    assert np.array_equal(a[0], b[0]) and a[0].dtype == np.uint8 and a[0].shape == (3, 64, 64)
    assert np.array_equal(row["source_image"], a[0]) and np.array_equal(
        row["ground_truth"], render_chw(from_rows(row["scene"]))
    )
    assert not row["source_image"].flags.writeable
    for r in data.restore_train()[::64]:
        assert not np.array_equal(r["source_image"], r["ground_truth"])  # every degradation changes the render


def test_degradation_levels_order_psnr():
    """Within a kind, a stronger level is a worse image (PSNR of source vs clean, averaged over the test rows)."""
    from reward_models.similarity import psnr

    rows = data.restore_test()
    for kind in KINDS:
        means = []
        for level in sorted([*LEVELS[kind][0], LEVELS[kind][1]]):
            sel = [r for r in rows if r["group"] == kind and float(list(r["degradation"].values())[1]) == level]
            src = torch.from_numpy(np.stack([r["source_image"] for r in sel])).float() / 255
            gt = torch.from_numpy(np.stack([r["ground_truth"] for r in sel])).float() / 255
            means.append(psnr(src, gt).mean().item())
        assert (means == sorted(means, reverse=True)) != (kind == "jpeg"), (kind, means)  # jpeg: quality ↑ = better


@pytest.mark.parametrize("kind", EDIT_TYPES)
def test_judge_on_renders(kind):
    """Target renders: strict 1, preservation 1, success; source renders (no edit done) fail the target judge."""
    rng = np.random.default_rng(7)
    for _ in range(6):
        row = edit_row(make_edit(kind, rng))
        target, source = render_chw(from_rows(row["target_scene"])), render_chw(from_rows(row["source_scene"]))
        good = judge_edit(target, row)
        assert (good["strict"], good["preservation"], good["success"]) == (1, 1.0, 1)
        noisy = judge_edit(perturb(target.transpose(1, 2, 0), "combined", rng), row)
        assert noisy["success"] == 1  # the judge's robustness carries over (blur, shift, noise, JPEG)
        lazy = judge_edit(source, row)
        assert lazy["strict"] == 0 and lazy["success"] == 0
        if kind == "recolor":
            assert lazy["preservation"] == 1 - 1 / len(row["preserve"])  # the recoloured object is not in place
        else:
            assert lazy["preservation"] == 1.0


def test_preservation_is_box_iou_of_untouched_objects():
    keep = {"color": "red", "shape": "square", "x": 10, "y": 10, "size": 15}
    for dx, expected in ((0, 1.0), (3, 1.0), (5, 1.0), (6, 0.0)):  # IoU(15-px box, shifted by dx) = (15-dx)/(15+dx)
        det = [{"color": "red", "shape": "square", "bbox": [10 + dx, 10, 25 + dx, 25]}]
        assert preservation(det, [keep]) == expected, dx
        assert (box_iou(det[0]["bbox"], (10, 10, 25, 25)) >= PRESERVE_IOU) == bool(expected)
    assert preservation([{"color": "blue", "shape": "square", "bbox": [10, 10, 25, 25]}], [keep]) == 0.0  # colour
    assert preservation([], []) == 1.0


def test_rewards():
    from worlds.shapes_i2i.reward import edit, shapes_i2i

    rows = data.edit_test()[::48] + data.restore_test()[:2]
    targets = np.stack([r["ground_truth"] for r in rows]).astype(np.float32) / 255
    meta = [{k: v for k, v in r.items() if k != "prompt"} for r in rows]
    scores, info = edit()(targets, [r["prompt"] for r in rows], meta)
    assert scores[:4].tolist() == [1.0] * 4 and np.isnan(scores[4:]).all()
    assert info["edit_type"][:4] == list(EDIT_TYPES) and info["success"][:4] == [1.0] * 4
    sources = np.stack([r["source_image"] for r in rows]).astype(np.float32) / 255
    s, _ = edit(score="success")(sources, [r["prompt"] for r in rows], meta)
    assert s[:4].tolist() == [0.0] * 4
    # copying the source (success 0): "mix" pays (partial + preservation) / 2, "graded" a quarter of that sum
    mix, info = edit(score="mix")(sources, [r["prompt"] for r in rows], meta)
    graded, _ = edit(score="graded")(sources, [r["prompt"] for r in rows], meta)
    for i in range(4):
        assert graded[i] == pytest.approx((info["partial"][i] + info["preservation"][i]) / 4)
        assert graded[i] == pytest.approx(mix[i] / 2) and graded[i] <= 0.5
    assert edit(score="graded")(targets, [r["prompt"] for r in rows], meta)[0][:4].tolist() == [1.0] * 4
    q, info = shapes_i2i()(sources, [r["prompt"] for r in rows], meta)
    assert info["group"] == [*EDIT_TYPES, "downsample", "downsample"]
    assert q[:4].tolist() == [0.0] * 4 and 0.5 < q[4] < 1.0 and info["psnr"][4] > 15 and np.isnan(info["psnr"][0])
    with pytest.raises(ValueError, match="score must be one of"):
        edit(score="accuracy")


def test_stream_draws_train_rules_and_resumes():
    from worlds.shapes_i2i.stream import I2IStream

    a = I2IStream(3)
    for _ in range(20):
        row = a.row()
        if row["task"] == "edit":
            assert split_of(constraints_of(row["target"])) == "train"
        else:
            assert not row["held_out_level"]
    state = a.state_dict()
    first = a.batch(4)
    b = I2IStream(99)
    b.load_state_dict(state)
    second = b.batch(4)
    assert torch.equal(first[0], second[0]) and first[2] == second[2]


def test_tokenizer_extension_keeps_ids():
    from transformers import CLIPTokenizer

    from worlds.shapes import SHAPES_SD
    from worlds.shapes.grammar import all_prompts
    from worlds.shapes_i2i.tokenizer import INSTRUCTION_WORDS, extended_tokenizer

    base = CLIPTokenizer.from_pretrained(SHAPES_SD, subfolder="tokenizer")
    ext = extended_tokenizer(base)
    assert all(base(p).input_ids == ext(p).input_ids for p in all_prompts()[::7])
    assert all(len(ext(w).input_ids) == 3 for w in INSTRUCTION_WORDS)
    assert len(ext("move the red circle to the left of the blue square").input_ids) == 13 <= ext.model_max_length
