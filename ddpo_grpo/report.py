"""The run report: what a run changed, in a picture, a plot and a table; world-agnostic.

``RunReport`` is the trainer's report hook. It is handed a sampling callable (the trainer's deterministic
sampler), never the trainer, and writes into ``<run>/report/``:
    before.safetensors, before.json   deterministic samples of fixed prompts and seeds (as images), and the
                                      evaluation metrics, taken before the first update (kept for resumed runs)
    before_after.png                  those prompts before (top row) and after training (bottom row)
    metrics.png                       reward and evaluation metrics against epoch and samples drawn
and prints the evaluation table, before → after, per group (``eval_table``). The sample grids of
logging.image_freq go through it too (``log_grid``).

Images come from the policy's ``preview(samples)`` (the samples themselves for image families, a
rendering for others), so the same code serves every model family.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path

#: keys of evaluation metrics that are counts, not metrics
_COUNTS = ("num_samples", "not_applicable")


def report_dir(run_dir) -> Path:
    path = Path(run_dir) / "report"
    path.mkdir(parents=True, exist_ok=True)
    return path


class RunReport:
    """Before / after samples, plots and tables of a run (main process only).

    rows: the fixed prompt rows of the pictures; preview: samples -> float images [N, 3, H, W] in [0, 1].
    A ``sample`` argument is a callable ``sample(rows, reward=None) -> (metrics, samples, captions)`` drawing
    deterministic samples of ``rows`` (ddpo_grpo.evaluation.evaluate with the run's settings bound).
    """

    def __init__(self, run_dir, rows: Sequence[dict], preview: Callable, group_by: str = ""):
        self.run_dir, self.rows, self.preview, self.group_by = Path(run_dir), list(rows), preview, group_by

    def _images(self, sample: Callable):
        _, samples, captions = sample(self.rows)
        return self.preview(samples), captions

    def before(self, sample: Callable, eval_metrics: dict) -> None:
        """Keep the untrained model's samples and evaluation metrics (atomic writes)."""
        from safetensors.torch import save_file

        images, captions = self._images(sample)
        out = report_dir(self.run_dir)
        tmp = out / f".before-{os.getpid()}.safetensors"
        save_file({"images": images.contiguous().float().cpu()}, str(tmp))
        os.replace(tmp, out / "before.safetensors")
        tmp = out / f".before-{os.getpid()}.json"
        tmp.write_text(json.dumps({"captions": list(captions), "metrics": _jsonable(eval_metrics)}, indent=2))
        os.replace(tmp, out / "before.json")

    def log_grid(self, sample: Callable, logger, *, epoch: int, global_step: int) -> None:
        """A grid of the fixed prompts' samples into samples/epoch_XXXXX.png and the tracker."""
        images, captions = self._images(sample)
        logger.log_images(images, captions, epoch=epoch, global_step=global_step)

    def finish(self, sample: Callable, last_metrics: dict) -> None:
        """before_after.png, metrics.png and the evaluation table before → after (printed)."""
        before = load_before(self.run_dir)
        before_metrics = None
        if before is not None:
            images, captions, before_metrics = before
            after, _ = self._images(sample)
            print(f"before/after samples: {save_before_after(self.run_dir, images, after, captions)}")
        plot = plot_metrics(self.run_dir, before_metrics)
        if plot is not None:
            print(f"reward and evaluation plot: {plot}")
        if metric_names(last_metrics):
            print("held-out evaluation, before → after training:")
            print(eval_table(before_metrics, last_metrics, self.group_by), flush=True)


def load_before(run_dir):
    """(images, captions, metrics) saved by ``RunReport.before``, or None when the run has none."""
    out = Path(run_dir) / "report"
    if not (out / "before.safetensors").is_file() or not (out / "before.json").is_file():
        return None
    from safetensors.torch import load_file

    info = json.loads((out / "before.json").read_text())
    return load_file(str(out / "before.safetensors"))["images"], info["captions"], info["metrics"]


def save_before_after(run_dir, before, after, captions) -> Path:
    """Grid with the N samples before training on the top row and after training on the bottom row."""
    import torch

    from ddpo_grpo.logging_utils import save_grid

    path = report_dir(run_dir) / "before_after.png"
    captions = [f"before: {c}" for c in captions] + [f"after: {c}" for c in captions]
    save_grid(torch.cat([before.float().cpu(), after.float().cpu()]), captions, path, nrow=len(before))
    return path


def metric_names(metrics: dict) -> list[str]:
    """The evaluated metrics m of eval/<m> keys (e.g. strict, partial), in key order."""
    return [
        k.split("/")[1]
        for k in metrics
        if k.count("/") == 1 and k.startswith("eval/") and k.split("/")[1] not in _COUNTS
    ]


def groups_of(metrics: dict) -> list[str]:
    """The groups of eval/num_samples/<group> keys, in key order."""
    return [k.split("/", 2)[2] for k in metrics if k.startswith("eval/num_samples/")]


def group_mean_key(metrics: dict, name: str) -> str | None:
    """The eval/<group_by>_mean/<name> key present in ``metrics``, if any."""
    pattern = re.compile(rf"^eval/[^/]+_mean/{re.escape(name)}$")
    return next((k for k in metrics if pattern.match(k)), None)


def eval_table(before: dict | None, after: dict, group_by: str = "") -> str:
    """Evaluation metrics per group as aligned text: ``after`` alone, or ``before`` → ``after``; the last row is
    the mean over groups (eval/<group_by>_mean/*), the headline number when groups are unbalanced."""
    names, groups = metric_names(after), groups_of(after)
    label = (group_by or "group")[:14]
    head = [label.ljust(14), "n".rjust(5)]
    if before is not None:
        head += [f"{m} before".rjust(14) + " " + "after".rjust(7) for m in names]
    else:
        head += [m.rjust(7) for m in names]
    lines = ["  ".join(head)]

    def row(text: str, n, key: Callable[[str], str | None]) -> str:
        cells = [text.ljust(14), str(n).rjust(5)]
        for m in names:
            a = _fmt(after.get(key(m))).rjust(7)
            cells.append(_fmt(before.get(key(m))).rjust(14) + " " + a if before is not None else a)
        return "  ".join(cells)

    for g in groups:
        lines.append(row(g, after.get(f"eval/num_samples/{g}", ""), lambda m, g=g: f"eval/{m}/{g}"))
    n = after.get("eval/num_samples", 0) - after.get("eval/not_applicable", 0)
    lines.append(row("all", n, lambda m: f"eval/{m}"))
    if names and group_mean_key(after, names[0]):
        lines.append(
            row(f"{label} mean"[:14], len(groups), lambda m: group_mean_key(after, m))
            + f"   (mean over {label}s, n = {label}s: the headline number)"
        )
    if after.get("eval/not_applicable"):
        lines.append(
            f"({after['eval/not_applicable']} samples not applicable: the evaluation reward gave them no score)"
        )
    return "\n".join(lines)


def plot_metrics(run_dir, before_metrics: dict | None = None) -> Path | None:
    """metrics.png: reward (mean ± std) and evaluation metrics against epoch (left) and samples drawn (right)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    evaluated = [r for r in rows if metric_names(r)]
    has_eval, has_probe = bool(evaluated), any(r.get("probe/diff") is not None for r in rows)
    panels = 1 + has_probe + has_eval
    fig, axes = plt.subplots(panels, 2, figsize=(11, 4 + 3.5 * (panels - 1)), squeeze=False)
    xs = {"epoch": [r["epoch"] for r in rows], "samples drawn": [r.get("progress/images_seen", 0) for r in rows]}
    for col, (label, x) in enumerate(xs.items()):
        ax = axes[0][col]
        mean = [_num(r.get("reward/mean")) for r in rows]
        std = [_num(r.get("reward/std")) for r in rows]
        ax.plot(x, mean, label="reward/mean")
        ax.fill_between(x, [m - s for m, s in zip(mean, std)], [m + s for m, s in zip(mean, std)], alpha=0.2)
        ax.set_xlabel(label)
        ax.set_ylabel("reward")
        ax.grid(alpha=0.3)
        if has_probe:
            _plot_probe(axes[1][col], label, x, rows)
        if has_eval:
            _plot_eval(axes[1 + has_probe][col], label, x, rows, evaluated[-1], before_metrics)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    out = report_dir(run_dir) / "metrics.png"
    tmp = out.with_name(f".metrics-{os.getpid()}.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, out)
    return out


def _plot_probe(ax, label: str, x: list, rows: list[dict]) -> None:
    """The paired probe's reward gain over the untrained model, ± 2 standard errors (ddpo_grpo/probe.py)."""
    points = [
        (xv, r["probe/diff"], r.get("probe/diff_se") or 0.0)
        for xv, r in zip(x, rows)
        if r.get("probe/diff") is not None
    ]
    xs, ds, ses = zip(*points)
    ax.plot(xs, ds, marker=".", label="probe/diff")
    ax.fill_between(
        xs, [d - 2 * e for d, e in zip(ds, ses)], [d + 2 * e for d, e in zip(ds, ses)], alpha=0.2, label="± 2 SE"
    )
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xlabel(label)
    ax.set_ylabel("paired reward gain")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _plot_eval(ax, label: str, x: list, rows: list[dict], last: dict, before: dict | None) -> None:
    """Group means of every metric (solid) and the first metric per group (dotted)."""
    evals = [(xv, r) for xv, r in zip(x, rows) if metric_names(r)]
    if before and metric_names(before):
        evals = [(-1 if label == "epoch" else 0, before)] + evals
    names = metric_names(last)
    keys = [group_mean_key(last, m) or f"eval/{m}" for m in names]
    keys += [f"eval/{names[0]}/{g}" for g in groups_of(last)] if names else []
    for key in keys:
        points = [(xv, _num(r.get(key))) for xv, r in evals if r.get(key) is not None]
        if points:
            style = ":" if key.count("/") == 2 and "_mean/" not in key else "-"
            ax.plot([p[0] for p in points], [p[1] for p in points], style, marker=".", label=key)
    ax.set_xlabel(label + (" (−1 = before training)" if label == "epoch" else " (0 = before training)"))
    ax.set_ylabel("held-out evaluation")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _num(value) -> float:
    return float("nan") if value is None else float(value)


def _fmt(value) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def _jsonable(metrics: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in metrics.items()}
