"""Paired comparisons of an evaluation's scorers (``ddpo_grpo.evaluation.Scorers``), as ``scripts/evaluate.py``
reports them: a model against a base on the same prompts and noises, and one scorer against another on the same
samples; and their JSON form. The statistics are ``ddpo_grpo/paired.py``'s."""

from __future__ import annotations

from ddpo_grpo.evaluation import Scorers
from ddpo_grpo.paired import MEAN, format_paired, paired_tables


def model_against_base(base: Scorers, model: Scorers) -> dict:
    """``{reward: {metric: paired table}}``: every scorer's per-sample values of ``model`` paired with ``base``'s."""
    return {n: paired_tables(base.values(n), model.values(n), model.scored[n].groups) for n in model.scored}


def between_scorers(scorers: Scorers, names: list[str], base: Scorers | None = None) -> dict:
    """``{other: {metric: paired table}}``: the first scorer against every other on the same images, as paired
    comparisons (``before`` = the other scorer, ``after`` = the first; up/down = images only the first / only
    the other scores higher). With ``base`` (the compared model's Scorers), the same of the per-image *gains*
    model − base: whether the two scorers measure the same gain within its noise."""
    first, groups = names[0], scorers.scored[names[0]].groups
    out = {}
    for other in names[1:]:
        a, b = scorers.values(first), scorers.values(other)
        if base is not None:
            a0, b0 = base.values(first), base.values(other)
            a = {m: [x - y for x, y in zip(a[m], a0[m])] for m in a if m in a0}
            b = {m: [x - y for x, y in zip(b[m], b0[m])] for m in b if m in b0}
        out[other] = paired_tables(b, a, groups)
    return out


def format_between(table: dict, metric: str, first: str, other: str, gains: bool = False) -> str:
    """A printable :func:`between_scorers` table: its columns named by the two scorers (``other``, ``first``) and
    the difference ``first − other`` on the same images (with ``gains``: of their per-image gains over the base),
    never "before" / "after", which would read as two models."""
    what = f"{metric}, {first} − {other} on the same images" + (": their gains over the base" if gains else "")
    return format_paired(table, what, labels=(other, first))


def paired_json(tables: dict, group_by: str) -> dict:
    """``{name: {metric: {group: Paired}}}`` as JSON: groups by label, "all" for the whole set and
    ``<group_by>_mean`` for the mean over groups."""

    def key(label):
        return "all" if label == "" else (f"{group_by}_mean" if label == MEAN else str(label))

    return {n: {m: {key(g): p.to_dict() for g, p in t.items()} for m, t in by_m.items()} for n, by_m in tables.items()}


def without_metrics(metrics: dict, names) -> dict:
    """``metrics`` (eval/<m>, eval/<m>/<group>, eval/<group_by>_mean/<m>) without the metrics ``names``."""

    def metric(key: str) -> str:
        parts = key.split("/")
        return parts[-1] if len(parts) == 3 and parts[1].endswith("_mean") else parts[1] if len(parts) > 1 else key

    return {k: v for k, v in metrics.items() if metric(k) not in names}
