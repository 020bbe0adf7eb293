"""The run report of a language model: the fixed prompts' responses before and after training, as text.

``TextReport`` has the hooks' interface of ``report.RunReport`` (``before``, ``log_grid``, ``finish``,
``has_before``); what it writes under ``<run>/report/``:
    before.json        the untrained model's responses, captions (prompts), evaluation metrics and verdicts
    before_after.md    per prompt: the response before and after training, with the held-out scorers' verdicts
and under ``<run>/samples/`` every ``logging.image_freq`` epochs ``epoch_XXXXX.jsonl`` (``{"prompt", "response"}``).
The metrics plot and the evaluation table are the image report's (``RunReport.summarise``).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ddpo_grpo.report import RunReport, report_dir
from foundation.atomic_io import atomic_write_text


class TextReport(RunReport):
    """Responses in place of images (module docstring)."""

    def has_before(self) -> bool:
        return (self.run_dir / "report" / "before.json").is_file()

    def _responses(self, sample: Callable, verdicts: bool = True):
        """(responses, captions, {"<scorer> <metric>": per-response values}) of the fixed prompts (``_drawn``)."""
        responses, captions, found = self._drawn(sample, verdicts)
        return list(responses), [str(c) for c in captions], found

    def before(self, sample: Callable, eval_metrics: dict) -> None:
        responses, captions, verdicts = self._responses(sample)
        info = {"responses": responses, "captions": captions, "metrics": _plain(eval_metrics), "verdicts": verdicts}
        atomic_write_text(report_dir(self.run_dir) / "before.json", json.dumps(info, indent=2))

    def log_grid(self, sample: Callable, logger, *, epoch: int, global_step: int) -> None:
        responses, captions, _ = self._responses(sample, verdicts=False)
        lines = [json.dumps({"prompt": c, "response": r}) for c, r in zip(captions, responses)]
        out = self.run_dir / "samples" / f"epoch_{epoch:05d}.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, "\n".join(lines) + "\n")

    def finish(self, sample: Callable, last_metrics: dict) -> None:
        before_metrics = None
        path = report_dir(self.run_dir) / "before.json"
        if path.is_file():
            before = json.loads(path.read_text())
            before_metrics = before["metrics"]
            after, captions, verdicts = self._responses(sample)
            out = report_dir(self.run_dir) / "before_after.md"
            atomic_write_text(out, _markdown(captions, before, after, verdicts))
            print(f"before/after responses: {out}")
        self.summarise(before_metrics, last_metrics)


def _plain(metrics: dict) -> dict:
    return {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float))}


def _markdown(captions, before: dict, after: list[str], verdicts: dict) -> str:
    lines = ["# Responses before and after training", ""]
    for i, prompt in enumerate(captions):
        lines += [f"## {i + 1}. {prompt.strip()}", "", "before:", "", "```", before["responses"][i], "```", ""]
        lines += ["after:", "", "```", after[i], "```", ""]
        for name in verdicts:
            was = before.get("verdicts", {}).get(name, [None] * len(captions))[i]
            lines.append(f"- {name}: {was} → {verdicts[name][i]}")
        lines.append("")
    return "\n".join(lines)
