"""HumanML3D's set metrics on the MotionWorld evaluator's embeddings.

R-precision, matching score (MM-Dist), FID, diversity and multimodality (the definitions are in
:mod:`worlds.motion.evaluator`'s docstring), the real reference clips FID compares with
(:func:`reference_features`), and :func:`set_metrics`, which embeds a set of motions and their prompts and
computes them all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .evaluator_model import MotionEvaluator, _features_list, load_evaluator
from .generator import dataset_seed, generate
from .grammar import format_prompt, spec_of

#: master seed of the real reference clips of :func:`set_metrics` (per-clip seeds ``dataset_seed(seed, i, 0)``)
REFERENCE_SEED = 20_000
#: R-precision batch (HumanML3D: 32)
R_PRECISION_BATCH = 32
#: random pairs of the diversity metric (HumanML3D: 300)
DIVERSITY_PAIRS = 300
#: random pairs per prompt of the multimodality metric (HumanML3D: 10)
MULTIMODALITY_PAIRS = 10


def _prompt_texts(prompts: Sequence[Any]) -> list[str]:
    out = []
    for p in prompts:
        if isinstance(p, dict):
            p = format_prompt(spec_of(p)) if "actions" in p else p.get("prompt")
        if not isinstance(p, str):
            raise ValueError(f"expected prompt strings or rows with 'prompt' / 'actions', got {p!r}")
        out.append(p)
    return out


def batch_order(prompts: Sequence[str], batch: int = R_PRECISION_BATCH, seed: int = 0) -> np.ndarray:
    """The order in which :func:`r_precision` cuts batches: a seeded shuffle, then round-robin over repeats.

    Every prompt's first occurrence (in shuffled order) comes before any second occurrence, and so on, so
    consecutive batches hold distinct prompts wherever the set has ``batch`` distinct prompts to give.
    """
    perm = np.random.default_rng(seed).permutation(len(prompts))
    seen: dict[str, int] = {}
    occurrence = np.zeros(len(prompts), dtype=np.int64)
    for pos, i in enumerate(perm):
        occurrence[pos] = seen.get(prompts[i], 0)
        seen[prompts[i]] = occurrence[pos] + 1
    return perm[np.argsort(occurrence, kind="stable")]


def r_precision(
    motion_emb: np.ndarray,
    text_emb: np.ndarray,
    prompts: Sequence[str],
    batch: int = R_PRECISION_BATCH,
    top_k: int = 3,
    seed: int = 0,
) -> dict[str, float]:
    """HumanML3D R-precision: ``{"r_precision_top1": …, …, "r_precision_top{top_k}"}``.

    In each batch (:func:`batch_order`) motion ``i`` ranks the batch's prompts by Euclidean distance; its
    rank is one plus the number of *other* prompts strictly closer than its own. Incomplete last batch
    dropped; a set of fewer than ``batch`` motions is one batch.
    """
    n = len(prompts)
    if n < 2:
        raise ValueError(f"R-precision needs at least 2 motions, got {n}")
    batch = min(batch, n)
    order = batch_order(prompts, batch, seed)
    names = np.asarray(prompts, dtype=object)
    hits = np.zeros(top_k)
    count = 0
    for b in range(n // batch):
        idx = order[b * batch : (b + 1) * batch]
        d = np.linalg.norm(motion_emb[idx, None, :].astype(np.float64) - text_emb[None, idx, :], axis=-1)
        own = np.diag(d)
        other = names[idx][:, None] != names[idx][None, :]
        rank = ((d < own[:, None]) & other).sum(1)
        for k in range(top_k):
            hits[k] += (rank <= k).sum()
        count += len(idx)
    return {f"r_precision_top{k + 1}": float(hits[k] / count) for k in range(top_k)}


def matching_score(motion_emb: np.ndarray, text_emb: np.ndarray) -> float:
    """Mean Euclidean distance between each motion's and its own prompt's embedding (lower is better)."""
    return float(np.linalg.norm(motion_emb.astype(np.float64) - text_emb, axis=-1).mean())


def fid(a: np.ndarray, b: np.ndarray) -> float:
    """Fréchet distance between Gaussians fitted to the rows of ``a`` and ``b``.

    ``|μa − μb|² + tr Σa + tr Σb − 2 tr (Σa^½ Σb Σa^½)^½`` with symmetric eigendecompositions (float64), so
    rank-deficient covariances of small sets are fine.
    """
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"FID needs at least 2 embeddings per set, got {len(a)} and {len(b)}")
    mu_a, mu_b = a.mean(0), b.mean(0)
    cov_a, cov_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    w, v = np.linalg.eigh(cov_a)
    root_a = (v * np.sqrt(np.clip(w, 0.0, None))) @ v.T
    m = root_a @ cov_b @ root_a
    cross = np.sqrt(np.clip(np.linalg.eigvalsh((m + m.T) / 2.0), 0.0, None)).sum()
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(cov_a) + np.trace(cov_b) - 2.0 * cross)


def diversity(emb: np.ndarray, pairs: int = DIVERSITY_PAIRS, seed: int = 0) -> float:
    """Mean Euclidean distance between ``pairs`` random pairs of distinct rows (fixed ``seed``)."""
    n = len(emb)
    if n < 2:
        raise ValueError(f"diversity needs at least 2 embeddings, got {n}")
    rng = np.random.default_rng(seed)
    i = rng.integers(0, n, pairs)
    j = (i + rng.integers(1, n, pairs)) % n  # j != i
    return float(np.linalg.norm(emb[i].astype(np.float64) - emb[j], axis=-1).mean())


def multimodality(emb: np.ndarray, prompts: Sequence[str], pairs: int = MULTIMODALITY_PAIRS, seed: int = 0):
    """Mean distance between random pairs of motions of the same prompt: ``(value, texts)``.

    For every prompt ``c`` with ``n_c >= 2`` motions: ``pairs`` pairs ``(i, j)``, ``i != j``, drawn uniformly
    (with replacement across pairs) among its motions; ``MM_c`` = their mean Euclidean distance.
    MultiModality = the unweighted mean of ``MM_c`` over those ``texts`` prompts (NaN, 0 when no prompt has
    two motions). Prompts are visited in sorted order, so the draws depend on ``seed`` only.
    """
    rng = np.random.default_rng(seed)
    names = np.asarray(prompts, dtype=object)
    per_text = []
    for text in sorted(set(prompts)):
        idx = np.flatnonzero(names == text)
        if len(idx) < 2:
            continue
        i = rng.integers(0, len(idx), pairs)
        j = (i + rng.integers(1, len(idx), pairs)) % len(idx)  # j != i
        per_text.append(np.linalg.norm(emb[idx[i]].astype(np.float64) - emb[idx[j]], axis=-1).mean())
    return (float(np.mean(per_text)) if per_text else math.nan), len(per_text)


def reference_features(
    prompts: Sequence[Any], seed: int = REFERENCE_SEED, frames: int | Sequence[int | None] | None = None
) -> list[np.ndarray]:
    """Real clips of ``prompts``: ``generate(prompt_i, dataset_seed(seed, i, 0), frames_i).features()``.

    Denormalised ``[frames_i − 1, 263]`` each; ``frames``: joint frames of every clip (an int), of each
    clip (a sequence; ``None`` entries) or ``None`` (the generator's own length for the prompt).
    """
    per = list(frames) if isinstance(frames, (list, tuple, np.ndarray)) else [frames] * len(prompts)
    if len(per) != len(prompts):
        raise ValueError(f"{len(per)} lengths for {len(prompts)} prompts")
    return [
        generate(spec_of(p), dataset_seed(seed, i, 0), None if f is None else int(f)).features()
        for i, (p, f) in enumerate(zip(prompts, per))
    ]


def matched_frames(n_features: int) -> int | None:
    """Joint frames of a real clip with ``n_features`` feature frames, or ``None`` outside the generator's 60–200."""
    return n_features + 1 if 60 <= n_features + 1 <= 200 else None


def set_embeddings(
    features: Any,
    prompts: Sequence[Any],
    lengths: Sequence[int] | None = None,
    *,
    reference: Any = None,
    reference_lengths: Sequence[int] | None = None,
    reference_seed: int = REFERENCE_SEED,
    reference_frames: str | int | None = "match",
    evaluator: MotionEvaluator | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """The embeddings :func:`set_metrics` reads: motions ``[N, D]``, their prompts ``[N, D]``, the real reference
    clips ``[N_ref, D]`` (arguments as :func:`set_metrics`), and the prompt texts."""
    ev = evaluator if evaluator is not None else load_evaluator()
    texts = _prompt_texts(prompts)
    m = ev.embed_motions(features, lengths)
    if len(m) != len(texts):
        raise ValueError(f"{len(m)} motions for {len(texts)} prompts")
    if not np.all(np.isfinite(m)):
        raise ValueError("some motions contain NaN or infinite values; set metrics need finite motions")
    t = ev.embed_texts(texts)
    if reference is None:
        if reference_frames == "match":
            frames = [matched_frames(len(x)) for x in _features_list(features, lengths)]
        elif reference_frames is None or isinstance(reference_frames, int):
            frames = reference_frames
        else:
            raise ValueError(f"reference_frames must be 'match', an int or None, got {reference_frames!r}")
        reference = reference_features(prompts, reference_seed, frames)
    r = ev.embed_motions(reference, reference_lengths)
    return m, t, r, texts


def embedding_metrics(
    m: np.ndarray,
    t: np.ndarray,
    r: np.ndarray,
    texts: Sequence[str],
    *,
    seed: int = 0,
    batch: int = R_PRECISION_BATCH,
    diversity_pairs: int = DIVERSITY_PAIRS,
    multimodality_pairs: int = MULTIMODALITY_PAIRS,
) -> dict[str, float]:
    """The set metrics of motion embeddings ``m``, their prompts' ``t`` and the reference's ``r`` (module
    docstring): ``n``, R-precision top-1/2/3, ``matching_score`` (= ``mm_dist``), ``cosine``, ``fid``,
    ``diversity``, ``reference_diversity``, ``multimodality`` and ``multimodality_texts``."""
    out: dict[str, float] = {"n": float(len(m))}
    out.update(r_precision(m, t, texts, batch, 3, seed))
    out["matching_score"] = out["mm_dist"] = matching_score(m, t)
    out["cosine"] = float((m.astype(np.float64) * t).sum(-1).mean())
    out["fid"] = fid(m, r)
    out["diversity"] = diversity(m, diversity_pairs, seed)
    out["reference_diversity"] = diversity(r, diversity_pairs, seed)
    mm, texts_used = multimodality(m, texts, multimodality_pairs, seed)
    out["multimodality"], out["multimodality_texts"] = mm, float(texts_used)
    return out


def set_metrics(
    features: Any,
    prompts: Sequence[Any],
    lengths: Sequence[int] | None = None,
    *,
    reference: Any = None,
    reference_lengths: Sequence[int] | None = None,
    reference_seed: int = REFERENCE_SEED,
    reference_frames: str | int | None = "match",
    seed: int = 0,
    evaluator: MotionEvaluator | None = None,
    batch: int = R_PRECISION_BATCH,
    diversity_pairs: int = DIVERSITY_PAIRS,
) -> dict[str, float]:
    """The HumanML3D set metrics of generated motions and their prompts, on this evaluator's embeddings.

    ``features``: denormalised ``[N, frames, 263]`` (array or tensor; ``lengths`` = valid frames of each
    padded motion) or a list of ``[frames_i, 263]``; ``prompts``: N prompt strings or split rows. The
    real ``reference`` set for FID defaults to :func:`reference_features` of the same prompts (the
    generator, master seed ``reference_seed``; so every prompt must be in the grammar), each clip as long
    as its motion (``reference_frames="match"``: a model with a fixed sample shape is compared with real
    clips of that shape; lengths outside the generator's 60–200 joint frames, and ``None``, take the
    generator's own length; an int fixes every clip's joint frames); pass your own ``reference`` (same
    forms) to compare against something else. ``seed`` fixes the R-precision batches and the
    diversity pairs. Non-finite motions are an error (filter them first).

    Returns ``{"n", "r_precision_top1", "r_precision_top2", "r_precision_top3", "matching_score",
    "mm_dist", "cosine", "fid", "diversity", "reference_diversity", "multimodality", "multimodality_texts",
    "cosine/<task>" …}`` (:func:`embedding_metrics`; ``cosine`` = mean cosine of each motion with its
    prompt, per task where the prompts parse).
    """
    m, t, r, texts = set_embeddings(
        features,
        prompts,
        lengths,
        reference=reference,
        reference_lengths=reference_lengths,
        reference_seed=reference_seed,
        reference_frames=reference_frames,
        evaluator=evaluator,
    )
    out = embedding_metrics(m, t, r, texts, seed=seed, batch=batch, diversity_pairs=diversity_pairs)
    cos = (m.astype(np.float64) * t).sum(-1)
    tasks = []
    for p in prompts:
        try:
            tasks.append(spec_of(p).task)
        except ValueError:
            tasks.append("")
    for task in sorted({x for x in tasks if x}):
        sel = np.array([x == task for x in tasks])
        out[f"cosine/{task}"] = float(cos[sel].mean())
    return out
