"""ShapesWorld judge: agreement with ground truth on clean and perturbed renders, rejection of wrong
images, partial scores, input formats, and the ``shapes`` reward plug-in."""

import numpy as np
import pytest
import torch

from worlds.shapes import grammar as P
from worlds.shapes import judge as J
from worlds.shapes import world as W
from worlds.shapes.judge import judge
from worlds.shapes.world import ShapeObject


def _scenes(task, n, seed):
    rng = np.random.default_rng(seed)
    pool = list(P.enumerate_constraints(task))
    for _ in range(n):
        c = pool[int(rng.integers(len(pool)))]
        yield c, W.sample_scene(c, rng)


@pytest.mark.parametrize("task", W.TASKS)
def test_clean_renders_agree_with_ground_truth(task):
    n, hits = 200, 0
    for c, scene in _scenes(task, n, seed=11):
        img = W.render(scene)
        det = J.detect(img)
        checks = J.check_constraints(det, c)
        hits += all(ok for _, ok in checks)
        # detections reproduce the scene: colours, shapes, boxes, centres (bbox centres, exact)
        got = sorted((o["color"], o["shape"], tuple(o["bbox"]), tuple(o["centre"])) for o in det)
        want = sorted((o.color, o.shape, o.bbox, o.centre) for o in scene)
        assert got == want
    assert hits / n >= 0.99


@pytest.mark.parametrize("task", W.TASKS)
def test_rejects_every_hard_negative(task):
    for c, scene in _scenes(task, 25, seed=3):
        det = J.detect(W.render(scene))
        negs = J.mismatches(c)
        kinds = {k for k, _ in negs}
        assert {"color", "shape"} <= kinds
        if task in ("single_object", "counting"):
            assert "count" in kinds
        if task == "position":
            assert "relation" in kinds
        for kind, neg in negs:
            assert not W.scene_satisfies(scene, neg)
            checks = J.check_constraints(det, neg)
            assert not all(ok for _, ok in checks), (kind, P.format_prompt(neg))


def _img(*objs):
    return W.render([ShapeObject(*o) for o in objs])


RED_CIRCLE = ("red", "circle", 5, 20, 14)
BLUE_SQUARE = ("blue", "square", 40, 22, 14)
GREEN_TRIANGLE = ("green", "triangle", 20, 45, 12)


def test_wrong_images_and_partial_scores():
    pos = "a red circle to the left of a blue square"
    r = judge(_img(RED_CIRCLE, BLUE_SQUARE), pos)
    assert (r["strict"], r["partial"], r["task"]) == (1, 1.0, "position")
    assert [name for name, _ in r["checks"]] == [
        "exactly 1 red circle",
        "exactly 1 blue square",
        "nothing else",
        "left_of",
    ]
    # swapped relation
    r = judge(_img(RED_CIRCLE, BLUE_SQUARE), "a red circle to the right of a blue square")
    assert r["strict"] == 0 and r["partial"] == 0.75
    r = judge(_img(RED_CIRCLE, BLUE_SQUARE), "a blue square to the left of a red circle")
    assert r["strict"] == 0 and r["partial"] == 0.75
    # wrong colour
    r = judge(_img(RED_CIRCLE, BLUE_SQUARE), "a green circle to the left of a blue square")
    assert r["strict"] == 0 and r["partial"] == 0.25  # only "exactly 1 blue square"
    # an extra object
    r = judge(_img(RED_CIRCLE, BLUE_SQUARE, GREEN_TRIANGLE), "a red circle and a blue square")
    assert r["strict"] == 0 and r["partial"] == pytest.approx(2 / 3)
    assert judge(_img(RED_CIRCLE, BLUE_SQUARE, GREEN_TRIANGLE), pos)["partial"] == 0.75
    # wrong count
    two = _img(("red", "circle", 5, 5, 14), ("red", "circle", 30, 30, 16))
    assert judge(two, "two red circles")["strict"] == 1
    r = judge(two, "three red circles")
    assert r["strict"] == 0 and r["partial"] == 0.5
    assert judge(two, "a red circle")["strict"] == 0
    # wrong shape; empty canvas
    r = judge(_img(("red", "square", 20, 20, 15)), "a red circle")
    assert r["strict"] == 0 and r["partial"] == 0.0
    r = judge(W.render([]), "a red circle")
    assert r["strict"] == 0 and r["partial"] == 0.5 and r["detected"] == []


def test_judge_takes_rows_constraints_and_tensors():
    scene = P.scene_for_prompt("a yellow triangle above a purple square", 4)
    img = W.render(scene)
    row = P.make_row(P.parse_prompt("a yellow triangle above a purple square"))
    ref = judge(img, row["prompt"])
    assert ref["strict"] == 1
    assert judge(img, row) == ref
    assert judge(img, dict(row, prompt="garbage that does not parse")) == ref  # row fields win
    assert judge(img, P.parse_prompt(row["prompt"])) == ref
    chw = torch.from_numpy(img).permute(2, 0, 1).float() / 255.0
    assert judge(chw, row)["strict"] == 1
    assert judge(chw.numpy().transpose(1, 2, 0), row)["strict"] == 1
    assert judge(W.render(scene, size=256), row) == ref  # area-downscaled back to 64
    assert judge(W.render(scene, size=100), row)["strict"] == 1
    with pytest.raises(ValueError, match="not a ShapesWorld prompt"):
        judge(img, "a cat")


def test_specks_offpalette_and_odd_blobs():
    img = _img(RED_CIRCLE)
    noisy = img.copy()
    noisy[2:5, 2:5] = W.PALETTE["red"]  # 9-px speck: below MIN_AREA
    noisy[50:52, 2:6] = W.PALETTE["blue"]
    noisy[40:55, 40:55] = (128, 128, 128)  # grey: off palette -> ignored
    noisy[2:12, 30:40] = (255, 140, 0)  # orange: off palette -> ignored
    assert judge(noisy, "a red circle")["strict"] == 1
    # an L-shaped red blob is an object of unknown shape: "nothing else" fails
    blob = img.copy()
    blob[40:58, 40:44] = W.PALETTE["red"]
    blob[54:58, 40:58] = W.PALETTE["red"]
    r = judge(blob, "a red circle")
    assert r["strict"] == 0 and sorted(o["shape"] for o in r["detected"]) == ["circle", "unknown"]
    # an upside-down triangle and a stretched ellipse are not spec shapes
    inv = W.render([]).copy()
    inv[20:34, 20:34][W.shape_mask("triangle", 14)[::-1]] = W.PALETTE["green"]
    assert [o["shape"] for o in J.detect(inv)] == ["unknown"]
    ell = W.render([]).copy()
    ell[20:32, 10:40][W.shape_mask("circle", 30, 12)] = W.PALETTE["green"]
    assert [o["shape"] for o in J.detect(ell)] == ["unknown"]


def test_antialiased_edges_do_not_erode_shapes():
    """A 4x supersampled render, area-downscaled: edges become colour/white blends."""
    from PIL import Image

    for c, scene in _scenes("two_object", 20, seed=5):
        big = W.render(scene, size=256)
        blurred = np.asarray(Image.fromarray(big).resize((64, 64), Image.BILINEAR))
        assert all(ok for _, ok in J.check_constraints(J.detect(blurred), c)), P.format_prompt(c)


def test_connected_components_8_connectivity():
    lab = np.zeros((6, 6), dtype=np.int8)
    lab[0, 0] = lab[1, 1] = lab[2, 2] = 1  # diagonal chain: one component
    lab[0, 5] = lab[1, 5] = 2
    lab[2, 5] = 1  # touches colour 2 but is colour 1: separate
    lab[5, 0:3] = 3
    comp = J.connected_components(lab)
    assert comp[0, 0] == comp[1, 1] == comp[2, 2]
    assert comp[0, 5] == comp[1, 5] != comp[2, 5]
    assert len({comp[5, 0], comp[5, 1], comp[5, 2]}) == 1
    assert (comp[lab == 0] == -1).all()
    assert len(np.unique(comp[comp >= 0])) == 4


#: measured with `python -m worlds.shapes.judge --n 1000 --seed 7`: 1.000 in every cell (positives
#: and hard negatives, every task, every perturbation). Floors below are conservative for n = 100.
FLOORS = {"clean": 0.99, "noise": 0.95, "blur": 0.95, "jpeg": 0.95, "color_shift": 0.95, "combined": 0.9}


def test_agreement_under_perturbations():
    table = J.measure_agreement(n_per_task=100, seed=2024)
    assert set(table) == set(J.PERTURBATIONS)
    for pert, row in table.items():
        for task, cell in row.items():
            assert cell["pos"] >= FLOORS[pert], (pert, task, cell)
            assert cell["neg"] >= FLOORS[pert], (pert, task, cell)
    assert "| jpeg |" in J.format_table(table)


# --------------------------------------------------------------------------------------------
# reward plug-in
# --------------------------------------------------------------------------------------------


def _batch(prompts, size=64, seed=0):
    imgs = [P.render_prompt(p, seed + i, size=size) for i, p in enumerate(prompts)]
    return torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).float() / 255.0


def test_shapes_reward_plugin():
    """The world's reward is found by name through its entry point (the core does not import worlds)."""
    from reward_models import REGISTRY, build_reward, load_reward

    prompts = [
        "a red circle",
        "three blue squares",
        "a green triangle and a yellow circle",
        "a purple square below a red triangle",
    ]
    rows = [P.make_row(P.parse_prompt(p)) for p in prompts]
    images = _batch(prompts)
    fn = load_reward("shapes")
    assert "shapes" in REGISTRY  # registered on first use
    scores, info = fn(images, prompts, rows)
    assert isinstance(scores, np.ndarray) and scores.dtype == np.float32
    assert scores.tolist() == [1.0, 1.0, 1.0, 1.0]
    # per-sample info (the contract's convention, read by the evaluation's per-group tables)
    assert info["task"] == list(W.TASKS) and info["strict"] == info["partial"] == [1.0] * 4

    # mismatched prompts (images rolled by one); metadata without constraints -> parse the prompt
    wrong = images.roll(1, dims=0)
    strict, _ = fn(wrong, prompts, [{} for _ in prompts])
    partial, pinfo = load_reward("shapes", score="partial")(wrong, prompts, [{} for _ in prompts])
    assert strict.tolist() == [0.0, 0.0, 0.0, 0.0]
    assert ((partial >= 0) & (partial < 1)).all()
    assert pinfo["partial"] == pytest.approx(partial.tolist()) and pinfo["strict"] == strict.tolist()

    # larger images are resized; non-ShapesWorld prompts are NaN (not applicable)
    big = _batch(prompts[:2], size=128)
    s, i2 = fn(big, ["a red circle", "a cat"], [{}, {}])
    assert s[0] == 1.0 and np.isnan(s[1]) and np.isnan(i2["strict"][1]) and i2["task"] == ["single_object", None]

    multi = build_reward({"shapes": 1.0}, {"shapes": {"score": "partial"}})
    per, _ = multi(images, prompts, rows)
    assert per["shapes"].tolist() == [1.0, 1.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="score"):
        load_reward("shapes", score="soft")
