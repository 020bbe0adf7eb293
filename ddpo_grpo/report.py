"""The run report: what a run changed, in a picture, a plot and a table; world-agnostic.

``RunReport`` is the trainer's report hook. It is handed a sampling callable (the trainer's deterministic
sampler), never the trainer, and writes into ``<run>/report/``:
    before.safetensors, before.json   deterministic samples of fixed prompts and seeds (as images), and the
                                      evaluation metrics, taken before the first update (kept for resumed runs)
    before_after.png                  those prompts before (top row) and after training (bottom row), captioned with
                                      their prompts and groups (e.g. the ShapesWorld task) and, under each, every
                                      held-out scorer's verdict before → after (its first metric); the prompts
                                      cover every group in turn (``pick_rows``)
    metrics.png                       the training reward (mean in its ±std band, per group), the paired probe and the
                                      held-out evaluation against epoch (``figures.plot_metrics``)
    signal.md                         the learning signal per epoch: flat groups, reward spread, per group
                                      (``signal_table.signal_table``)
and prints the evaluation table, before → after, per group (``eval_table``). The sample grids of
logging.image_freq go through it too (``log_grid``).

Images come from the policy's ``preview(samples)`` (the samples themselves for image families, a
rendering for others), so the same code serves every model family.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from ddpo_grpo.signal_table import read_metrics, signal_table
from foundation.atomic_io import atomic_write_text, replacing

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

    def __init__(self, run_dir, rows: Sequence[dict], preview: Callable, group_by: str = "", scorers=None):
        self.run_dir, self.rows, self.preview, self.group_by = Path(run_dir), list(rows), preview, group_by
        self.scorers = dict(scorers or {})  # the held-out scorers (name -> reward fn) whose verdicts caption the grid

    def has_before(self) -> bool:
        """Whether ``finish`` will draw the after-training samples (it does when ``before`` saved the untrained ones)."""
        return (self.run_dir / "report" / "before.safetensors").is_file()

    def _drawn(self, sample: Callable, verdicts: bool = False):
        """(samples, captions, verdicts) of the fixed prompts; with ``verdicts`` also ``{"<scorer> <metric>": per-sample
        values}`` of every held-out scorer's first metric (else {})."""
        from ddpo_grpo.evaluation import Scorers
        from ddpo_grpo.figures import first_scores

        scorers = Scorers(self.scorers, self.group_by) if verdicts and self.scorers else None
        _, samples, captions = sample(self.rows, scorers) if scorers is not None else sample(self.rows)
        return samples, captions, first_scores(scorers) if scorers is not None else {}

    def _images(self, sample: Callable, verdicts: bool = False):
        """The fixed prompts' previews and captions: the prompt, and its group (e.g. "[position]") when rows carry one;
        with ``verdicts`` also the held-out scorers' verdicts (``_drawn``)."""
        samples, captions, found = self._drawn(sample, verdicts)
        if self.group_by:
            captions = [f"{c} [{r[self.group_by]}]" if r.get(self.group_by) else c for c, r in zip(captions, self.rows)]
        return (self.preview(samples), captions, found) if verdicts else (self.preview(samples), captions)

    def summarise(self, before_metrics: dict | None, last_metrics: dict) -> None:
        """metrics.png and the evaluation table before → after (printed): the end of every report."""
        plot = plot_metrics(self.run_dir, before_metrics, self.group_by)
        if plot is not None:
            print(f"reward and evaluation plot: {plot}")
        signal = signal_table(read_metrics(self.run_dir))
        if signal:
            atomic_write_text(report_dir(self.run_dir) / "signal.md", signal)
            print(f"learning signal per epoch (flat groups, reward spread): {report_dir(self.run_dir) / 'signal.md'}")
        if metric_names(last_metrics):
            print("held-out evaluation, before → after training:")
            print(eval_table(before_metrics, last_metrics, self.group_by), flush=True)

    def before(self, sample: Callable, eval_metrics: dict) -> None:
        """Keep the untrained model's samples and evaluation metrics (atomic writes)."""
        from safetensors.torch import save_file

        images, captions, verdicts = self._images(sample, verdicts=True)
        out = report_dir(self.run_dir)
        with replacing(out / "before.safetensors") as tmp:
            save_file({"images": images.contiguous().float().cpu()}, str(tmp))
        info = {"captions": list(captions), "metrics": _jsonable(eval_metrics), "verdicts": verdicts}
        atomic_write_text(out / "before.json", json.dumps(info, indent=2))

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
            after, _, after_verdicts = self._images(sample, verdicts=True)
            notes = verdict_lines(load_verdicts(self.run_dir), after_verdicts, len(captions))
            print(f"before/after samples: {save_before_after(self.run_dir, images, after, captions, notes)}")
        self.summarise(before_metrics, last_metrics)


def load_before(run_dir):
    """(images, captions, metrics) saved by ``RunReport.before``, or None when the run has none."""
    out = Path(run_dir) / "report"
    if not (out / "before.safetensors").is_file() or not (out / "before.json").is_file():
        return None
    from safetensors.torch import load_file

    info = json.loads((out / "before.json").read_text())
    return load_file(str(out / "before.safetensors"))["images"], info["captions"], info["metrics"]


def load_verdicts(run_dir) -> dict:
    """The untrained model's verdicts saved by ``RunReport.before`` ({} for runs that saved none)."""
    path = Path(run_dir) / "report" / "before.json"
    return json.loads(path.read_text()).get("verdicts", {}) if path.is_file() else {}


def verdict_lines(before: dict, after: dict, n: int) -> list[list[tuple[str, str]]]:
    """Per image, one (text, colour) line per scorer seen before and after: "<before> -> <after> <scorer> <metric>"
    (the verdict first, so a wrapped scorer name never hides it; ASCII, which every font draws), green when the
    score rose, red when it fell, blue when it held."""

    def fmt(v) -> str:
        return "n/a" if v is None else f"{v:.3g}"

    def colour(b, a) -> str:
        return "#1f5fa8" if a is None or b is None or a == b else "#18803a" if a > b else "#b8312f"

    keys = [k for k in after if k in before]
    return [
        [(f"{fmt(before[k][j])} -> {fmt(after[k][j])} {k}", colour(before[k][j], after[k][j])) for k in keys]
        for j in range(n)
    ]


def pick_rows(rows: Sequence[dict], n: int, group_by: str = "") -> list[dict]:
    """``n`` rows for the report's pictures: with ``group_by`` and rows that carry it, each group's first row in
    turn (groups in order of first appearance), then each one's second, …, so every group shows; otherwise the
    first ``n`` rows (cycled when there are fewer)."""
    rows = list(rows)
    if not rows or n <= 0:
        return []
    by_group: dict = {}
    for r in rows:
        by_group.setdefault(r.get(group_by) if group_by else None, []).append(r)
    if len(by_group) < 2:
        return [rows[i % len(rows)] for i in range(n)]
    queues = list(by_group.values())
    picked, depth = [], 0
    while len(picked) < n:
        picked += [q[depth % len(q)] for q in queues if depth < len(q) or depth >= max(map(len, queues))]
        depth += 1
    return picked[:n]


def save_before_after(run_dir, before, after, captions, notes=None) -> Path:
    """before_after.png: the N samples before training (top row) and after (bottom row), each column captioned
    with its prompt and, under it, ``notes[j]`` (the held-out scorers' verdicts, ``verdict_lines``)."""
    from ddpo_grpo.figures import captioned_grid

    rows = [before.float().cpu(), after.float().cpu()]
    return captioned_grid(rows, ["before", "after"], captions, report_dir(run_dir) / "before_after.png", notes=notes)


def metric_names(metrics: dict, prefix: str = "eval") -> list[str]:
    """The evaluated metrics m of <prefix>/<m> keys (e.g. strict, partial), in key order; ``prefix`` "eval" is the
    headline scorer's, "eval.<name>" another scorer's (ddpo_grpo/heldout.py)."""
    return [
        k.split("/")[1]
        for k in metrics
        if k.count("/") == 1 and k.startswith(f"{prefix}/") and k.split("/")[1] not in _COUNTS
    ]


def scorer_prefixes(metrics: dict) -> list[str]:
    """The key prefixes of the scorers in ``metrics``: "eval" (the headline scorer), then every "eval.<name>"."""
    found = dict.fromkeys(k.split("/")[0] for k in metrics if k.startswith("eval.") and "/" in k)
    return (["eval"] if metric_names(metrics) else []) + list(found)


def groups_of(metrics: dict) -> list[str]:
    """The groups of eval/num_samples/<group> keys, in key order."""
    return [k.split("/", 2)[2] for k in metrics if k.startswith("eval/num_samples/")]


def group_mean_key(metrics: dict, name: str, prefix: str = "eval") -> str | None:
    """The <prefix>/<group_by>_mean/<name> key present in ``metrics``, if any."""
    pattern = re.compile(rf"^{re.escape(prefix)}/[^/]+_mean/{re.escape(name)}$")
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


def plot_metrics(run_dir, before_metrics: dict | None = None, group_by: str = "") -> Path | None:
    """report/metrics.png of the run's metrics.jsonl (``figures.plot_metrics``); None when nothing was logged."""
    from ddpo_grpo.figures import plot_metrics as draw

    rows = read_metrics(run_dir)
    if not rows:
        return None
    evaluated = [r for r in rows if metric_names(r)]
    last = evaluated[-1] if evaluated else {}
    names = metric_names(last)
    headline = [group_mean_key(last, m) or f"eval/{m}" for m in names]
    for prefix in scorer_prefixes(last)[1:]:  # every other scorer's first metric (the training reward's included)
        first = metric_names(last, prefix)[:1]
        headline += [group_mean_key(last, m, prefix) or f"{prefix}/{m}" for m in first]
    groups = [f"eval/{names[0]}/{g}" for g in groups_of(last)] if names else []
    paired = sorted({k.rsplit("/", 1)[0] for r in rows for k in r if k.startswith("paired/") and k.count("/") == 3})
    out = report_dir(run_dir) / "metrics.png"
    return draw(rows, out, before=before_metrics, headline=headline, groups=groups, group_by=group_by, paired=paired)


def _fmt(value) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def _jsonable(metrics: dict) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in metrics.items()}
