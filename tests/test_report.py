"""The run report's pictures (ddpo_grpo/figures.py): captions, one epoch axis, per-group and held-out curves."""

import json

import torch


def _rows():
    rows = []
    for epoch in range(4):
        row = {"epoch": epoch, "progress/images_seen": 16 * (epoch + 1), "reward/mean": 0.4 + 0.05 * epoch}
        row |= {"reward/std": 0.1, "reward/task/counting": 0.2 + 0.1 * epoch, "reward/task/position": 0.5}
        if epoch % 2 == 1:  # eval.freq = 2
            row |= {"eval/task_mean/strict": 0.3 + 0.1 * epoch, "eval/strict/counting": 0.1 * epoch}
        rows.append(row)
    return rows


def test_metrics_plot_draws_the_mean_in_its_band_per_group_and_held_out_curves(tmp_path, monkeypatch):
    import matplotlib.axes

    from ddpo_grpo import figures

    drawn = []
    original = matplotlib.axes.Axes.plot

    def spy(self, *args, label=None, **kwargs):
        drawn.append((label, list(args[0]), list(args[1])))
        return original(self, *args, label=label, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "plot", spy)
    before = {"eval/task_mean/strict": 0.25, "eval/strict/counting": 0.0}
    out = figures.plot_metrics(
        _rows(),
        tmp_path / "metrics.png",
        before=before,
        headline=["eval/task_mean/strict"],
        groups=["eval/strict/counting"],
        group_by="task",
    )
    assert out.is_file()
    lines = {label: (x, y) for label, x, y in drawn}
    assert lines["reward/mean"][0] == [0, 1, 2, 3]  # one axis: epochs (samples drawn on the top axis)
    assert lines["reward/task/counting"][1] == [0.2, 0.30000000000000004, 0.4, 0.5]
    assert lines["eval/task_mean/strict"][0] == [-1, 1, 3]  # before training, then every eval.freq epochs
    assert lines["eval/strict/counting"] == ([-1, 1, 3], [0.0, 0.1, 0.30000000000000004])
    assert sum(label == "reward/mean" for label, _, _ in drawn) == 1  # no duplicated column


def test_before_after_grid_captions_every_column(tmp_path):
    from PIL import Image

    from ddpo_grpo.figures import captioned_grid

    images = torch.rand(3, 3, 16, 16)
    captions = ["a red circle [single_object]", "two blue squares [counting]", "a long prompt " * 4 + "[position]"]
    path = captioned_grid([images, images.flip(-1)], ["before", "after"], captions, tmp_path / "grid.png")
    with Image.open(path) as grid:
        assert json.loads(grid.text["captions"]) == captions
        assert grid.width > 3 * 160 and grid.height > 2 * 160  # 16-px images enlarged to legible cells
