"""Markdown tables the worlds' measurement commands share."""

from __future__ import annotations


def agreement_table(table: dict[str, dict[str, dict[str, float]]]) -> str:
    """Markdown table of a judge's agreement study: rows = perturbations, columns = tasks, cells = ``pos / neg``
    (the fraction of positives judged strict 1 / of wrong prompts or hard negatives judged strict 0)."""
    tasks = list(next(iter(table.values())))
    lines = ["| perturbation | " + " | ".join(tasks) + " |", "|---" * (len(tasks) + 1) + "|"]
    for p, row in table.items():
        cells = [f"{row[t]['pos']:.3f} / {row[t]['neg']:.3f}" for t in tasks]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


__all__ = ["agreement_table"]
