"""scripts/evaluate.py's grid.png is captioned: under each tile its prompt (cut to two lines) and every scorer's
verdict or score (ddpo_grpo/figures.py scored_grid, the same lettering as report/before_after.png)."""

import json
import math

import numpy as np
import pytest
import torch
from PIL import Image

from ddpo_grpo.figures import MIN_CELL
from tests.conftest import load_script

pytestmark = pytest.mark.usefixtures("one_thread")


class _Scorers:
    """Two scorers' per-sample values, as ``evaluation.Scorers`` hands them out."""

    scored = {"judge": None, "aesthetic": None}

    def values(self, name):
        return {"strict": [1.0, 0.0, math.nan]} if name == "judge" else {"score": [0.25, 0.5, 0.75]}


def _caption_band(path, tile: int) -> np.ndarray:
    with Image.open(path) as im:
        pixels = np.asarray(im.convert("L"))
    return pixels[tile + 8 :, :]  # below the first row of tiles (pad 6 + tile + the caption's 2 px gap)


def test_each_tile_gets_its_prompt_and_every_scorers_verdict(tmp_path):
    from ddpo_grpo.figures import score_notes, scored_grid

    images = torch.rand(3, 3, 32, 32)
    captions = ["a red circle to the left of a blue square above a green triangle", "two red squares", "x"]
    path = scored_grid(images, captions, _Scorers(), tmp_path / "grid.png", ncol=3)
    with Image.open(path) as im:
        notes = json.loads(im.text["notes"])
        assert json.loads(im.text["captions"]) == captions
        width, height = im.size
    assert notes == [
        ["1 judge strict", "0.25 aesthetic score"],
        ["0 judge strict", "0.5 aesthetic score"],
        ["n/a judge strict", "0.75 aesthetic score"],
    ]
    tile = MIN_CELL  # 32 px enlarged five-fold to 160
    assert width >= 3 * tile and height >= tile + 4 * 16  # a caption band: 2 prompt lines + 2 scorer lines
    band = _caption_band(path, tile)
    for j in range(3):  # text drawn under every tile
        assert (band[:, 6 + j * (tile + 6) : (j + 1) * (tile + 6)] < 128).any(), j
    lines = score_notes({"judge strict": [1.0, 0.0, None]}, 3)
    assert [colour for ((_, colour),) in lines] == ["#18803a", "#b8312f", "grey"]  # pass green, fail red


def test_evaluate_writes_a_captioned_grid(tmp_path, tiny_dirs):
    out = tmp_path / "eval"
    argv = ["--model", tiny_dirs["sd3"], "--limit", "2", "--num_steps", "2", "--resolution", "32"]
    argv += ["--reward", "shapes,shapes_detector", "--out", str(out), "--device", "cpu"]
    assert load_script("evaluate").main(argv) == 0
    with Image.open(out / "grid.png") as im:
        captions, notes = json.loads(im.text["captions"]), json.loads(im.text["notes"])
        height = im.size[1]
    assert len(captions) == len(notes) == 2
    assert all([n.split(" ", 1)[1] for n in col] == ["shapes strict", "shapes_detector strict"] for col in notes)
    assert height > MIN_CELL + 4 * 16  # taller than the tiles alone: the caption rows
    assert (_caption_band(out / "grid.png", MIN_CELL) < 128).any()
