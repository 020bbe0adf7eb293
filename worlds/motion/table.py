"""The numbers text-to-motion papers print, with standard errors: the HumanML3D-style table of an evaluation.

One row per metric, each ``value ± SE``; with a base model, ``base``, ``model`` and the difference
``model − base`` with its SE. Three blocks:

1. **Set metrics** of the text–motion evaluator (:mod:`worlds.motion.evaluator`, Guo et al. 2022's protocol
   on this world's evaluator): R-precision top-1/2/3, FID, MM-Dist (mean motion–text embedding distance),
   Diversity (300 random pairs; the real reference's value beside it), MultiModality (10 random pairs of
   motions of the same prompt, averaged over prompts). Their SE is a **cluster bootstrap over prompts**:
   ``B`` = :data:`BOOTSTRAP` replicates, each drawing the set's distinct prompts with replacement and taking
   every motion (and its real reference clip) of each drawn prompt; SE = the standard deviation of the
   replicates' values (ddof 1). Prompts, not motions, are resampled because motions of one prompt are
   correlated, and a prompt drawn twice gets fresh labels in its replicate so that MultiModality pairs
   never match a motion with its own copy (R-precision counts only strictly closer prompts, so a copy
   ties, and costs nothing). Papers instead repeat the whole evaluation 20 times with new samples and
   print a 95 % interval; the bootstrap gives the same kind of sampling error from one set. With a base
   evaluated on the same prompts and noises, each replicate draws the same prompts for both models, so the
   difference's SE is the spread of paired replicate differences.
2. **Judge** (the world's rule-based judge: strict and partial per task, and their unweighted mean over
   tasks, the headline): SE of a group = ``s / √n`` over its samples; of the mean over tasks
   ``√(Σ SE_g²) / G``; differences are paired per sample (:mod:`ddpo_grpo.paired`).
3. **Physics** (:mod:`worlds.motion.physics`, all samples pooled): skate (m/s), worst-foot penetration (m),
   mean penetration below −2 cm (m), floating (m), jerk (m²/s⁶), bone-length CV per bone group and the
   worst bone, the sane-body fraction, and the default physics score; SE ``s / √n``, differences paired.

:func:`motion_table` builds it (a JSON-able dict, ``scripts/evaluate.py`` writes it to eval.json's
``"table"``), :func:`format_table` prints it. ``python -m worlds.motion table DIR [--compare BASE_DIR]``
builds it from ``scripts/sample.py`` output directories (motion files read by
:func:`worlds.motion.files.read_samples`, so a bad file is refused in one line).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .physics import BONE_GROUPS

#: bootstrap replicates of the set metrics' standard errors
BOOTSTRAP = 200
#: (key in the set metrics, label, better: "high" / "low" / "real" = closer to the reference's diversity)
SET_ROWS = (
    ("r_precision_top1", "R-precision top-1", "high"),
    ("r_precision_top2", "R-precision top-2", "high"),
    ("r_precision_top3", "R-precision top-3", "high"),
    ("fid", "FID", "low"),
    ("mm_dist", "MM-Dist", "low"),
    ("diversity", "Diversity", "real"),
    ("multimodality", "MultiModality", "high"),
)
#: judge metrics (per task and their mean over tasks)
JUDGE_ROWS = (("strict", "high"), ("partial", "high"))
#: physics rows: (per-sample key, label, better)
PHYSICS_ROWS = (
    ("skate", "skate (m/s)", "low"),
    ("max_penetration", "penetration, worst foot (m)", "low"),
    ("penetration", "penetration below -2 cm, mean (m)", "low"),
    ("floating", "floating (m)", "low"),
    ("jerk", "jerk (m²/s⁶)", "low"),
    *((f"bone_cv_{g}", f"bone-length CV, {g}", "low") for g in BONE_GROUPS),
    ("bone_cv_max", "bone-length CV, worst bone", "low"),
    ("sane", "sane bodies (fraction)", "high"),
    ("physics", "physics score", "high"),
)
_ARROW = {"high": "↑", "low": "↓", "real": "→"}


def _cell(value: float, se: float, **extra) -> dict:
    return {"value": float(value), "se": float(se), **extra}


def _mean_se(x: np.ndarray) -> tuple[float, float, int]:
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return math.nan, math.nan, 0
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan, n


def _clusters(texts: Sequence[str]) -> list[np.ndarray]:
    names = np.asarray(texts, dtype=object)
    return [np.flatnonzero(names == t) for t in sorted(set(texts))]


def _replicate(clusters: list[np.ndarray], rng: np.random.Generator) -> tuple[np.ndarray, list[str]]:
    """One bootstrap draw: the indices of every motion of the drawn prompts, and fresh labels per draw."""
    drawn = rng.integers(0, len(clusters), len(clusters))
    idx = np.concatenate([clusters[c] for c in drawn])
    labels = [f"{k}" for k, c in enumerate(drawn) for _ in clusters[c]]
    return idx, labels


def set_block(
    emb: dict[str, tuple[np.ndarray, np.ndarray]],
    reference: np.ndarray,
    texts: Sequence[str],
    *,
    boot: int = BOOTSTRAP,
    seed: int = 0,
) -> dict[str, dict[str, dict]]:
    """``{metric: {side: cell}}`` of the set metrics with bootstrap SEs (module docstring, step 1).

    ``emb``: side name ("model", "base") -> (motion embeddings [N, D], text embeddings [N, D]) on the same
    ``texts`` (and the same real ``reference`` clips [N, D]); with two sides a "diff" cell (model − base).
    """
    from .evaluator import embedding_metrics

    keys = [k for k, _, _ in SET_ROWS]
    point = {s: embedding_metrics(m, t, reference, texts, seed=seed) for s, (m, t) in emb.items()}
    clusters, rng = _clusters(texts), np.random.default_rng(seed)
    reps: dict[str, list[dict]] = {s: [] for s in emb}
    for _ in range(boot if len(clusters) > 1 else 0):
        idx, labels = _replicate(clusters, rng)
        for s, (m, t) in emb.items():
            reps[s].append(embedding_metrics(m[idx], t[idx], reference[idx], labels, seed=seed))

    def se(values: list[float]) -> float:
        v = np.asarray(values, dtype=np.float64)
        v = v[np.isfinite(v)]
        return float(v.std(ddof=1)) if len(v) > 1 else math.nan

    out: dict[str, dict[str, dict]] = {}
    for k in keys:
        row = {s: _cell(point[s][k], se([r[k] for r in reps[s]])) for s in emb}
        if k == "diversity":
            for s in emb:
                row[s]["real"] = point[s]["reference_diversity"]
        if k == "multimodality":
            for s in emb:
                row[s]["texts"] = int(point[s]["multimodality_texts"])
        if {"model", "base"} <= set(emb):
            diffs = [a[k] - b[k] for a, b in zip(reps["model"], reps["base"])]
            row["diff"] = _cell(point["model"][k] - point["base"][k], se(diffs), paired=True)
        out[k] = row
    out["_n"] = {s: {"value": float(point[s]["n"]), "se": 0.0} for s in emb}
    return out


def sample_block(values: dict[str, dict[str, Sequence[float]]], groups: Sequence[Any]) -> dict[str, dict[str, dict]]:
    """Judge rows per task and their mean over tasks, and pooled physics rows (module docstring, 2 and 3).

    ``values``: side -> {metric: per-sample values} (NaN = not applicable), the sides' samples paired by
    position; ``groups``: the task label of each sample.
    """
    from ddpo_grpo.paired import MEAN, paired, paired_by_group

    sides = list(values)
    tasks = list(dict.fromkeys(g for g in groups if g is not None))
    out: dict[str, dict[str, dict]] = {}
    for metric, _ in JUDGE_ROWS:
        if not all(metric in values[s] for s in sides):
            continue
        per_side = {s: np.asarray(values[s][metric], dtype=np.float64) for s in sides}
        parts: dict[str, list[tuple[float, float]]] = {s: [] for s in sides}
        for task in tasks:
            sel = np.array([g == task for g in groups])
            row = {}
            for s in sides:
                mean, se, n = _mean_se(per_side[s][sel])
                row[s] = _cell(mean, se, n=n)
                parts[s].append((mean, se))
            out[f"{metric}/{task}"] = row
        row = {}
        for s in sides:
            ok = [(m, e) for m, e in parts[s] if math.isfinite(m)]
            g = len(ok)
            row[s] = _cell(
                sum(m for m, _ in ok) / g if g else math.nan,
                math.sqrt(sum(e**2 for _, e in ok)) / g if g else math.nan,
                n=g,
            )
        out[f"{metric}/task_mean"] = row
        if {"model", "base"} <= set(sides):
            table = paired_by_group(per_side["base"], per_side["model"], list(groups))
            for task in tasks:
                p = table[task]
                out[f"{metric}/{task}"]["diff"] = _cell(p.diff, p.se, n=p.n, up=p.up, down=p.down)
            p = table[MEAN]
            out[f"{metric}/task_mean"]["diff"] = _cell(p.diff, p.se, n=p.n, up=p.up, down=p.down)
    for metric, _, _ in PHYSICS_ROWS:
        if not all(metric in values[s] for s in sides):
            continue
        row = {}
        for s in sides:
            mean, se, n = _mean_se(np.asarray(values[s][metric], dtype=np.float64))
            row[s] = _cell(mean, se, n=n)
        if {"model", "base"} <= set(sides):
            p = paired(values["base"][metric], values["model"][metric])
            row["diff"] = _cell(p.diff, p.se, n=p.n, up=p.up, down=p.down)
        out[metric] = row
    return out


def _finite_rows(features: Sequence[np.ndarray], prompts: Sequence[str]) -> list[int]:
    from .grammar import spec_of

    keep = []
    for i, (x, p) in enumerate(zip(features, prompts)):
        try:
            spec_of(p)
        except ValueError:
            continue
        if np.isfinite(np.asarray(x, dtype=np.float64)).all() and len(x) >= 4:
            keep.append(i)
    return keep


def _as_list(samples: Any) -> list[np.ndarray]:
    if hasattr(samples, "detach"):
        samples = samples.detach().float().cpu().numpy()
    return [np.asarray(x, dtype=np.float32) for x in samples]


def motion_table(
    features: Any,
    prompts: Sequence[str],
    values: dict[str, Sequence[float]],
    groups: Sequence[Any],
    *,
    base: dict | None = None,
    boot: int = BOOTSTRAP,
    seed: int = 0,
    evaluator: Any = None,
) -> dict:
    """The table of the module docstring as a JSON-able dict ``{"rows": {key: {side: cell}}, "notes": {...}}``.

    ``features`` (denormalised ``[N, frames, 263]`` or a list), ``prompts`` (N strings), ``values`` (the
    scored per-sample metrics: the judge's strict / partial and the physics metrics, as
    :func:`worlds.motion.evaluation.with_physics` gives them) and ``groups`` (N task labels) of the model;
    ``base``: the same four for a base model on the same prompts and noises (keys ``features``,
    ``prompts``, ``values``; its groups must be the model's) — then each row has a paired "diff". The set
    metrics are left out (``notes["set_metrics"]`` says why) when the evaluator's weights are missing or
    fewer than 2 motions qualify (finite, in the grammar).
    """
    feats = _as_list(features)
    if len(feats) != len(prompts) or len(groups) != len(prompts):
        raise ValueError(f"motion_table: {len(feats)} motions, {len(prompts)} prompts, {len(groups)} groups")
    sides = {"model": (feats, list(prompts), values)}
    if base is not None:
        b_feats = _as_list(base["features"])
        if list(base["prompts"]) != list(prompts) or len(b_feats) != len(feats):
            raise ValueError("motion_table: the base must be evaluated on the same prompts, in the same order")
        sides["base"] = (b_feats, list(prompts), base["values"])
    rows = sample_block({s: v for s, (_, _, v) in sides.items()}, list(groups))
    notes = {
        "set_se": f"cluster bootstrap over prompts, B = {boot}, seed {seed}",
        "sample_se": "s / sqrt(n) over samples; task mean: sqrt(sum SE_g^2) / G; differences paired per sample",
    }
    keep = sorted(set.intersection(*(set(_finite_rows(f, p)) for f, p, _ in sides.values())))
    try:
        from . import evaluator as ev_module

        ev = evaluator if evaluator is not None else ev_module.load_evaluator()
    except (ImportError, FileNotFoundError, OSError) as exc:
        notes["set_metrics"] = f"not computed: the text–motion evaluator is not available ({exc})"
        return {"rows": rows, "notes": notes}
    if len(keep) < 2:
        notes["set_metrics"] = f"not computed: {len(keep)} finite motions of grammar prompts (2 needed)"
        return {"rows": rows, "notes": notes}
    texts = [prompts[i] for i in keep]
    m, t, reference, _ = ev_module.set_embeddings([feats[i] for i in keep], texts, evaluator=ev)
    emb = {"model": (m, t)}
    if base is not None:  # the same prompts and sample shape: the same real reference clips and text embeddings
        emb["base"] = (ev.embed_motions([sides["base"][0][i] for i in keep]), t)
    rows = {**set_block(emb, reference, texts, boot=boot, seed=seed), **rows}
    notes["set_metrics"] = f"{len(keep)} motions of {len(set(texts))} prompts"
    return {"rows": rows, "notes": notes}


def _fmt(cell: dict | None, diff: bool = False) -> str:
    if cell is None or not math.isfinite(cell["value"]):
        return "—"
    v, se = cell["value"], cell["se"]
    mag = max(abs(v), abs(se) if math.isfinite(se) else 0.0)
    spec = ".3g" if mag >= 100 or (0 < mag < 1e-3) else ".3f"
    sign = "+" if diff else ""
    text = f"{v:{sign}{spec}}"
    return text + (f" ± {se:{spec}}" if math.isfinite(se) else "")


def format_table(table: dict, title: str = "") -> str:
    """A markdown table of :func:`motion_table`'s result: metric | [base |] model [| model − base]."""
    rows = table["rows"]
    sides = [s for s in ("base", "model") if any(s in r for k, r in rows.items() if not k.startswith("_"))]
    has_diff = any("diff" in r for r in rows.values())
    head = ["metric", *sides, *(["model − base"] if has_diff else [])]
    lines = [title] if title else []
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def line(label: str, row: dict) -> None:
        cells = [_fmt(row.get(s)) for s in sides]
        for i, s in enumerate(sides):
            extra = row.get(s) or {}
            if "real" in extra:
                cells[i] += f" (real {extra['real']:.3f})"
        if has_diff:
            cells.append(_fmt(row.get("diff"), diff=True))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")

    for key, label, better in SET_ROWS:
        if key in rows:
            line(f"{label} {_ARROW[better]}", rows[key])
    for metric, better in JUDGE_ROWS:
        for key in [k for k in rows if k.startswith(f"{metric}/")]:
            task = key.split("/", 1)[1]
            shown = "mean over tasks" if task == "task_mean" else task
            line(f"judge {metric}, {shown} {_ARROW[better]}", rows[key])
    for key, label, better in PHYSICS_ROWS:
        if key in rows:
            line(f"{label} {_ARROW[better]}", rows[key])
    notes = table.get("notes", {})
    lines.append(
        "± one standard error; set metrics: "
        + notes.get("set_se", "")
        + f" ({notes.get('set_metrics', '')}); judge and physics: "
        + notes.get("sample_se", "")
    )
    return "\n".join(lines)


def score_dir(directory: str) -> tuple[list[np.ndarray], list[str], dict, list]:
    """Read a sample.py output directory and score it with the strict judge and the physics metrics."""
    from reward_models import load_reward

    from .evaluation import with_physics
    from .files import read_samples

    feats, rows = read_samples(directory)
    prompts = [r["prompt"] for r in rows]
    reward = with_physics(load_reward("motion_judge", score="strict"))
    _, info = reward(feats, prompts, rows)
    keys = [k for k, v in info.items() if isinstance(v, list) and k != "task"]
    values = {k: [float(x) for x in info[k]] for k in keys}
    return feats, prompts, values, [t or None for t in info["task"]]


__all__ = ["BOOTSTRAP", "JUDGE_ROWS", "PHYSICS_ROWS", "SET_ROWS", "format_table", "motion_table", "score_dir"]
