"""The run report's pictures: a captioned before/after grid and the metrics plot; world-agnostic.

``captioned_grid`` tiles rows of images (e.g. before / after training) with a label at the left of each row and a
caption under each column (the prompt, and its group such as the ShapesWorld task), enlarged by an integer factor
(nearest neighbour, so small images stay sharp). ``plot_metrics`` draws, against epoch (samples drawn on the top
axis): the training reward's mean inside its ±1 std band with the per-group means when the rows carry a group;
the paired probe's gain ± 2 SE; and the held-out evaluation at every ``eval.freq`` epochs, as curves (one per
scorer's headline metric, the first scorer's groups dotted), the untrained model at epoch −1.
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


def captioned_grid(rows: Sequence, row_labels: Sequence[str], captions: Sequence[str], path) -> Path:
    """One PNG at ``path`` (written atomically): ``rows`` of N float images [N, 3, H, W] in [0, 1] each, a label at
    the left of each row, ``captions[j]`` under column j. The captions also go into the PNG's "captions" chunk."""
    from PIL import Image, ImageDraw, ImageFont
    from PIL.PngImagePlugin import PngInfo

    arrays = [to_uint8(r) for r in rows]
    n, h, w = arrays[0].shape[0], arrays[0].shape[1], arrays[0].shape[2]
    if any(a.shape != arrays[0].shape for a in arrays) or len(captions) != n or len(row_labels) != len(rows):
        raise ValueError("captioned_grid: every row needs the same N images, N captions and one label per row")
    scale = max(1, math.ceil(MIN_CELL / max(h, w)))
    cell_w, cell_h = w * scale, h * scale
    font = ImageFont.load_default(size=13)
    chars = max(8, cell_w // 7)
    wrapped = [textwrap.wrap(c, chars)[:4] for c in captions]
    text_h = 16 * max(1, max(len(x) for x in wrapped)) + 6
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
    for j, lines in enumerate(wrapped):
        for k, line in enumerate(lines):
            draw.text((label_w + j * (cell_w + pad), y0 + 16 * k), line, fill="black", font=font)
    info = PngInfo()
    info.add_text("captions", json.dumps(list(captions)))
    path = Path(path)
    with replacing(path) as tmp:
        canvas.save(tmp, format="PNG", pnginfo=info)
    return path


def _series(rows: list[dict], key: str) -> tuple[list, list]:
    points = [(r["epoch"], float(r[key])) for r in rows if r.get(key) is not None]
    return [p[0] for p in points], [p[1] for p in points]


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
    (the training reward's beside the held-out scorers': the reward-hacking signal, ddpo_grpo/heldout.py)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_probe = any(r.get("probe/diff") is not None for r in rows)
    has_eval = bool(headline)
    has_paired = bool(paired)
    panels = 1 + has_probe + has_eval + has_paired
    fig, axes = plt.subplots(panels, 1, figsize=(10.5, 3.6 * panels), squeeze=False)
    axes = [a[0] for a in axes]
    per_epoch = rows[-1].get("progress/images_seen", 0) / (rows[-1]["epoch"] + 1) if rows else 0

    ax = axes[0]
    x, mean = _series(rows, "reward/mean")
    _, std = _series(rows, "reward/std")
    if len(std) == len(mean):
        ax.fill_between(
            x,
            [m - s for m, s in zip(mean, std)],
            [m + s for m, s in zip(mean, std)],
            color="C0",
            alpha=0.12,
            lw=0,
            label="± 1 std",
        )
    ax.plot(x, mean, color="C0", lw=2.2, marker=".", label="reward/mean", zorder=3)
    reward_groups = list(dict.fromkeys(k for r in rows for k in r if group_by and k.startswith(f"reward/{group_by}/")))
    for i, key in enumerate(reward_groups):
        gx, gy = _series(rows, key)
        ax.plot(gx, gy, ls="--", lw=1, color=f"C{i + 1}", label=key)
    ax.set_ylabel("training reward")
    ax.set_title("training reward per epoch (its own prompts and noise each epoch)", fontsize=9)

    if has_probe:
        ax = axes[1]
        px, d = _series(rows, "probe/diff")
        _, se = _series(rows, "probe/diff_se")
        ax.fill_between(
            px, [a - 2 * e for a, e in zip(d, se)], [a + 2 * e for a, e in zip(d, se)], alpha=0.15, lw=0, label="± 2 SE"
        )
        ax.plot(px, d, marker=".", lw=2, label="probe/diff")
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_ylabel("paired reward gain")
        ax.set_title("paired probe: the same prompts and noise against the untrained model", fontsize=9)

    if has_paired:
        ax = axes[-1]
        for i, key in enumerate(paired):
            zx = [r["epoch"] for r in rows if r.get(f"{key}/se")]
            zy = [r[f"{key}/diff"] / r[f"{key}/se"] for r in rows if r.get(f"{key}/se")]
            ax.plot(zx, zy, marker="o", lw=2 if key.startswith("paired/eval.train/") else 1.2, color=f"C{i}", label=key)
        for level in (1.0, 3.0):
            ax.axhline(level, color="grey", lw=0.8, ls="--")
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_ylabel("z = paired gain / SE")
        ax.set_title("held-out gain over the untrained model: training reward vs held-out scorers", fontsize=9)

    if has_eval:
        ax = axes[-1 - has_paired]
        evals = ([dict(before, epoch=-1)] if before else []) + [r for r in rows if any(k in r for k in headline)]
        for i, key in enumerate(headline):
            ex, ey = _series(evals, key)
            ax.plot(ex, ey, marker="o", lw=2, color=f"C{i}", label=key)
        for i, key in enumerate(groups):
            ex, ey = _series(evals, key)
            ax.plot(ex, ey, ls=":", marker=".", lw=1, color=f"C{i + len(headline)}", label=key)
        ax.set_ylabel("held-out evaluation")
        ax.set_title("held-out evaluation (epoch −1 = before training)", fontsize=9)

    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_xlabel("epoch")
        if per_epoch:
            top = ax.secondary_xaxis("top", functions=(lambda e: (e + 1) * per_epoch, lambda s: s / per_epoch - 1))
            top.set_xlabel("samples drawn", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    try:
        with replacing(path) as tmp:
            fig.savefig(tmp, dpi=90)
    finally:
        plt.close(fig)
    return path
