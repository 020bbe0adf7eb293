"""Paired comparisons: the difference between two models scored on the same prompts and the same noise.

    paired(before, after)                         -> Paired       one set of pairs
    paired_by_group(before, after, groups)        -> {group: Paired, ..., MEAN: Paired}
    format_paired(table, name)                    -> str          a printable table

When two models draw sample ``i`` from the same prompt and the same initial noise (``scripts/evaluate.py
--compare``, the run's before → after), the per-sample differences ``d_i = a_i − b_i`` (``a`` = after, ``b`` =
before) carry the comparison; what the two samples share (an easy prompt, a lucky noise) cancels out of ``d_i``.

Estimators (``n`` pairs whose two values are both finite; NaN = "not applicable" drops the pair):

1. mean difference ``d̄ = (1/n) Σ d_i`` (= mean(a) − mean(b) over the kept pairs);
2. its standard error ``SE = s_d / √n``, with ``s_d² = Σ (d_i − d̄)² / (n − 1)`` the sample variance of the
   differences (undefined, NaN, for ``n < 2``). For 0/1 scores (a strict judge) ``d_i ∈ {−1, 0, 1}`` and
   ``s_d² ≈ p_up + p_down − (p_up − p_down)²``: only the discordant pairs (``up``: b = 0, a = 1; ``down``: the
   reverse) add variance, which is why pairing is so much tighter than comparing two independent means;
3. the 95 % interval ``d̄ ± z·SE`` with ``z = 1.96`` (normal approximation; at the n >= 48 per group used here
   Student's t quantile is at most 2.5 % wider: 2.01 at n = 48);
4. the **mean over groups** (GenEval's "overall", ``eval/task_mean/...``) ``D = (1/G) Σ_g d̄_g`` of the G
   groups' mean differences, with ``SE_D = √(Σ_g SE_g²) / G``: the groups are disjoint sets of samples, so
   their means are independent and the variances of the terms add.

No world is imported here: values are any per-sample numbers, groups any hashable labels.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

#: the two-sided 95 % normal quantile
Z95 = 1.959963984540054
#: the key of the mean over groups in :func:`paired_by_group`'s result
MEAN = "mean over groups"


@dataclass(frozen=True)
class Paired:
    """A paired comparison (module docstring): ``n`` pairs, the two means over them, the mean difference
    ``diff = after − before`` with its standard error ``se`` and interval ``[low, high]``, the number of
    pairs that went ``up`` (after > before) and ``down``, and ``fraction``: whether every value was 0 or 1 (or −1,
    a difference of two such), so that the means are fractions (pass rates), shown ×100 as percentage points."""

    n: int
    before: float
    after: float
    diff: float
    se: float
    low: float
    high: float
    up: int
    down: int
    fraction: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def clear_of_zero(self) -> bool:
        """Whether the interval excludes 0 (False when it is undefined)."""
        return bool(self.low > 0 or self.high < 0)


def _finite_pairs(before: Sequence[float], after: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    b = np.asarray(before, dtype=np.float64)
    a = np.asarray(after, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired: before and after must be 1-d of the same length, got {b.shape} and {a.shape}")
    keep = np.isfinite(a) & np.isfinite(b)
    return b[keep], a[keep]


def paired(before: Sequence[float], after: Sequence[float], z: float = Z95) -> Paired:
    """The paired comparison of per-sample values ``before[i]`` and ``after[i]`` (same prompt and noise)."""
    b, a = _finite_pairs(before, after)
    n = len(a)
    if n == 0:
        nan = math.nan
        return Paired(0, nan, nan, nan, nan, nan, nan, 0, 0, False)
    d = a - b
    diff = float(d.mean())
    se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    return Paired(
        n=n,
        before=float(b.mean()),
        after=float(a.mean()),
        diff=diff,
        se=se,
        low=diff - z * se,
        high=diff + z * se,
        up=int((d > 0).sum()),
        down=int((d < 0).sum()),
        fraction=bool(np.isin(np.concatenate([a, b]), (-1.0, 0.0, 1.0)).all()),
    )


def mean_over_groups(parts: Sequence[Paired], z: float = Z95) -> Paired:
    """The unweighted mean over groups (step 4 of the module docstring) of the groups' comparisons."""
    parts = [p for p in parts if p.n > 0]
    if not parts:
        return paired([], [], z)
    g = len(parts)
    diff = sum(p.diff for p in parts) / g
    se = math.sqrt(sum(p.se**2 for p in parts)) / g
    return Paired(
        n=sum(p.n for p in parts),
        before=sum(p.before for p in parts) / g,
        after=sum(p.after for p in parts) / g,
        diff=diff,
        se=se,
        low=diff - z * se,
        high=diff + z * se,
        up=sum(p.up for p in parts),
        down=sum(p.down for p in parts),
        fraction=all(p.fraction for p in parts),
    )


def paired_by_group(
    before: Sequence[float], after: Sequence[float], groups: Sequence[Hashable], z: float = Z95
) -> dict:
    """``{group: Paired}`` for every group label (in order of first appearance; None = no group, left out of the
    groups but not of ``""``), plus ``""``: all pairs pooled, and :data:`MEAN`: the mean over the groups."""
    b = np.asarray(before, dtype=np.float64)
    a = np.asarray(after, dtype=np.float64)
    if not (len(b) == len(a) == len(groups)):
        raise ValueError(f"paired_by_group: {len(b)} before, {len(a)} after and {len(groups)} group labels")
    out: dict = {}
    for label in dict.fromkeys(g for g in groups if g is not None):
        idx = [i for i, g in enumerate(groups) if g == label]
        out[label] = paired(b[idx], a[idx], z)
    out[""] = paired(b, a, z)
    out[MEAN] = mean_over_groups([out[k] for k in out if k != ""], z)
    return out


def paired_tables(before: dict, after: dict, groups: Sequence[Hashable], z: float = Z95) -> dict:
    """``{metric: paired_by_group(before[metric], after[metric], groups)}`` for every metric in both per-sample
    value dicts (e.g. a reward's strict and partial)."""
    return {m: paired_by_group(before[m], after[m], groups, z) for m in after if m in before}


def format_paired(
    table: dict, name: str = "", scale: float | None = None, unit: str | None = None, labels=("before", "after")
) -> str:
    """A printable table of :func:`paired_by_group`'s result. Differences are shown ×``scale`` in ``unit``; by
    default ×100 in percentage points when every group's values are fractions (0/1 pass rates, ``Paired.fraction``)
    and in the values' own units otherwise (a redness, a distance in metres). ``labels``: the names of the two
    columns compared, (before, after) of the pairs; the difference is the second minus the first."""
    points = all(p.fraction for p in table.values() if p.n > 0)
    scale = scale if scale is not None else (100.0 if points else 1.0)
    unit = unit or ("points" if scale == 100.0 else "the values' own units")
    first, second = (str(x) for x in labels)
    wa, wb = max(7, len(first)), max(7, len(second))

    def num(v: float) -> str:
        return f"{scale * v:+7.1f}" if scale == 100.0 else f"{scale * v:+7.3g}"

    head = f"paired difference{f' ({name})' if name else ''}, {second} − {first}, in {unit}:"
    lines = [
        head,
        f"  {'group':<18} {'n':>5} {first:>{wa}} {second:>{wb}} {'diff':>7} {'SE':>7}  {'95% interval':<17} up/down",
    ]
    for label, p in table.items():
        shown = "all" if label == "" else str(label)
        se = f"{scale * p.se:7.1f}" if scale == 100.0 else f"{scale * p.se:7.3g}"
        lines.append(
            f"  {shown:<18} {p.n:>5} {p.before:{wa}.3f} {p.after:{wb}.3f} {num(p.diff)} {se}  "
            f"[{num(p.low)}, {num(p.high)}]  {p.up}/{p.down}"
        )
    return "\n".join(lines)


__all__ = [
    "MEAN",
    "Z95",
    "Paired",
    "format_paired",
    "mean_over_groups",
    "paired",
    "paired_by_group",
    "paired_tables",
]
