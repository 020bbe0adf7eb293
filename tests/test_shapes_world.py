"""ShapesWorld renderer, prompt grammar and the shipped train/test split, checked against its spec (worlds/shapes/README.md)."""

import json

import numpy as np
import pytest

from worlds.shapes import grammar as P
from worlds.shapes import world as W

SPEC_PALETTE = {
    "red": (220, 40, 40),
    "green": (40, 170, 70),
    "blue": (40, 80, 220),
    "yellow": (230, 200, 40),
    "purple": (150, 60, 190),
}
WHITE = (255, 255, 255)


def _spec_relation(rel, a, b):
    """The spec's rule, written independently: A rel B between centres, y grows downwards."""
    dx, dy = b[0] - a[0], b[1] - a[1]
    main, other = {"left_of": (dx, dy), "right_of": (-dx, dy), "above": (dy, dx), "below": (-dy, dx)}[rel]
    return main >= 8 and main > abs(other)


def _dilate(mask, r):
    out = mask.copy()
    h, w = mask.shape
    padded = np.pad(mask, r)
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            out |= padded[r + dy : r + dy + h, r + dx : r + dx + w]
    return out


def test_vocabulary_matches_spec():
    assert W.PALETTE == SPEC_PALETTE
    assert W.BACKGROUND == WHITE and W.CANVAS == 64
    assert W.SHAPES == ("circle", "square", "triangle")
    assert (W.MIN_SIZE, W.MAX_SIZE, W.MIN_GAP, W.MIN_REL_OFFSET) == (12, 18, 2, 8)


@pytest.mark.parametrize("size", range(12, 19))
def test_shape_masks(size):
    for shape in W.SHAPES:
        m = W.shape_mask(shape, size)
        ys, xs = np.nonzero(m)
        # the painted pixels span the whole bounding box
        assert (xs.min(), ys.min(), xs.max(), ys.max()) == (0, 0, size - 1, size - 1), shape
        assert np.array_equal(m, m[:, ::-1]), f"{shape} is not left-right symmetric"
    assert W.shape_mask("square", size).all()
    circle = W.shape_mask("circle", size)
    assert np.array_equal(circle, circle[::-1]) and np.array_equal(circle, circle.T)
    assert 0.74 < circle.mean() < 0.83
    tri = W.shape_mask("triangle", size)
    widths = tri.sum(1)
    assert widths[-1] == size and widths[0] <= 2 and (np.diff(widths) >= 0).all()  # upright: apex on top
    # each row is one contiguous run centred on the axis (isosceles)
    for row in tri:
        idx = np.flatnonzero(row)
        assert idx.size == idx[-1] - idx[0] + 1
    assert 0.5 < tri.mean() < 0.6


def _random_constraints(task, rng, n):
    pool = list(P.enumerate_constraints(task))
    return [pool[int(i)] for i in rng.integers(len(pool), size=n)]


@pytest.mark.parametrize("task", W.TASKS)
def test_renders_follow_spec(task):
    rng = np.random.default_rng(1234)
    palette = {tuple(v) for v in SPEC_PALETTE.values()}
    for i, c in enumerate(_random_constraints(task, rng, 100)):
        scene = P.scene_for_prompt(c, seed=i)
        img = W.render(scene)
        assert img.shape == (64, 64, 3) and img.dtype == np.uint8
        colours = {tuple(v) for v in img.reshape(-1, 3)}
        assert colours <= palette | {WHITE}, "colour outside palette + white (anti-aliasing?)"
        assert W.scene_violations(scene) == []
        assert W.scene_satisfies(scene, c)
        assert len(scene) == c.num_objects
        want = sorted((o.color, o.shape) for o in c.objects for _ in range(o.count))
        assert sorted((o.color, o.shape) for o in scene) == want
        # per object: rendered alone, its pixels fill exactly its declared box, in its exact colour
        masks = []
        for o in scene:
            alone = W.render([o])
            m = (alone != 255).any(-1)
            ys, xs = np.nonzero(m)
            x0, y0, x1, y1 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
            assert (x0, y0, x1, y1) == o.bbox
            assert 12 <= x1 - x0 <= 18 and 12 <= y1 - y0 <= 18
            assert x0 >= 0 and y0 >= 0 and x1 <= 64 and y1 <= 64
            assert (img[m] == SPEC_PALETTE[o.color]).all()
            masks.append(m)
        # background white, nothing else drawn
        union = np.any(masks, axis=0)
        assert ((img != 255).any(-1) == union).all()
        # >= 2 background pixels between any two objects (pixel level, 8-neighbourhood)
        for a in range(len(masks)):
            for b in range(a + 1, len(masks)):
                assert not (_dilate(masks[a], 2) & masks[b]).any()
                assert W.bbox_gap(scene[a].bbox, scene[b].bbox) >= 2
        if c.relation is not None:
            assert _spec_relation(c.relation, scene[0].centre, scene[1].centre)


def test_render_is_deterministic():
    for p in ["a red circle", "four blue squares", "a green triangle above a purple circle"]:
        a, b = P.render_prompt(p, seed=5), P.render_prompt(p, seed=5)
        assert np.array_equal(a, b)
        assert P.scene_for_prompt(p, 5) == P.scene_for_prompt(p, 5)
    imgs = [P.render_prompt("three yellow circles", seed=s) for s in range(5)]
    assert len({im.tobytes() for im in imgs}) == 5


def test_render_size_is_nearest_upscale():
    scene = P.scene_for_prompt("a red circle and a blue square", 0)
    small = W.render(scene)
    big = W.render(scene, size=128)
    assert big.shape == (128, 128, 3)
    assert np.array_equal(big[::2, ::2], small)
    odd = W.render(scene, size=100)
    assert odd.shape == (100, 100, 3)
    assert {tuple(v) for v in odd.reshape(-1, 3)} <= {tuple(v) for v in small.reshape(-1, 3)}


def test_relation_rule():
    assert W.relation_holds("left_of", (10, 10), (18, 10))
    assert not W.relation_holds("left_of", (10, 10), (17.5, 10))  # offset < 8
    assert not W.relation_holds("left_of", (10, 10), (20, 20))  # not larger than the other axis
    assert W.relation_holds("left_of", (10, 10), (20, 19.5))
    assert W.relation_holds("right_of", (30, 10), (10, 12))
    assert W.relation_holds("above", (10, 10), (12, 30))  # y grows downwards
    assert W.relation_holds("below", (10, 40), (12, 30))
    assert W.relation_holds("left_of", (10, 10), (17.5, 10), tol=1.0)
    with pytest.raises(ValueError, match="relation"):
        W.relation_holds("near", (0, 0), (1, 1))


def test_sample_scene_accepts_rows_and_fails_loudly():
    rng = np.random.default_rng(0)
    row = P.make_row(P.parse_prompt("two green squares"))
    scene = W.sample_scene(row, rng)
    assert [(o.color, o.shape) for o in scene] == [("green", "square")] * 2
    with pytest.raises(RuntimeError, match="could not sample"):
        W.sample_scene(P.parse_prompt("four red squares"), rng, max_tries=1, canvas=30)


# --------------------------------------------------------------------------------------------
# prompts
# --------------------------------------------------------------------------------------------


def test_prompt_grammar():
    counts = {t: len(P.all_prompts(t)) for t in W.TASKS}
    assert counts == {"single_object": 15, "counting": 45, "two_object": 210, "position": 840}
    allp = P.all_prompts()
    assert len(allp) == len(set(allp)) == 1110
    for p in allp:
        assert p == p.lower() and not p.endswith(".") and p == " ".join(p.split())
        c = P.parse_prompt(p)
        assert P.format_prompt(c) == p
        assert W.Constraints.from_row(json.loads(json.dumps(c.to_row()))) == c
    assert "a red circle" in allp
    assert "three blue triangles" in allp
    assert "a yellow square and a yellow circle" in allp
    assert "a purple triangle to the right of a green square" in allp
    assert "a green circle below a green square" in allp
    c = P.parse_prompt("four blue squares")
    assert (c.task, c.objects[0].count, c.objects[0].pair) == ("counting", 4, ("blue", "square"))
    c = P.parse_prompt("a red circle to the left of a blue square")
    assert c.task == "position" and c.relation == "left_of"
    assert [o.pair for o in c.objects] == [("red", "circle"), ("blue", "square")]
    assert P.parse_prompt("  A Red  Circle. ") == P.parse_prompt("a red circle")


@pytest.mark.parametrize(
    "bad",
    [
        "a pink circle",
        "a red star",
        "five red circles",
        "two red circle",
        "a red circle and a red circle",
        "a red circle to the left of a red circle",
        "a red circle near a blue square",
        "",
    ],
)
def test_parse_errors_name_the_prompt(bad):
    with pytest.raises(ValueError) as e:
        P.parse_prompt(bad)
    assert repr(bad) in str(e.value)


# --------------------------------------------------------------------------------------------
# split
# --------------------------------------------------------------------------------------------


def _pairs(row):
    return {(o["color"], o["shape"]) for o in row["objects"]}


def test_split_files_ship_and_parse():
    rows = {}
    for split in ("train", "test"):
        path = P.split_path(split)
        assert path.is_file(), f"{path} missing: run python -m worlds.shapes split"
        rows[split] = P.load_split(split)
        for row in rows[split]:
            assert set(row) == {"prompt", "task", "objects", "relation"}
            assert W.Constraints.from_row(row) == P.parse_prompt(row["prompt"])
    # regeneration reproduces the shipped files exactly
    assert rows == P.make_split()
    train = {r["prompt"] for r in rows["train"]}
    test = {r["prompt"] for r in rows["test"]}
    assert not train & test
    assert train | test == set(P.all_prompts())
    assert len(train) == 708 and len(test) == 402
    # they load as a prompt source of the trainer
    from ddpo_grpo.prompts import load_prompts

    loaded = load_prompts(str(P.split_path("test")))
    assert [r["prompt"] for r in loaded] == [r["prompt"] for r in rows["test"]]


def test_split_holds_out_compositions():
    rule = P.split_rule()
    held = set(rule["held_out_pairs"])
    assert len(held) == 3
    assert {s for _, s in held} == set(W.SHAPES) and len({c for c, _ in held}) == 3
    train, test = P.load_split("train"), P.load_split("test")
    multi = ("two_object", "position")
    # held-out pairs: never in a train two-object/position prompt; every such test prompt has one
    for r in train:
        if r["task"] in multi:
            assert not _pairs(r) & held, r["prompt"]
    for r in test:
        if r["task"] in multi:
            assert _pairs(r) & held, r["prompt"]
    # ...but every held-out pair is seen in train on its own (single object or counting)
    seen_alone = set().union(*(_pairs(r) for r in train if r["task"] in ("single_object", "counting")))
    assert held <= seen_alone
    # ...and every colour and every shape is still composed in train
    train_multi = set().union(*(_pairs(r) for r in train if r["task"] in multi))
    assert {c for c, _ in train_multi} == set(W.COLORS) and {s for _, s in train_multi} == set(W.SHAPES)
    # held-out counting combos: in test only; each pair is still counted (at other counts) in train
    combos = set(rule["held_out_counting"])
    assert len(combos) == 9 and len({(c, s) for _, c, s in combos}) == 9
    assert sorted(n for n, _, _ in combos) == [2, 2, 2, 3, 3, 3, 4, 4, 4]
    train_counting = {
        (r["objects"][0]["count"], r["objects"][0]["color"], r["objects"][0]["shape"])
        for r in train
        if r["task"] == "counting"
    }
    test_counting = {
        (r["objects"][0]["count"], r["objects"][0]["color"], r["objects"][0]["shape"])
        for r in test
        if r["task"] == "counting"
    }
    assert test_counting == combos and not train_counting & combos
    assert {(c, s) for _, c, s in combos} <= {(c, s) for _, c, s in train_counting}
    # held-out singles
    singles = set(rule["held_out_singles"])
    assert {next(iter(_pairs(r))) for r in test if r["task"] == "single_object"} == singles
    assert not singles & held


def test_split_command_check_passes(capsys):
    from worlds.shapes.__main__ import main

    assert main(["split", "--check"]) == 0
