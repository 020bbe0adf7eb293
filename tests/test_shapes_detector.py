"""The independent ShapesWorld scorer ``shapes_detector`` (worlds/shapes/detector/): offline, agrees with the
ground truth, rejects wrong prompts and gray-zone shapes, and shares no code with the world judge."""

import ast
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from worlds.shapes import TASKS, enumerate_constraints, render, sample_scene
from worlds.shapes.detector import detect, score
from worlds.shapes.detector.net import WEIGHTS, load
from worlds.shapes.distortions import distorted_image, perturb
from worlds.shapes.world import COLORS, Constraints, ObjectSpec

ROOT = Path(__file__).resolve().parents[1]
DETECTOR = ROOT / "worlds" / "shapes" / "detector"


def _scenes(n_per_task, seed):
    rng = np.random.default_rng(seed)
    for task in TASKS:
        pool = list(enumerate_constraints(task))
        for _ in range(n_per_task):
            c = pool[int(rng.integers(len(pool)))]
            yield c, sample_scene(c, rng), rng


def _recoloured(c: Constraints, rng) -> Constraints:
    """A prompt no scene of ``c`` satisfies: the first named group in another colour (if still valid)."""
    first = c.objects[0]
    for color in rng.permutation(COLORS):
        objs = (ObjectSpec(str(color), first.shape, first.count),) + c.objects[1:]
        if color != first.color:
            try:
                return Constraints(c.task, objs, c.relation)
            except ValueError:
                continue
    raise AssertionError(f"no recoloured prompt for {c}")


def test_weights_are_shipped_small_and_load_offline():
    assert WEIGHTS.is_file() and WEIGHTS.stat().st_size <= 5_000_000
    with np.load(WEIGHTS, allow_pickle=False) as z:
        assert all(np.isfinite(z[k]).all() for k in z.files)
    assert load() is load()  # cached


def test_agrees_with_ground_truth_on_clean_renders_and_rejects_wrong_prompts():
    pos = neg = n = 0
    for c, scene, rng in _scenes(40, seed=11):
        img = render(scene)
        pos += score(img, c)["strict"]
        neg += 1 - score(img, _recoloured(c, rng))["strict"]
        n += 1
    assert pos / n >= 0.99, f"clean renders judged right: {pos}/{n}"
    assert neg / n >= 0.99, f"wrong prompts rejected: {neg}/{n}"


def test_tolerates_mild_perturbations():
    ok = n = 0
    for c, scene, rng in _scenes(15, seed=12):
        for kind in ("combined", "antialias"):
            ok += score(perturb(render(scene), kind, rng, scene=scene), c)["strict"]
            n += 1
    assert ok / n >= 0.95, f"{ok}/{n}"


@pytest.mark.parametrize(("kind", "severity"), [("trapezoid", 4), ("lumpy_circle", 3), ("skewed_triangle", 6)])
def test_rejects_clear_gray_zone_shapes(kind, severity):
    claim = {"trapezoid": "square", "lumpy_circle": "circle", "skewed_triangle": "triangle"}[kind]
    rng = np.random.default_rng(13)
    pool = [c for c in enumerate_constraints("single_object") if c.objects[0].shape == claim]
    rejected = 0
    for i in range(20):
        c = pool[i % len(pool)]
        img = distorted_image(sample_scene(c, rng), 0, kind, severity, rng)
        rejected += 1 - score(img, c)["strict"]
    assert rejected >= 18, f"{kind} at {severity}: {rejected}/20 rejected"


def test_detects_objects_with_the_spec_centre():
    rng = np.random.default_rng(14)
    c = next(iter(enumerate_constraints("two_object")))
    scene = sample_scene(c, rng)
    found = sorted((d["color"], d["shape"], d["centre"]) for d in detect(render(scene)))
    assert found == sorted((o.color, o.shape, o.centre) for o in scene)


def test_reward_contract_and_nan_outside_the_grammar():
    import torch

    from reward_models import load_reward
    from worlds.shapes.detector import reward  # noqa: F401  (registers the name, as the entry point would)

    fn = load_reward("shapes_detector", score="partial")
    rng = np.random.default_rng(15)
    c = next(iter(enumerate_constraints("counting")))
    img = torch.from_numpy(render(sample_scene(c, rng))).permute(2, 0, 1)[None].float() / 255.0
    out = fn(torch.cat([img, img]), [c.to_row()["task"], "a photo of a cat"], [c.to_row(), {}])
    scores, info = out if isinstance(out, tuple) else (out, {})
    assert scores[0] == 1.0 and math.isnan(float(scores[1]))
    assert info["strict"][0] == 1.0 and info["task"] == ["counting", None]
    with pytest.raises(ValueError, match="score must be one of"):
        load_reward("shapes_detector", score="exact")


def test_registered_as_an_entry_point():
    text = (ROOT / "pyproject.toml").read_text()
    assert 'shapes_detector = "worlds.shapes.detector.reward:shapes_detector"' in text
    assert '"models/*/*.npz"' in text  # the weights ship with the package


def test_shares_no_code_with_the_judge():
    banned = {"judge", "fidelity", "calibration", "agreement"}
    for file in DETECTOR.glob("*.py"):
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = (node.module or "").split(".") + [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [part for a in node.names for part in a.name.split(".")]
            else:
                continue
            assert not banned & set(names), f"{file.name} imports {names}"
    code = (
        "import sys, numpy as np\n"
        "from worlds.shapes.detector.reward import shapes_detector\n"
        "fn = shapes_detector()\n"
        "fn(np.ones((1, 3, 64, 64), np.float32), ['a red circle'], [{}])\n"
        "bad = [m for m in sys.modules if m.split('.')[-1] in ('judge', 'fidelity') and m.startswith('worlds')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_training_is_reproducible_from_its_seed():
    """The same seed gives the same examples and the same weights (the shipped ones come from seed 0 at full size)."""
    import torch

    from worlds.shapes.detector.net import state_to_arrays
    from worlds.shapes.detector.train import examples, fit

    torch.set_num_threads(1)
    runs = []
    for _ in range(2):
        x, y = examples(30, np.random.default_rng(0))
        runs.append((x, y, state_to_arrays(fit(x, y, epochs=1, seed=0, log=lambda _: None))))
    (x0, y0, w0), (x1, y1, w1) = runs
    assert np.array_equal(x0, x1) and np.array_equal(y0, y1) and len(set(y0.tolist())) >= 3
    assert all(np.array_equal(w0[k], w1[k]) for k in w0)


def test_agreement_tables_with_the_judge_run_and_format():
    from worlds.shapes.agreement import format_gray, format_truth, measure_gray, measure_truth

    truth = measure_truth(1, seed=3, perturbations=("clean",))
    assert truth["clean"]["n"] == 4 and truth["clean"]["detector_pos"] == 1.0 and truth["clean"]["agree"] == 1.0
    gray = measure_gray(2, seed=3, distortions=("trapezoid",))
    assert set(gray["trapezoid"]) == {1, 2, 3, 4} and gray["trapezoid"][4] == {"judge": 1.0, "detector": 1.0}
    assert "| clean |" in format_truth(truth) and "trapezoid (square)" in format_gray(gray)
