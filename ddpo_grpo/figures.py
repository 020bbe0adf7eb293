"""The run report's pictures: a captioned before/after grid, evaluate.py's captioned and scored grid, and the
metrics plot; world-agnostic.

``captioned_grid`` tiles rows of images (e.g. before / after training) with a label at the left of each row and a
caption under each column (the prompt, and its group such as the ShapesWorld task), enlarged by an integer factor
(nearest neighbour, so small images stay sharp); ``scored_grid`` tiles evaluate.py's samples, each with
its prompt and every scorer's verdict under it. ``plot_metrics`` draws, against epoch (samples drawn on the top
axis): the training reward's mean inside its ±1 std band with the per-group means when the rows carry a group;
the paired probe's gain ± 2 SE; and the held-out evaluation at every ``eval.freq`` epochs, as curves (one per
scorer's headline metric, the first scorer's groups dotted), the untrained model at epoch −1.

Drawn to be read: epoch ticks on integers, every panel over the same epochs; every series with markers (a
one-epoch series is a visible dot, a flat one ±10 % of its value); evaluation curves whose magnitudes differ more
than tenfold in panels of their own (``scale_groups``); a series identical to an earlier one labelled "(same as
…)" and drawn hollow on a dotted line so that both show (``draw_series``); the z = 1 and z = 3 lines in the legend.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Sequence
from pathlib import Path

from foundation.atomic_io import replacing
from foundation.images import to_uint8

#: smallest side, in pixels, of a grid cell after enlarging
MIN_CELL = 160


def _font():
    from PIL import ImageFont

    return ImageFont.load_default(size=13)  # 16 px a line


def _lines(caption: str, notes, chars: int, caption_lines: int = 4) -> list[tuple[str, str]]:
    """(text, colour) lines under one image: ``caption`` wrapped to ``chars`` a line, at most ``caption_lines`` of
    them (the rest cut, "..."), then each note (a string, drawn blue, or a (text, colour) pair) wrapped."""
    lines = [(w, "black") for w in textwrap.wrap(caption, chars, max_lines=caption_lines, placeholder=" ...")]
    for note in notes or ():
        text, colour = (note, "#1f5fa8") if isinstance(note, str) else tuple(note)
        lines += [(w, colour) for w in textwrap.wrap(text, chars)]
    return lines


def _save(canvas, path, captions, notes) -> Path:
    """``canvas`` as a PNG at ``path`` (atomically), the captions in its "captions" chunk, the notes' texts in
    "notes"."""
    from PIL.PngImagePlugin import PngInfo

    info = PngInfo()
    info.add_text("captions", json.dumps(list(captions)))
    if notes is not None and any(notes):
        info.add_text("notes", json.dumps([[n if isinstance(n, str) else n[0] for n in col] for col in notes]))
    path = Path(path)
    with replacing(path) as tmp:
        canvas.save(tmp, format="PNG", pnginfo=info)
    return path


def captioned_grid(rows: Sequence, row_labels: Sequence[str], captions: Sequence[str], path, notes=None) -> Path:
    """One PNG at ``path`` (written atomically): ``rows`` of N float images [N, 3, H, W] in [0, 1] each, a label at
    the left of each row, ``captions[j]`` under column j and below it the lines ``notes[j]`` (each a string or a
    (text, colour) pair: e.g. the held-out scorers' verdicts). The captions also go into the PNG's "captions"
    chunk, the notes' texts into "notes"."""
    from PIL import Image, ImageDraw

    arrays = [to_uint8(r) for r in rows]
    n, h, w = arrays[0].shape[0], arrays[0].shape[1], arrays[0].shape[2]
    if any(a.shape != arrays[0].shape for a in arrays) or len(captions) != n or len(row_labels) != len(rows):
        raise ValueError("captioned_grid: every row needs the same N images, N captions and one label per row")
    if notes is not None and len(notes) != n:
        raise ValueError(f"captioned_grid: {len(notes)} notes for {n} columns; give one list of lines per column")
    scale = max(1, math.ceil(MIN_CELL / max(h, w)))
    cell_w, cell_h = w * scale, h * scale
    font = _font()
    texts = [_lines(c, col, max(8, cell_w // 7)) for c, col in zip(captions, notes or [[] for _ in captions])]
    text_h = 16 * max(1, max(map(len, texts))) + 6
    label_w = 70
    pad = 6
    canvas = Image.new("RGB", (label_w + n * (cell_w + pad), len(rows) * (cell_h + pad) + text_h), "white")
    draw = ImageDraw.Draw(canvas)
    for i, (arr, label) in enumerate(zip(arrays, row_labels)):
        top = i * (cell_h + pad)
        draw.text((4, top + cell_h // 2 - 8), label, fill="black", font=font)
        for j in range(n):
            tile = Image.fromarray(arr[j]).resize((cell_w, cell_h), Image.NEAREST)
            left = label_w + j * (cell_w + pad)
            canvas.paste(tile, (left, top))
            draw.rectangle((left - 1, top - 1, left + cell_w, top + cell_h), outline=(170, 170, 170))
    y0 = len(rows) * (cell_h + pad) + 2
    for j, lines in enumerate(texts):
        for k, (line, colour) in enumerate(lines):
            draw.text((label_w + j * (cell_w + pad), y0 + 16 * k), line, fill=colour, font=font)
    return _save(canvas, path, captions, notes)


def first_scores(scorers) -> dict[str, list]:
    """``{"<scorer> <metric>": per-sample values}`` of each scorer's first metric (None where it did not apply):
    the verdicts drawn under the report's and evaluate.py's images. ``scorers``: an ``evaluation.Scorers``."""
    found = {}
    for name in scorers.scored:
        metric, values = next(iter(scorers.values(name).items()), (None, None))
        if metric is not None:
            found[f"{name} {metric}"] = [None if math.isnan(v) else v for v in values]
    return found


def score_notes(scores: dict[str, list], n: int) -> list[list[tuple[str, str]]]:
    """Per image j < n, one (text, colour) line per scorer of ``scores`` (``first_scores``): "<value> <scorer>
    <metric>", the value first so a wrapped name never hides it; a 0/1 verdict green (1) or red (0), any other score
    blue, n/a grey."""

    def line(v, label: str, binary: bool) -> tuple[str, str]:
        if v is None:
            return f"n/a {label}", "grey"
        return f"{v:.3g} {label}", ("#18803a" if v == 1 else "#b8312f") if binary else "#1f5fa8"

    binary = {k: all(v in (0, 1, None) for v in vals) for k, vals in scores.items()}
    return [[line(vals[j], k, binary[k]) for k, vals in scores.items() if j < len(vals)] for j in range(n)]


def scored_grid(images, captions: Sequence[str], scorers, path, ncol: int | None = None) -> Path:
    """evaluate.py's grid.png: float images [N, 3, H, W] in [0, 1], ``ncol`` a row (default ⌈√N⌉), each tile
    enlarged to at least ``MIN_CELL`` pixels with its caption under it (the prompt, cut to two lines) and the
    verdict or score of every scorer of ``scorers`` (an ``evaluation.Scorers``, its first N samples: ``score_notes``)
    below that. The captions also go into the PNG's "captions" chunk, the scores into "notes"."""
    from PIL import Image, ImageDraw

    arr = to_uint8(images)
    n, h, w = arr.shape[0], arr.shape[1], arr.shape[2]
    if n == 0 or len(captions) != n:
        raise ValueError(f"scored_grid: {len(captions)} captions for {n} images (at least one)")
    notes = score_notes(first_scores(scorers) if scorers is not None else {}, n)
    ncol = min(ncol or math.ceil(math.sqrt(n)), n)
    scale = max(1, math.ceil(MIN_CELL / max(h, w)))
    cell_w, cell_h, pad = w * scale, h * scale, 6
    texts = [_lines(c, col, max(8, cell_w // 7), caption_lines=2) for c, col in zip(captions, notes)]
    row_h = cell_h + 16 * max(map(len, texts)) + 2 * pad
    canvas = Image.new("RGB", (pad + ncol * (cell_w + pad), pad + math.ceil(n / ncol) * row_h), "white")
    draw, font = ImageDraw.Draw(canvas), _font()
    for j, lines in enumerate(texts):
        left, top = pad + j % ncol * (cell_w + pad), pad + j // ncol * row_h
        canvas.paste(Image.fromarray(arr[j]).resize((cell_w, cell_h), Image.NEAREST), (left, top))
        draw.rectangle((left - 1, top - 1, left + cell_w, top + cell_h), outline=(170, 170, 170))
        for k, (line, colour) in enumerate(lines):
            draw.text((left, top + cell_h + 3 + 16 * k), line, fill=colour, font=font)
    return _save(canvas, path, captions, notes)


def _series(rows: list[dict], key: str) -> tuple[list, list]:
    points = [(r["epoch"], float(r[key])) for r in rows if r.get(key) is not None]
    return [p[0] for p in points], [p[1] for p in points]


def scale_groups(series: dict[str, tuple[list, list]], ratio: float = 10.0) -> list[list[str]]:
    """The labels of ``series`` (label -> (x, y)) split into groups of one scale: sorted by magnitude (the largest
    |y|), a new group starts where the magnitude grows more than ``ratio``-fold, so a 0.01-scale reward does not sit
    flat at the bottom of a 0–1 axis. Series with no points are dropped; all-zero ones join the smallest scale."""
    size = {k: max((abs(v) for v in y if math.isfinite(v)), default=0.0) for k, (_, y) in series.items() if y}
    groups: list[list[str]] = []
    low = 0.0
    for key in sorted((k for k in size if size[k] > 0), key=lambda k: size[k]):
        if groups and size[key] <= ratio * low:
            groups[-1].append(key)
        else:
            groups.append([key])
            low = size[key]
    zeros = [k for k in size if size[k] == 0]  # all-zero series fit any scale: with the smallest
    groups = [groups[0] + zeros, *groups[1:]] if groups else [zeros] if zeros else []
    order = list(series)
    return sorted((sorted(g, key=order.index) for g in groups), key=lambda g: order.index(g[0]))


def draw_series(ax, series: dict[str, tuple[list, list]], styles: dict[str, dict] | None = None) -> None:
    """Each series of ``series`` (label -> (x, y)) on ``ax``, with markers (a single point stays visible), its
    ``styles`` (matplotlib kwargs) and, when it repeats an earlier series exactly, "(same as <label>)" in its
    legend entry and a hollow marker on a thinner line, so that neither hides the other. "Exactly" is to a
    relative 1e-6 (float32's precision): the training reward, summed in float32, and the scorer it sums differ in
    the last bits."""
    seen: list[tuple[list, list, str]] = []
    for i, (key, (x, y)) in enumerate(series.items()):
        if not y:
            continue
        style = {"marker": "o", "lw": 1.5, "color": f"C{i}", "ms": 5} | dict((styles or {}).get(key, {}))
        label = key
        twin = next((k for sx, sy, k in seen if list(sx) == list(x) and _close(sy, y)), None)
        if twin is not None:
            label = f"{key} (same as {twin})"
            style |= {"mfc": "none", "ms": 10, "lw": 1.0, "ls": ":"}
        else:
            seen.append((x, y, key))
        ax.plot(x, y, label=label, **style)


def _close(a: Sequence[float], b: Sequence[float]) -> bool:
    return len(a) == len(b) and all(math.isclose(u, v, rel_tol=1e-6, abs_tol=1e-9) for u, v in zip(a, b))


def _limits(ax, epochs: list, ys: list) -> None:
    """Epoch ticks on integers only, every panel over the same ``epochs`` (all panels' points) with half an epoch
    either side (a lone point is not centred in 0.96 .. 1.04), and a flat series given room (10 % of its value)
    rather than matplotlib's ±4 % around nothing."""
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # integers even over one epoch
    if epochs:
        ax.set_xlim(min(epochs) - 0.5, max(epochs) + 0.5)
    finite = [v for v in ys if math.isfinite(v)]
    if finite and max(finite) - min(finite) < 1e-12:
        pad = 0.1 * abs(finite[0]) or 0.1
        ax.set_ylim(finite[0] - pad, finite[0] + pad)


def metrics_figure(
    rows: list[dict],
    *,
    before: dict | None,
    headline: Sequence[str],
    groups: Sequence[str],
    group_by: str = "",
    paired: Sequence[str] = (),
):
    """The matplotlib figure of ``plot_metrics`` (same arguments but the path); the caller closes it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evals = ([dict(before, epoch=-1)] if before else []) + [r for r in rows if any(k in r for k in headline)]
    eval_series = {k: _series(evals, k) for k in headline}
    eval_series |= {k: _series(evals, k) for k in groups}
    eval_panels = scale_groups(eval_series) if headline else []
    has_probe = any(r.get("probe/diff") is not None for r in rows)
    has_paired = bool(paired)
    panels = 1 + has_probe + len(eval_panels) + has_paired
    fig, axes = plt.subplots(panels, 1, figsize=(10.5, 3.4 * panels), squeeze=False)
    axes = [a[0] for a in axes]
    per_epoch = rows[-1].get("progress/images_seen", 0) / (rows[-1]["epoch"] + 1) if rows else 0
    drawn: dict = {}  # axis -> (xs, ys) of what it shows, for its limits

    ax = axes[0]
    x, mean = _series(rows, "reward/mean")
    _, std = _series(rows, "reward/std")
    if len(std) == len(mean):
        low, high = [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)]
        ax.fill_between(x, low, high, color="C0", alpha=0.12, lw=0, label="± 1 std")
    reward_groups = list(dict.fromkeys(k for r in rows for k in r if group_by and k.startswith(f"reward/{group_by}/")))
    series = {"reward/mean": (x, mean)} | {k: _series(rows, k) for k in reward_groups}
    styles = {"reward/mean": {"lw": 2.2, "zorder": 3}} | {k: {"ls": "--", "lw": 1, "ms": 3} for k in reward_groups}
    draw_series(ax, series, styles)
    drawn[ax] = ([v for sx, _ in series.values() for v in sx], [v for _, sy in series.values() for v in sy])
    ax.set_ylabel("training reward")
    ax.set_title("training reward per epoch (its own prompts and noise each epoch)", fontsize=9)

    if has_probe:
        ax = axes[1]
        px, d = _series(rows, "probe/diff")
        _, se = _series(rows, "probe/diff_se")
        low, high = [a - 2 * e for a, e in zip(d, se)], [a + 2 * e for a, e in zip(d, se)]
        ax.fill_between(px, low, high, alpha=0.15, lw=0, label="± 2 SE")
        ax.errorbar(px, d, yerr=[2 * e for e in se], fmt="none", ecolor="C0", capsize=3, lw=0.8)  # one point too
        draw_series(ax, {"probe/diff": (px, d)}, {"probe/diff": {"lw": 2}})
        ax.axhline(0.0, color="grey", lw=0.8)
        drawn[ax] = (px, d + low + high)
        ax.set_ylabel("paired reward gain")
        ax.set_title("paired probe: the same prompts and noise against the untrained model", fontsize=9)

    first_eval = 1 + has_probe
    for i, keys in enumerate(eval_panels):
        ax = axes[first_eval + i]
        shown = {k: eval_series[k] for k in keys}
        styles = {k: {"ls": ":", "lw": 1, "marker": "s", "ms": 4} for k in keys if k in groups}
        styles |= {k: {"lw": 2} for k in keys if k in headline}
        draw_series(ax, shown, styles)
        drawn[ax] = ([v for sx, _ in shown.values() for v in sx], [v for _, sy in shown.values() for v in sy])
        ax.set_ylabel("held-out evaluation")
        scale = f" (panel {i + 1} of {len(eval_panels)}: one scale per panel)" if len(eval_panels) > 1 else ""
        ax.set_title(f"held-out evaluation (epoch −1 = before training){scale}", fontsize=9)

    if has_paired:
        ax = axes[-1]
        series = {}
        for key in paired:
            ok = [r for r in rows if r.get(f"{key}/se")]
            series[key] = ([r["epoch"] for r in ok], [r[f"{key}/diff"] / r[f"{key}/se"] for r in ok])
        styles = {k: {"lw": 2 if k.startswith("paired/eval.train/") else 1.2} for k in paired}
        draw_series(ax, series, styles)
        ax.axhline(0.0, color="grey", lw=0.8)
        meanings = (
            (1.0, "--", "a held-out scorer below it did not rise"),
            (3.0, "-.", "training reward above it rose"),
        )
        for level, ls, meaning in meanings:
            ax.axhline(level, color="dimgrey", lw=0.9, ls=ls, label=f"z = {level:g}: {meaning}")
            ax.annotate(f"z = {level:g}", (0.005, level), xycoords=("axes fraction", "data"), fontsize=7, va="bottom")
        drawn[ax] = ([v for sx, _ in series.values() for v in sx], [v for _, sy in series.values() for v in sy])
        ax.set_ylabel("z = paired gain / SE")
        ax.set_title("held-out gain over the untrained model: training reward vs held-out scorers", fontsize=9)

    epochs = [x for xs, _ in drawn.values() for x in xs]
    for ax in axes:
        _limits(ax, epochs, drawn.get(ax, ([], []))[1])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.04, 1.0))
        ax.set_xlabel("epoch")
        if per_epoch:
            top = ax.secondary_xaxis("top", functions=(lambda e: (e + 1) * per_epoch, lambda s: s / per_epoch - 1))
            top.set_xlabel("samples drawn", fontsize=8)
    fig.tight_layout()
    return fig


def plot_metrics(
    rows: list[dict],
    path,
    *,
    before: dict | None,
    headline: Sequence[str],
    groups: Sequence[str],
    group_by: str = "",
    paired: Sequence[str] = (),
):
    """metrics.png (module docstring). ``rows``: metrics.jsonl's rows; ``before``: the untrained model's evaluation;
    ``headline``: the evaluation keys drawn as solid curves (one per scorer); ``groups``: dotted per-group keys;
    ``group_by``: the rows' group field, whose training-reward means (reward/<group_by>/<label>) are drawn dashed;
    ``paired``: "paired/<scorer>/<metric>" keys whose held-out gain over the untrained model is drawn as z = diff / SE
    (the training reward's beside the held-out scorers': the reward-hacking signal, ddpo_grpo/heldout.py).
    Epoch ticks are integers; every series has markers; evaluation curves of different scales get a panel each;
    a series identical to another is marked "(same as …)"; the z = 1 and z = 3 lines are labelled."""
    import matplotlib.pyplot as plt

    fig = metrics_figure(rows, before=before, headline=headline, groups=groups, group_by=group_by, paired=paired)
    path = Path(path)
    try:
        with replacing(path) as tmp:
            fig.savefig(tmp, dpi=90, bbox_inches="tight")  # the legends right of the panels included
    finally:
        plt.close(fig)
    return path
