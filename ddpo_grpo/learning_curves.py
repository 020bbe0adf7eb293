"""Held-out gain against generated images, over seeds: the learning curve of a recipe, per scorer.

A run evaluated every ``eval.freq`` epochs logs its held-out headline per scorer (``eval/task_mean/strict`` for the
trained reward's judge, ``eval.<scorer>/task_mean/strict`` for every other scorer of ``eval.reward``) beside
``progress/images_seen``; its base's numbers are ``report/before.json``. For the runs of one recipe (its seeds):

* the curve: per scorer and per number of images drawn, the mean over runs of (held-out strict − the base's), in
  points, with a 95 % t-interval over the runs (each run's own base: the seeds share one base model and one
  held-out set, so the base's number is the same for all);
* images-to-threshold: per run, the images drawn when its held-out strict first reached the base + ``threshold``
  (at an evaluated epoch: the answer is as fine as ``eval.freq``); printed as the median over the runs that reached
  it and how many did.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from ddpo_grpo.signal_table import read_metrics

SUFFIX = "/task_mean/strict"
#: two-sided 95 % t quantiles by degrees of freedom (normal beyond)
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}


def run_curve(run: Path) -> dict[str, list[tuple[int, float]]]:
    """One run: scorer key -> [(images drawn, held-out strict − base)] at its evaluated epochs. Refused (one line
    naming the file) when the run has no report/before.json or never evaluated."""
    before_file = Path(run) / "report" / "before.json"
    if not before_file.is_file():
        raise ValueError(f"{before_file}: missing; the curve needs the base's held-out numbers (eval.freq > 0)")
    base = {k: v for k, v in json.loads(before_file.read_text())["metrics"].items() if k.endswith(SUFFIX)}
    curve: dict[str, list[tuple[int, float]]] = {k: [] for k in base}
    for row in read_metrics(run):
        for key in base:
            if row.get(key) is not None and row.get("progress/images_seen") is not None:
                curve[key].append((int(row["progress/images_seen"]), float(row[key]) - float(base[key])))
    if not any(curve.values()):
        raise ValueError(f"{Path(run) / 'metrics.jsonl'}: no held-out evaluation logged (train with eval.freq > 0)")
    return curve


def mean_interval(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % t-interval (0 for one value; NaN, NaN for none)."""
    if not values:
        return math.nan, math.nan
    if len(values) == 1:
        return values[0], 0.0
    half = T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return statistics.fmean(values), half


def first_reaching(points: list[tuple[int, float]], threshold: float) -> int | None:
    """The images drawn at the first evaluation whose gain reached ``threshold`` (None if none did)."""
    return next((images for images, gain in points if gain >= threshold - 1e-12), None)


def _cell(gains: list[float], runs: int) -> str:
    """The mean gain ± its interval over the runs that evaluated there (their count when not all did)."""
    if not gains:
        return "—"
    m, half = mean_interval(gains)
    text = f"{m:+.1f}" if len(gains) == 1 else f"{m:+.1f} ± {half:.1f}"
    return text if len(gains) == runs else f"{text} ({len(gains)} of {runs})"


def _scorers(curves: list[dict]) -> list[str]:
    """The scorer keys of the curves, the trained reward's judge first."""
    return sorted({k for c in curves for k in c}, key=lambda k: (k != "eval" + SUFFIX, k))


def curve_table(runs: list[Path], threshold: float = 0.05) -> str:
    """The curve and images-to-threshold of the module docstring for ``runs`` (the seeds of one recipe), markdown."""
    curves = [run_curve(run) for run in runs]
    scorers = _scorers(curves)
    images = sorted({i for c in curves for points in c.values() for i, _ in points})
    lines = [
        f"Held-out strict gain over the base, points: mean ± 95 % interval over {len(runs)} run(s), by images drawn",
        "",
        "| scorer | " + " | ".join(f"{i:,}" for i in images) + f" | images to +{threshold * 100:g} points |",
        "|---|" + "---|" * (len(images) + 1),
    ]
    for key in scorers:
        cells = []
        for i in images:
            gains = [dict(c.get(key, [])).get(i) for c in curves]
            gains = [100 * g for g in gains if g is not None]
            cells.append(_cell(gains, len(runs)))
        reached = [first_reaching(c.get(key, []), threshold) for c in curves]
        got = [r for r in reached if r is not None]
        first = f"{statistics.median(got):,.0f} ({len(got)}/{len(runs)})" if got else f"— (0/{len(runs)})"
        lines.append(f"| {key.removesuffix(SUFFIX)} | " + " | ".join(cells) + f" | {first} |")
    return "\n".join(lines) + "\n"


def curve_figure(runs: list[Path], path: Path, threshold: float = 0.05, title: str = "") -> Path:
    """The curve as a PNG: one panel per scorer, held-out strict gain in points against images drawn, each run a thin
    line from the base (0 at 0 images), their mean thick with its 95 % t-interval shaded where every run evaluated,
    and the threshold dashed. Written atomically (a temporary file, then a rename)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = [run_curve(run) for run in runs]
    scorers = _scorers(curves)
    width = max(7.5, 5.2 * len(scorers))  # (one panel: room for the title)
    fig, axes = plt.subplots(1, len(scorers), figsize=(width, 3.8), squeeze=False, sharey=True)
    for ax, key in zip(axes[0], scorers):
        for n, curve in enumerate(curves):
            points = [(0, 0.0)] + curve.get(key, [])
            ax.plot(
                [i for i, _ in points],
                [100 * g for _, g in points],
                color="0.6",
                lw=0.9,
                label="runs" if not n else None,
            )
        per_run = [dict(c.get(key, [])) for c in curves]  # images drawn -> gain, one dict per run
        images = sorted({i for gains in per_run for i in gains})
        full = [(i, [100 * gains[i] for gains in per_run]) for i in images if all(i in gains for gains in per_run)]
        xs, stats = [0] + [i for i, _ in full], [(0.0, 0.0)] + [mean_interval(g) for _, g in full]
        means = [m for m, _ in stats]
        ax.fill_between(
            xs,
            [m - h for m, h in stats],
            [m + h for m, h in stats],
            color="C0",
            alpha=0.18,
            lw=0,
            label="95 % interval",
        )
        ax.plot(xs, means, color="C0", lw=2.2, marker="o", ms=4, label=f"mean of {len(runs)}")
        ax.axhline(100 * threshold, color="C3", ls="--", lw=1, label=f"+{100 * threshold:g} points")
        ax.axhline(0, color="black", lw=0.6)
        ax.set_title(key.removesuffix(SUFFIX), fontsize=10)
        ax.set_xlabel("images drawn")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("held-out strict − base (points)")
    axes[0][0].legend(fontsize=8, loc="upper left")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    partial = path.with_name(path.name + ".partial.png")
    fig.savefig(partial, dpi=110)
    plt.close(fig)
    partial.replace(path)
    return path


__all__ = ["curve_figure", "curve_table", "first_reaching", "mean_interval", "run_curve"]
