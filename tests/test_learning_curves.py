"""The held-out learning curve over seeds (ddpo_grpo/learning_curves.py, benchmark_learning.py --curve)."""

import json

import pytest

from ddpo_grpo.learning_curves import curve_table, first_reaching, mean_interval, run_curve


def _run(path, base: float, evals: dict[int, float], detector_gain: float = 0.0):
    """A run of 4 epochs of 256 images, evaluated at the epochs of ``evals`` (epoch -> judge strict)."""
    (path / "report").mkdir(parents=True)
    before = {"eval/task_mean/strict": base, "eval.shapes_detector/task_mean/strict": base - 0.1, "eval/x": 1.0}
    (path / "report" / "before.json").write_text(json.dumps({"metrics": before}))
    rows = []
    for e in range(4):
        row = {"epoch": e, "progress/images_seen": 256 * (e + 1), "reward/mean": 0.5}
        if e in evals:
            row["eval/task_mean/strict"] = evals[e]
            row["eval.shapes_detector/task_mean/strict"] = base - 0.1 + detector_gain
        rows.append(row)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_the_curve_pairs_each_run_with_its_base_and_finds_the_first_crossing(tmp_path):
    runs = [
        _run(tmp_path / "s0", 0.50, {1: 0.52, 3: 0.60}, detector_gain=0.02),
        _run(tmp_path / "s1", 0.50, {1: 0.56, 3: 0.58}, detector_gain=0.04),
        _run(tmp_path / "s2", 0.50, {1: 0.50, 3: 0.53}),
    ]
    curve = run_curve(runs[0])
    assert curve["eval/task_mean/strict"] == [(512, pytest.approx(0.02)), (1024, pytest.approx(0.10))]
    assert first_reaching(run_curve(runs[1])["eval/task_mean/strict"], 0.05) == 512
    assert first_reaching(run_curve(runs[2])["eval/task_mean/strict"], 0.05) is None
    table = curve_table(runs, 0.05).splitlines()
    assert table[2] == "| scorer | 512 | 1,024 | images to +5 points |"
    m, half = mean_interval([10.0, 8.0, 3.0])
    first = mean_interval([2.0, 6.0, 0.0])[1]
    assert table[4] == f"| eval | +2.7 ± {first:.1f} | +{m:.1f} ± {half:.1f} | 768 (2/3) |"
    assert table[5].startswith("| eval.shapes_detector | +2.0 ± ") and table[5].endswith("| — (0/3) |")


def test_a_run_evaluated_less_often_is_counted_and_bad_runs_are_named(tmp_path):
    runs = [_run(tmp_path / "a", 0.5, {1: 0.6, 3: 0.6}), _run(tmp_path / "b", 0.5, {3: 0.55})]
    assert "| +10.0 (1 of 2) |" in curve_table(runs)
    (tmp_path / "c").mkdir()
    with pytest.raises(ValueError, match=r"c/report/before.json: missing"):
        run_curve(tmp_path / "c")
    with pytest.raises(ValueError, match="no held-out evaluation logged"):
        run_curve(_run(tmp_path / "d", 0.5, {}))


def test_benchmark_learning_prints_the_curve_and_names_a_bad_run(tmp_path, capsys):
    from tests.conftest import load_script

    script = load_script("benchmark_learning")
    runs = [str(_run(tmp_path / f"s{i}", 0.5, {3: 0.5 + 0.05 * i})) for i in range(2)]
    assert script.main(["--curve", *runs]) == 0
    assert "| eval | +2.5 ± 31.8 | 1,024 (1/2) |" in capsys.readouterr().out
    assert script.main(["--curve", str(tmp_path / "missing")]) == 2
    assert "--curve: " in capsys.readouterr().err


def test_the_curve_is_drawn_into_a_png_and_plot_needs_curve(tmp_path, capsys):
    from PIL import Image

    from tests.conftest import load_script

    script = load_script("benchmark_learning")
    runs = [str(_run(tmp_path / f"s{i}", 0.5, {1: 0.52 + 0.01 * i, 3: 0.55 + 0.05 * i})) for i in range(3)]
    png = tmp_path / "curve.png"
    assert script.main(["--curve", *runs, "--plot", str(png), "--title", "three seeds"]) == 0
    assert f"picture: {png}" in capsys.readouterr().out
    with Image.open(png) as image:  # two panels (judge, detector) side by side
        assert image.format == "PNG" and image.width > 1.5 * image.height
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["curve.png"]  # no partial file left
    assert script.main(["--plot", str(png)]) == 2
    assert "--plot draws the held-out curve" in capsys.readouterr().err
