"""Deterministic ShapesWorld evaluation: fixed seeds, noise-free sampling, judge scores per task.

    evaluate(policy, rows, ...)   -> (metrics, images [N, 3, H, W], captions)
    score_images(images, rows)    -> metrics            (the scoring alone, for any images)
    judge_images(images, rows)    -> per-image results  (None where the judge does not apply)
    save_grid(images, captions, path, nrow)             (PNG grid, written atomically)
    image_seed(seed, i, k), derive_seed(*parts)         (the initial-noise seeds, shared with scripts/sample.py)
    eval_items(rows, images_per_prompt, per_task)       which (prompt index, image index) pairs are sampled

Sampling is the policy's own sampler (`rollout.sample_rollout`) with noise_level 0: the flow ODE
(Euler) for flow models, DDIM with η = 0 for SD. The only randomness is the initial noise, and
image k of prompt i starts from the noise of seed `image_seed(seed, i, k)`, so a score does not
depend on the batch size or on which other prompts are evaluated, and `scripts/sample.py --seed s`
draws the very same images.

Which images: every prompt × images_per_prompt, or (per_task = N > 0) a task-balanced set of N images
per task — each task's prompts in file order, cycled, the r-th pass using image index r. The test
split has 3 single-object and 9 counting prompts against 312 position prompts; N = 48 gives each
task the same weight and precision (±7 points standard error per task at 50 %) for 192 images
instead of 402.

Scoring is the ShapesWorld judge (`worlds.shapes.judge.judge`, the same judge as the `shapes`
reward), with each row's `task`/`objects`/`relation` fields when present (the rows of
`load_prompts("shapes_test")`), else the parsed prompt. A prompt outside the grammar with no such
fields is not applicable: it is left out of every mean and counted in `eval/not_applicable`.

Metrics (means over the applicable images; NaN when there are none):
    eval/strict, eval/partial                  all images (weights tasks by their share of the images)
    eval/task_mean/strict, eval/task_mean/partial
                                               the unweighted mean of the per-task accuracies: GenEval's
                                               "overall" convention, and our headline number (the test
                                               split is 78 % position prompts, which would otherwise
                                               dominate)
    eval/strict/<task>, eval/partial/<task>    per task present (single_object, counting, two_object, position)
    eval/num_images                            images sampled (applicable or not)
    eval/num_images/<task>                     images scored per task
    eval/not_applicable                        images the judge could not score (a count)
"""

from __future__ import annotations

import math
import os
from typing import Any, Iterable, Optional, Sequence

import numpy as np

from ddpo_grpo.seeding import derive_seed
from worlds.shapes.world import CANVAS, TASKS

# torch and the sampler are imported inside the functions that need them, so that scripts importing
# the seed functions (scripts/sample.py) start fast, e.g. for --help.

PREFIX = "eval"


# --------------------------------------------------------------------------------------------
# seeds
# --------------------------------------------------------------------------------------------


def image_seed(seed: int, prompt_index: int, k: int) -> int:
    """Initial-noise seed of image k of prompt `prompt_index`: independent of batching."""
    return derive_seed(seed, 0, prompt_index, k)


# --------------------------------------------------------------------------------------------
# scoring
# --------------------------------------------------------------------------------------------


def _constraints(row):
    """The row's Constraints, or None when the judge cannot handle it (not a ShapesWorld prompt)."""
    from worlds.shapes.grammar import constraints_of

    try:
        return constraints_of(row)
    except (ValueError, KeyError, TypeError):
        return None


def judge_images(images: Iterable[Any], rows: Sequence, *, size: int = CANVAS) -> list[Optional[dict]]:
    """The judge's verdict on each image against its row: a list of `judge()` results, None where the
    row is not applicable.

    images: a float tensor [N, 3, H, W] in [0, 1] or any sequence of images the judge accepts (uint8
    [H, W, 3], float [3, H, W] / [H, W, 3]); rows: one dataset row (dict with "prompt" and optionally
    task/objects/relation) or prompt string per image; size: judging resolution (images are resized).
    """
    from worlds.shapes.judge import judge

    images = images.detach().float().cpu() if hasattr(images, "detach") else list(images)  # torch tensor or a sequence
    if len(images) != len(rows):
        raise ValueError(f"judge_images: {len(images)} images for {len(rows)} rows; pass one row per image")
    results = []
    for image, row in zip(images, rows):
        c = _constraints(row)
        results.append(None if c is None else judge(image, c, size=size))
    return results


def summarize(results: Sequence[Optional[dict]]) -> dict:
    """Metrics (see the module docstring) from per-image `judge()` results (None = not applicable)."""
    scored = [r for r in results if r is not None]
    metrics: dict = {}
    for key in ("strict", "partial"):
        metrics[f"{PREFIX}/{key}"] = float(np.mean([r[key] for r in scored])) if scored else math.nan
    present = {r["task"] for r in scored}
    tasks = [t for t in TASKS if t in present] + sorted(present - set(TASKS))
    for task in tasks:
        mine = [r for r in scored if r["task"] == task]
        for key in ("strict", "partial"):
            metrics[f"{PREFIX}/{key}/{task}"] = float(np.mean([r[key] for r in mine]))
        metrics[f"{PREFIX}/num_images/{task}"] = len(mine)
    for key in ("strict", "partial"):
        per_task = [metrics[f"{PREFIX}/{key}/{t}"] for t in tasks]
        metrics[f"{PREFIX}/task_mean/{key}"] = float(np.mean(per_task)) if per_task else math.nan
    metrics[f"{PREFIX}/num_images"] = len(results)
    metrics[f"{PREFIX}/not_applicable"] = len(results) - len(scored)
    return metrics


def score_images(images: Iterable[Any], rows: Sequence, *, size: int = CANVAS) -> dict:
    """Judge `images` against `rows` (one each) and return the metrics; see `judge_images`."""
    return summarize(judge_images(images, rows, size=size))


def eval_items(rows: Sequence[dict], images_per_prompt: int = 1, per_task: int = 0) -> list[tuple[int, int]]:
    """The (prompt index, image index) pairs an evaluation samples, in sampling order.

    per_task = 0: every row, images_per_prompt images each. per_task = N > 0: N pairs per task (rows
    grouped by their "task" field; rows without one form a group of their own), each task's rows in
    file order, cycled: pass r over the task's rows uses image index r, so no pair repeats.
    """
    if per_task < 0 or images_per_prompt < 1:
        raise ValueError(f"eval_items: per_task must be >= 0 and images_per_prompt >= 1, "
                         f"got {per_task} and {images_per_prompt}")
    if not per_task:
        return [(i, k) for i in range(len(rows)) for k in range(images_per_prompt)]
    by_task: dict = {}
    for i, row in enumerate(rows):
        by_task.setdefault(row.get("task") if isinstance(row, dict) else None, []).append(i)
    return [(idx[j % len(idx)], j // len(idx)) for idx in by_task.values() for j in range(per_task)]


# --------------------------------------------------------------------------------------------
# sampling + scoring
# --------------------------------------------------------------------------------------------


def evaluate(
    policy,
    rows: Sequence[dict],
    *,
    num_steps: int,
    guidance_scale: float,
    images_per_prompt: int = 1,
    per_task: int = 0,
    seed: int = 0,
    batch_size: int = 16,
    negative_prompt: str = "",
    autocast=None,
    model=None,
    max_images: Optional[int] = None,
):
    """Sample the images of `eval_items(rows, images_per_prompt, per_task)` deterministically and score them.

    policy: a `Policy` adapter; rows: dataset rows with a "prompt" key; model: the denoiser to call
    (default `policy.denoiser`; pass a wrapped one, e.g. with EMA weights applied, as the trainer
    does); autocast: a context-manager factory for mixed precision (None: full precision).
    max_images: keep only the first that many images in the returned tensor (all are scored), to
    bound host memory on large evaluations; None keeps them all.

    Returns (metrics, images, captions): images float [N, 3, H, W] in [0, 1] on the CPU in the order
    of the items (per_task = 0: prompt 0 images 0…K−1, prompt 1, …), captions their prompts.
    """
    import torch

    from ddpo_grpo import rollout as rollout_lib

    for name, value in (("num_steps", num_steps), ("images_per_prompt", images_per_prompt), ("batch_size", batch_size)):
        if value < 1:
            raise ValueError(f"evaluate: {name} must be >= 1, got {value}")
    model = policy.denoiser if model is None else model
    items = eval_items(rows, images_per_prompt, per_task)
    keep = len(items) if max_images is None else max(0, int(max_images))
    results, kept, captions = [], [], []
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(items), batch_size):
                batch = items[start : start + batch_size]
                batch_rows = [rows[i] for i, _ in batch]
                rollout = rollout_lib.sample_rollout(
                    policy, model, batch_rows, seeds=[image_seed(seed, i, k) for i, k in batch], num_steps=num_steps,
                    guidance_scale=guidance_scale, noise_level=0.0, negative_prompt=negative_prompt, autocast=autocast,
                )
                images = rollout.images.detach().float().cpu()  # [b, 3, H, W]
                results.extend(judge_images(images, batch_rows))
                if start < keep:
                    kept.append(images[: keep - start])
                    captions.extend(r["prompt"] for r in batch_rows[: keep - start])
    finally:
        if was_training and hasattr(model, "train"):
            model.train()
    images = torch.cat(kept) if kept else torch.zeros(0, 3, 0, 0)
    return summarize(results), images, captions


# --------------------------------------------------------------------------------------------
# image grid
# --------------------------------------------------------------------------------------------


def save_grid(images, captions: Sequence[str], path, nrow: Optional[int] = None) -> None:
    """Tile `images` (float [N, 3, H, W] in [0, 1]) into one PNG at `path`, written atomically
    (temporary file + os.replace); `nrow` images per row (default ⌈√N⌉). The captions (one per
    image, in order) are stored in the PNG's "captions" text chunk as a JSON list, as the training
    run's sample grids do."""
    from ddpo_grpo.logging_utils import _atomic_save_png, _images_to_uint8, make_grid_uint8

    if len(images) == 0:
        raise ValueError("save_grid: no images to save")
    if len(captions) != len(images):
        raise ValueError(f"save_grid: {len(captions)} captions for {len(images)} images")
    grid = make_grid_uint8(_images_to_uint8(images), nrow=nrow)  # [H', W', 3]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    _atomic_save_png(grid, os.fspath(path), list(captions))


__all__ = [
    "derive_seed", "image_seed", "eval_items", "judge_images", "summarize", "score_images", "evaluate", "save_grid",
]
