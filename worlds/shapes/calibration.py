"""Calibration of the ShapesWorld judge: ``python -m worlds.shapes calibration [--calibrate] [--n 300]``.

Three tables, each reproducible from its seed (the README's calibration table is this output):

1. **Agreement** (:func:`measure_agreement`): for each task, ``n`` prompts drawn uniformly from every prompt
   of the task, a scene rendered for each, then every mild perturbation of :data:`~.distortions.PERTURBATIONS`
   applied; the judge's strict verdict against (a) the scene's own prompt — ``pos`` = fraction judged 1 —
   and (b) one hard negative of :func:`mismatches` — ``neg`` = fraction judged 0.
2. **Gray zones** (:func:`measure_rejection`): for each distortion of :data:`~.distortions.DISTORTIONS` and
   severity, ``n`` scenes (task uniform; a prompt naming the shape the distortion claims to be) with one
   object of that shape drawn distorted; the fraction the judge rejects (strict 0, the ground truth), on
   the hard-edged image and after the ``combined`` mild perturbation.
3. **Fits** (:func:`fit_statistics`): per class and mild perturbation, the Hausdorff distance and IoU of each
   rendered object's fit to its own class — where the thresholds ``MAX_HAUSDORFF`` and ``MIN_FIT_IOU`` come from.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from worlds.tables import agreement_table

from .distortions import DISTORTIONS, PERTURBATIONS, distorted_image, perturb
from .grammar import enumerate_constraints
from .judge import check_constraints, classify_pixels, connected_components, detect, to_uint8_image
from .world import COLORS, COUNT_WORDS, OPPOSITE, SHAPES, TASKS, Constraints, ObjectSpec, render, sample_scene


def mismatches(c: Constraints) -> list[tuple[str, Constraints]]:
    """Hard negatives: single edits of ``c`` that no scene satisfying ``c`` can satisfy.

    Kinds: ``"color"`` / ``"shape"`` (change one named object's colour / shape — the multiset of
    objects changes), ``"count"`` (counting: another count; single object: "two ..."), and
    ``"relation"`` (position: the opposite relation). Edits that would name the same pair twice are
    skipped.
    """
    out: list[tuple[str, Constraints]] = []

    def add(kind, task, objs, rel=None):
        try:
            out.append((kind, Constraints(task, tuple(objs), rel)))
        except ValueError:
            pass

    for i, spec in enumerate(c.objects):
        for color in COLORS:
            if color != spec.color:
                objs = list(c.objects)
                objs[i] = ObjectSpec(color, spec.shape, spec.count)
                add("color", c.task, objs, c.relation)
        for shape in SHAPES:
            if shape != spec.shape:
                objs = list(c.objects)
                objs[i] = ObjectSpec(spec.color, shape, spec.count)
                add("shape", c.task, objs, c.relation)
    if c.task in ("single_object", "counting"):
        spec = c.objects[0]
        for n in COUNT_WORDS:
            if n != spec.count:
                add("count", "counting", [ObjectSpec(spec.color, spec.shape, n)])
    if c.relation is not None:
        add("relation", c.task, c.objects, OPPOSITE[c.relation])
    return out


def _strict(img: np.ndarray, c: Constraints) -> bool:
    return all(ok for _, ok in check_constraints(detect(img), c))


def scenes_with_negatives(tasks: Sequence[str], n_per_task: int, rng: np.random.Generator):
    """For each task, ``n_per_task`` items ``(task, c, scene, image, negative)``: a prompt ``c`` drawn uniformly
    from every prompt of the task, a scene for it, its hard-edged image and one hard negative of
    :func:`mismatches`. Draws from ``rng`` in this order, item by item (consumers draw between items)."""
    for task in tasks:
        pool = list(enumerate_constraints(task))
        for _ in range(n_per_task):
            c = pool[int(rng.integers(len(pool)))]
            scene = sample_scene(c, rng)
            img = render(scene)
            negs = mismatches(c)
            yield task, c, scene, img, negs[int(rng.integers(len(negs)))][1]


def measure_agreement(
    n_per_task: int = 200,
    seed: int = 0,
    perturbations: Sequence[str] = tuple(PERTURBATIONS),
    tasks: Sequence[str] = TASKS,
) -> dict[str, dict[str, dict[str, float]]]:
    """Table 1 of the module docstring: ``{perturbation: {task: {"pos", "neg"}}}``."""
    rng = np.random.default_rng(seed)
    hits = {p: {task: [0, 0] for task in tasks} for p in perturbations}
    for task, c, scene, img, neg in scenes_with_negatives(tasks, n_per_task, rng):
        for p in perturbations:
            det = detect(perturb(img, p, rng, scene=scene))
            hits[p][task][0] += all(v for _, v in check_constraints(det, c))
            hits[p][task][1] += not all(v for _, v in check_constraints(det, neg))
    return {
        p: {task: {"pos": pos / n_per_task, "neg": neg / n_per_task} for task, (pos, neg) in by_task.items()}
        for p, by_task in hits.items()
    }


def gray_zone_scenes(n: int, rng: np.random.Generator, distortions: Sequence[str] = tuple(DISTORTIONS)):
    """For each distortion of :data:`~.distortions.DISTORTIONS` and each of its severities, ``n`` items
    ``(kind, level, c, scene, image)``: a prompt ``c`` of a uniform task naming the shape the distortion claims to
    be, a scene for it, and its hard-edged image with one object of that shape drawn distorted. Draws from ``rng``
    in this order, item by item, so a consumer may draw from the same ``rng`` between items (the tables do)."""
    pools = {
        (task, shape): [c for c in enumerate_constraints(task) if any(o.shape == shape for o in c.objects)]
        for task in TASKS
        for shape in SHAPES
    }
    for kind in distortions:
        claim, _, _, levels = DISTORTIONS[kind]
        for level in levels:
            for _ in range(n):
                pool = pools[(TASKS[int(rng.integers(len(TASKS)))], claim)]
                c = pool[int(rng.integers(len(pool)))]
                scene = sample_scene(c, rng)
                index = next(i for i, o in enumerate(scene) if o.shape == claim)
                yield kind, level, c, scene, distorted_image(scene, index, kind, level, rng)


def rates(counts: dict[str, dict[float, dict[str, int]]], n: int) -> dict[str, dict[float, dict[str, float]]]:
    """``{kind: {level: {key: count}}}`` of ``n`` scenes per cell as fractions."""
    return {kind: {lv: {k: v / n for k, v in r.items()} for lv, r in by.items()} for kind, by in counts.items()}


def measure_rejection(
    n: int = 200, seed: int = 0, distortions: Sequence[str] = tuple(DISTORTIONS), after: str = "combined"
) -> dict[str, dict[float, dict[str, float]]]:
    """Table 2 of the module docstring: ``{distortion: {severity: {"clean": rate, after: rate}}}``, rates of
    strict 0 (rejection) on the hard-edged distorted scene and on it after the ``after`` perturbation."""
    rng = np.random.default_rng(seed)
    counts: dict[str, dict[float, dict[str, int]]] = {}
    for kind, level, c, scene, img in gray_zone_scenes(n, rng, distortions):
        rejected = counts.setdefault(kind, {}).setdefault(level, {"clean": 0, after: 0})
        rejected["clean"] += not _strict(img, c)
        rejected[after] += not _strict(perturb(img, after, rng, scene=scene), c)
    return rates(counts, n)


def fit_statistics(
    n: int = 300, seed: int = 0, perturbations: Sequence[str] = tuple(PERTURBATIONS)
) -> dict[str, dict[str, dict[str, float]]]:
    """Table 3 of the module docstring: ``{perturbation: {class: {"n", "max_hausdorff", "min_iou", "iou_q005",
    "recognised"}}}`` over the objects of ``n`` two-object scenes (each object's own-class fit; ``recognised`` =
    fraction detected as exactly their own colour and class)."""
    from .fidelity import fit_shape

    rng = np.random.default_rng(seed)
    pool = list(enumerate_constraints("two_object"))
    rows: dict[str, dict[str, list]] = {p: {s: [] for s in SHAPES} for p in perturbations}
    for _ in range(n):
        c = pool[int(rng.integers(len(pool)))]
        scene = sample_scene(c, rng)
        img = render(scene)
        for p in perturbations:
            im = to_uint8_image(perturb(img, p, rng, scene=scene))
            comp = connected_components(classify_pixels(im))
            for o in scene:
                x0, y0, x1, y1 = o.bbox
                ids, counts = np.unique(comp[y0:y1, x0:x1][comp[y0:y1, x0:x1] >= 0], return_counts=True)
                if len(ids) == 0:
                    rows[p][o.shape].append((np.inf, 0.0, False))
                    continue
                root = ids[counts.argmax()]
                ys, xs = np.nonzero(comp == root)
                mask = comp[ys.min() : ys.max() + 1, xs.min() : xs.max() + 1] == root
                f = fit_shape(mask, o.shape)
                found = [d for d in detect(im) if d["bbox"][0] <= o.centre[0] < d["bbox"][2]]
                ok = any(d["shape"] == o.shape and d["color"] == o.color for d in found)
                rows[p][o.shape].append((f.hausdorff, f.iou, ok))
    out: dict[str, dict[str, dict[str, float]]] = {}
    for p, by_shape in rows.items():
        out[p] = {}
        for s, vals in by_shape.items():
            h = np.asarray([v[0] for v in vals])
            iou = np.asarray([v[1] for v in vals])
            out[p][s] = {
                "n": len(vals),
                "max_hausdorff": float(h.max()),
                "min_iou": float(iou.min()),
                "iou_q005": float(np.quantile(iou, 0.005)),
                "recognised": float(np.mean([v[2] for v in vals])),
            }
    return out


#: the Markdown table of :func:`measure_agreement` (shared with MotionWorld's agreement study)
format_table = agreement_table


def severity_table(table: dict[str, dict[float, dict[str, float]]], heading: str, first: str, second: str) -> str:
    """Markdown table: one row per distortion (its claim and severity unit), cells ``severity: first / second``
    rates; ``heading`` names the rates column."""
    lines = [f"| distortion (claims to be) | severity unit | {heading} |", "|---|---|---|"]
    for kind, by_level in table.items():
        claim, _, unit, _ = DISTORTIONS[kind]
        cells = "; ".join(f"**{lv:g}**: {r[first]:.2f} / {r[second]:.2f}" for lv, r in by_level.items())
        lines.append(f"| {kind} ({claim}) | {unit} | {cells} |")
    return "\n".join(lines)


def format_rejection(table: dict[str, dict[float, dict[str, float]]]) -> str:
    """Markdown table: one row per distortion, cells ``severity: clean / after`` rejection rates."""
    after = next(k for k in next(iter(next(iter(table.values())).values())) if k != "clean")
    return severity_table(table, f"rejected: hard-edged / after {after}, per severity", "clean", after)


def format_fits(table: dict[str, dict[str, dict[str, float]]]) -> str:
    """Markdown table: per perturbation and class, max H / min IoU / 0.5 % IoU quantile / recognised."""
    lines = [
        "| perturbation | " + " | ".join(f"{s}: max H, min IoU, IoU q0.005, recognised" for s in SHAPES) + " |",
        "|---" * (len(SHAPES) + 1) + "|",
    ]
    for p, row in table.items():
        cells = [
            f"{r['max_hausdorff']:.2f}, {r['min_iou']:.3f}, {r['iou_q005']:.3f}, {r['recognised']:.3f}"
            for r in (row[s] for s in SHAPES)
        ]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
