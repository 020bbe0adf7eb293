"""Where a run's learning signal went, epoch by epoch: the stall diagnostics of docs/learning.md, from metrics.jsonl.

A group-relative objective learns from the reward differences inside a group. Per epoch the table shows how much of
that there was and where:

    images      generated images so far (``sample/images`` summed: dynamic sampling's extra rounds
                count; older runs: ``progress/images_seen``)
    flat        the fraction of the trained groups whose rewards were all equal (``adv/frac_zero_std``: advantage 0)
    spread      the mean within-group standard deviation of the reward (``reward/group_std``)
    flat <g>    the flat fraction per value of the rows' group field (``adv/frac_flat/<g>``, e.g. per task)
    train <g>   the training reward per group value (``reward/<field>/<g>``)
    held-out    the held-out headline (``eval/task_mean/strict``, or the first eval metric) where it was evaluated,
                and per group value (``eval/<metric>/<g>``)

A stall shows as flat fractions rising towards 1 for the tasks the model has learned (no signal left there), a spread
shrinking for all, or a training reward rising while the held-out one does not (no generalisation).
``python scripts/benchmark_learning.py --signal RUN_DIR`` prints it; every run writes it to report/signal.md.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

__all__ = ["read_metrics", "signal_table"]

#: the per-reward statistics among the reward/<a>/<b> keys (the others are the training reward per group value)
_STATS = ("mean", "std")


def read_metrics(run_dir) -> list[dict]:
    """The epochs' rows of ``<run_dir>/metrics.jsonl`` (a resumed run's later rows replace the earlier ones)."""
    rows: dict[int, dict] = {}
    path = Path(run_dir) / "metrics.jsonl"
    for line in path.read_text().splitlines() if path.is_file() else []:
        if line.strip():
            row = json.loads(line)
            rows[int(row.get("epoch", len(rows)))] = row
    return [rows[e] for e in sorted(rows)]


def _headline(row: dict) -> str | None:
    if "eval/task_mean/strict" in row:
        return "eval/task_mean/strict"
    counts = ("num_samples", "not_applicable")  # (counts, not metrics)
    return next(
        (
            k
            for k in row
            if k.startswith("eval/") and isinstance(row[k], (int, float)) and k.split("/")[1] not in counts
        ),
        None,
    )


def _cell(value) -> str:
    return "" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def signal_table(rows: list[dict]) -> str:
    """The module docstring's table, in markdown, one line per epoch; "" when the rows hold no advantage statistics."""
    rows = [r for r in rows if "adv/frac_zero_std" in r]
    if not rows:
        return ""
    per_group = [
        k for k in rows[-1] if k.startswith("reward/") and k.count("/") == 2 and k.rsplit("/", 1)[1] not in _STATS
    ]
    train = per_group[0].rsplit("/", 1)[0] if per_group else None  # reward/<field>: the training reward per group
    labels = sorted({k.rsplit("/", 1)[1] for k in per_group if k.startswith(f"{train}/")})
    headline = next((h for h in map(_headline, reversed(rows)) if h), None)
    head = ["epoch", "images", "flat", "spread", *(f"flat {g}" for g in labels)]
    head += [f"train {g}" for g in labels] if train else []
    metric = headline.rsplit("/", 1)[1] if headline else ""
    held = [g for g in labels if any(f"eval/{metric}/{g}" in r for r in rows)]
    head += [f"held-out ({headline})"] if headline else []
    head += [f"held-out {g}" for g in held]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    images = 0
    for r in rows:
        images = images + int(r["sample/images"]) if "sample/images" in r else int(r.get("progress/images_seen", 0))
        cells = [str(r["epoch"]), str(images or ""), _cell(r["adv/frac_zero_std"]), _cell(r.get("reward/group_std"))]
        cells += [_cell(r.get(f"adv/frac_flat/{g}")) for g in labels]  # (empty for runs older than the column)
        cells += [_cell(r.get(f"{train}/{g}")) for g in labels] if train else []
        cells += [_cell(r.get(headline))] if headline else []
        cells += [_cell(r.get(f"eval/{metric}/{g}")) for g in held]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
