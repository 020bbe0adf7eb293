"""Plots people read (ddpo_grpo/figures.py, report.py, image_grids.py): integer epochs, markers on lone points, a
panel per scale, marked duplicates, labelled z lines; before_after.png over every group with the scorers' verdicts;
sample sheets at a readable size; tables labelled by what they compare."""

import json

import numpy as np
import pytest
import torch


def _axes_with(fig, label_part):
    return [ax for ax in fig.axes if any(label_part in line.get_label() for line in ax.get_lines())]


@pytest.fixture
def figure():
    import matplotlib.pyplot as plt

    from ddpo_grpo.figures import metrics_figure

    made = []

    def draw(rows, **kwargs):
        kwargs = {"before": None, "headline": [], "groups": []} | kwargs
        made.append(metrics_figure(rows, **kwargs))
        made[-1].canvas.draw()
        return made[-1]

    yield draw
    for fig in made:
        plt.close(fig)


def test_epoch_ticks_are_integers_and_a_lone_point_is_visible(figure):
    rows = [{"epoch": 0, "reward/mean": 0.5, "reward/std": 0.1, "reward/task/a": 0.5}]
    rows += [{"epoch": 1, "reward/mean": 0.6, "reward/std": 0.1, "eval/score": 1.0}]
    fig = figure(rows, headline=["eval/score"], group_by="task")
    for ax in fig.axes[:2]:  # the training panel and the evaluation panel (their secondary axes come after)
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
        assert (low, high) == (-0.5, 1.5)  # the same epochs in every panel, not 0.96 .. 1.04 around one
    (evaluation,) = _axes_with(fig, "eval/score")
    (line,) = evaluation.get_lines()
    assert line.get_marker() not in (None, "", "None") and list(line.get_xdata()) == [1]
    low, high = evaluation.get_ylim()
    assert high - low >= 0.19  # ±10 % of the value, not matplotlib's ±4 % around nothing
    group = next(line for line in fig.axes[0].get_lines() if line.get_label() == "reward/task/a")
    assert group.get_marker() not in (None, "", "None")  # a one-point dashed series would be invisible


def test_a_one_epoch_run_has_one_integer_tick(figure):
    fig = figure([{"epoch": 0, "reward/mean": 0.5}])
    low, high = fig.axes[0].get_xlim()
    assert [t for t in fig.axes[0].get_xticks() if low <= t <= high] == [0.0]
    assert fig.axes[0].get_ylim() == pytest.approx((0.45, 0.55))  # a flat series: ±10 % of its value


def test_a_small_scale_curve_gets_its_own_panel_and_duplicates_are_marked(figure):
    rows = [
        {
            "epoch": e,
            "reward/mean": 0.1 * e,
            "eval/strict": 0.2 * e,
            "eval/partial": 0.2 * e + 1e-9,
            "eval.red/score": 0.01,
        }
        for e in range(3)
    ]
    fig = figure(rows, headline=["eval/strict", "eval/partial", "eval.red/score"])
    (big,) = _axes_with(fig, "eval/strict")
    (small,) = _axes_with(fig, "eval.red/score")
    assert big is not small and small.get_ylim()[1] < 0.1  # 0.01 is not drawn on a 0..1 axis
    # eval/partial equals eval/strict to float32's precision (a float32 training reward beside its scorer)
    labels = [line.get_label() for line in big.get_lines()]
    assert "eval/partial (same as eval/strict)" in labels
    twin = next(line for line in big.get_lines() if "same as" in line.get_label())
    assert twin.get_markerfacecolor() == "none"  # hollow, larger: the series under it still shows


def test_z_reference_lines_are_labelled(figure):
    rows = [
        {"epoch": e, "reward/mean": 0.5, "paired/eval.train/score/diff": 0.2 * e, "paired/eval.train/score/se": 0.05}
        for e in range(1, 3)
    ]
    fig = figure(rows, paired=["paired/eval.train/score"])
    (ax,) = _axes_with(fig, "paired/eval.train/score")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(t.startswith("z = 1:") for t in legend) and any(t.startswith("z = 3:") for t in legend)


def test_scale_groups():
    from ddpo_grpo.figures import scale_groups

    series = {"a": ([0], [0.5]), "b": ([0], [0.01]), "c": ([0], [0.9]), "z": ([0], [0.0]), "none": ([], [])}
    assert scale_groups(series) == [["a", "c"], ["b", "z"]]


def test_pick_rows_covers_every_group_in_turn():
    from ddpo_grpo.report import pick_rows

    rows = [{"prompt": f"{t}{i}", "task": t} for t in ("single", "two", "counting", "position") for i in range(4)]
    picked = pick_rows(rows, 8, "task")
    assert [r["task"] for r in picked] == ["single", "two", "counting", "position"] * 2
    assert len({r["prompt"] for r in picked}) == 8
    assert [r["task"] for r in pick_rows(rows[:5], 4, "task")] == ["single", "two", "single", "single"]
    assert pick_rows(rows, 3, "") == rows[:3] and pick_rows(rows[:2], 3) == [rows[0], rows[1], rows[0]]


def test_before_after_has_every_group_and_the_scorers_verdicts(tmp_path):
    from PIL import Image

    from ddpo_grpo.report import RunReport, pick_rows

    rows = [{"prompt": f"{t} {i}", "task": t} for t in ("a", "b", "c", "d") for i in range(3)]
    brightness = {"value": 0.0}

    def sample(rows, reward=None):
        images = torch.full((len(rows), 3, 8, 8), brightness["value"])
        if reward is not None:
            reward(images, [r["prompt"] for r in rows], [{"task": r["task"]} for r in rows])
        return {}, images, [r["prompt"] for r in rows]

    def judge(images, prompts, metadata):
        strict = (images.mean(dim=(1, 2, 3)) > 0.5).float()
        return strict.numpy(), {"strict": strict.tolist()}

    report = RunReport(tmp_path, pick_rows(rows, 4, "task"), lambda s: s, group_by="task", scorers={"judge": judge})
    report.before(sample, {})
    brightness["value"] = 1.0
    report.finish(sample, {})
    with Image.open(tmp_path / "report" / "before_after.png") as im:
        captions = json.loads(im.text["captions"])
        notes = json.loads(im.text["notes"])
    assert [c.rsplit("[", 1)[1] for c in captions] == ["a]", "b]", "c]", "d]"]
    assert notes == [["0 -> 1 judge strict"]] * 4


def test_sample_sheets_are_enlarged_to_a_readable_tile(tmp_path):
    from PIL import Image

    from ddpo_grpo.image_grids import save_grid

    images = torch.rand(4, 3, 104, 104)
    save_grid(images, list("abcd"), str(tmp_path / "g.png"), nrow=4)
    with Image.open(tmp_path / "g.png") as im:
        assert im.size == (4 * (208 + 2) + 2, 208 + 2 + 2)  # 104-px tiles doubled, nearest neighbour
        assert json.loads(im.text["captions"]) == list("abcd")
        grid = np.asarray(im)
    first = np.round(images[0].numpy().transpose(1, 2, 0) * 255).astype(np.uint8)
    np.testing.assert_array_equal(grid[2:210:2, 2:210:2], first)


def test_tables_show_pass_rates_in_points_and_other_scores_in_their_units():
    from ddpo_grpo.paired import format_paired, paired_by_group

    rates = format_paired(paired_by_group([0, 0, 1, 1], [1, 1, 1, 0], ["x", "x", "y", "y"]), "strict")
    assert rates.splitlines()[0].endswith("in points:") and "+100.0" in rates
    red = format_paired(paired_by_group([0.010, 0.012, 0.011], [0.013, 0.015, 0.014], [None] * 3), "redness")
    assert red.splitlines()[0].endswith("in the values' own units:")
    assert "+0.003" in red and "+0.3" not in red  # not ×100


def test_between_scorer_table_names_the_scorers_not_before_after():
    from ddpo_grpo.paired import paired_by_group
    from ddpo_grpo.scorer_pairs import format_between

    text = format_between(paired_by_group([0, 1, 1], [1, 1, 1], [None] * 3), "strict", "shapes", "shapes_detector")
    head, columns = text.splitlines()[:2]
    assert "before" not in text and "after" not in text
    assert "shapes − shapes_detector" in head and columns.split()[2:4] == ["shapes_detector", "shapes"]
