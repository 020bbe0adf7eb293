"""The run report: what a run changed, in a plot, a picture and a table.

Written into `<run>/report/` by the trainer:
    before.safetensors, before.json   deterministic samples of fixed prompts and seeds, and the eval
                                      metrics, taken before the first update (kept for resumed runs)
    before_after.png                  those samples before (top row) and after training (bottom row)
    metrics.png                       reward and evaluation accuracy against epoch and images sampled
and `eval_table` prints the per-task accuracy before and after.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

TASK_ORDER = ("single_object", "counting", "two_object", "position")


def report_dir(run_dir) -> Path:
    path = Path(run_dir) / "report"
    path.mkdir(parents=True, exist_ok=True)
    return path


def save_before(run_dir, images, captions, metrics: dict) -> None:
    """Keep the pre-training samples [N, 3, H, W] and eval metrics (atomic writes)."""
    from safetensors.torch import save_file

    out = report_dir(run_dir)
    tmp = out / f".before-{os.getpid()}.safetensors"
    save_file({"images": images.contiguous().float().cpu()}, str(tmp))
    os.replace(tmp, out / "before.safetensors")
    tmp = out / f".before-{os.getpid()}.json"
    tmp.write_text(json.dumps({"captions": list(captions), "metrics": _jsonable(metrics)}, indent=2))
    os.replace(tmp, out / "before.json")


def load_before(run_dir):
    """(images, captions, metrics) saved by `save_before`, or None when the run has none."""
    out = Path(run_dir) / "report"
    if not (out / "before.safetensors").is_file() or not (out / "before.json").is_file():
        return None
    from safetensors.torch import load_file

    info = json.loads((out / "before.json").read_text())
    return load_file(str(out / "before.safetensors"))["images"], info["captions"], info["metrics"]


def save_before_after(run_dir, before, after, captions) -> Path:
    """Grid with the N samples before training on the top row and after training on the bottom row."""
    import torch

    from ddpo_grpo.evaluation import save_grid

    path = report_dir(run_dir) / "before_after.png"
    n = len(before)
    save_grid(torch.cat([before.float().cpu(), after.float().cpu()]), [f"before: {c}" for c in captions] +
              [f"after: {c}" for c in captions], path, nrow=n)
    return path


def eval_table(before: dict | None, after: dict) -> str:
    """Per-task strict / partial accuracy as aligned text: `after` alone, or `before` → `after`; the last
    row is the mean over tasks (eval/task_mean/*), the headline number."""
    tasks = [t for t in TASK_ORDER if f"eval/strict/{t}" in after]
    kinds = ("strict", "partial")
    head = ["task".ljust(14), "n".rjust(5)]
    head += [f"{k} before".rjust(14) + " " + "after".rjust(7) for k in kinds] if before is not None else [k.rjust(7) for k in kinds]
    lines = ["  ".join(head)]

    def row(label: str, n, key) -> str:  # key(kind) -> metrics key
        cells = [label.ljust(14), str(n).rjust(5)]
        for kind in kinds:
            a = _fmt(after.get(key(kind))).rjust(7)
            cells.append(_fmt(before.get(key(kind))).rjust(14) + " " + a if before is not None else a)
        return "  ".join(cells)

    for task in tasks:
        lines.append(row(task, after.get(f"eval/num_images/{task}", ""), lambda kind: f"eval/{kind}/{task}"))
    n = after.get("eval/num_images", "")
    if after.get("eval/not_applicable"):
        n = n - after["eval/not_applicable"]  # images the judge scored
    lines.append(row("all", n, lambda kind: f"eval/{kind}"))
    if "eval/task_mean/strict" in after:
        lines.append(row("task mean", len(tasks), lambda kind: f"eval/task_mean/{kind}")
                     + "   (mean over tasks, n = tasks: the headline number)")
    if after.get("eval/not_applicable"):
        lines.append(f"({after['eval/not_applicable']} images not applicable: prompts outside the ShapesWorld grammar)")
    return "\n".join(lines)


def plot_metrics(run_dir, before_metrics: dict | None = None) -> Path | None:
    """metrics.png: reward (mean ± std) and eval accuracy against epoch (left) and images sampled (right)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_eval = any(r.get("eval/strict") is not None for r in rows)
    fig, axes = plt.subplots(1 + has_eval, 2, figsize=(11, 4 + 3.5 * has_eval), squeeze=False)
    xs = {"epoch": [r["epoch"] for r in rows], "images sampled": [r.get("progress/images_seen", 0) for r in rows]}
    for col, (label, x) in enumerate(xs.items()):
        ax = axes[0][col]
        mean = [_num(r.get("reward/mean")) for r in rows]
        std = [_num(r.get("reward/std")) for r in rows]
        ax.plot(x, mean, label="reward/mean")
        ax.fill_between(x, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.2)
        ax.set_xlabel(label)
        ax.set_ylabel("reward")
        ax.grid(alpha=0.3)
        if has_eval:
            ax = axes[1][col]
            evals = [(xv, r) for xv, r in zip(x, rows) if r.get("eval/strict") is not None]
            if before_metrics and before_metrics.get("eval/strict") is not None:
                start = -1 if label == "epoch" else 0
                evals = [(start, before_metrics)] + evals
            for key in ["eval/task_mean/strict", "eval/task_mean/partial"] + [f"eval/strict/{t}" for t in TASK_ORDER]:
                points = [(xv, _num(r.get(key))) for xv, r in evals if r.get(key) is not None]
                if points:
                    style = "-" if key.startswith("eval/task_mean/") else ":"
                    ax.plot([p[0] for p in points], [p[1] for p in points], style, marker=".", label=key)
            ax.set_xlabel(label + (" (−1 = before training)" if label == "epoch" else " (0 = before training)"))
            ax.set_ylabel("held-out accuracy")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    out = report_dir(run_dir) / "metrics.png"
    tmp = out.with_name(f".metrics-{os.getpid()}.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, out)
    return out


def _num(value) -> float:
    return float("nan") if value is None else float(value)


def _fmt(value) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def _jsonable(metrics: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in metrics.items()}
