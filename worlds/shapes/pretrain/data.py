"""Training data, rendered on the fly from *train*-split prompts only, and the training randomness.

Every batch draws tasks by ``task_weights``, then a train-split prompt of that task uniformly, then a
fresh scene with :func:`~worlds.shapes.world.sample_scene`, and renders it
(:func:`~worlds.shapes.world.render`). Default: every latent of every batch is a new image
(rendering + encoding cost ~12 % of a step); ``noise_per_image = K > 1`` reuses each image K times
in its batch with independent noise, to save that cost.

Caption noise (``caption_noise = p``, denoiser stages only): with probability ``p`` an image is
rendered for a *near miss* of its caption (:func:`near_miss`: a count off by one, one of two objects
dropped or doubled, the relation flipped) while the caption stays. Web alt-text is mis-captioned in
the same way, and a model trained on it learns to make those mistakes at about that rate: it knows
the right image but samples a wrong one part of the time, the situation RL fine-tuning is meant to
fix. (At these model sizes it did not make RL faster; see the README's ShapesWorld experiments.) Only
the caption's own colour–shape pairs are drawn, so no held-out composition leaks into training.

Randomness (:class:`TrainingData`): a numpy generator seeded ``seed`` draws prompts and scenes; a
torch generator seeded ``seed + 1`` draws posterior samples, prompt dropout and the recipes' noise.
Both are saved in checkpoints. The latent statistics draw from their own pair, seeded ``seed + 7``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import torch

from worlds.shapes.grammar import load_split
from worlds.shapes.world import COUNT_WORDS, OPPOSITE, TASKS, render, sample_scene


class TaskBalancedSampler:
    """Train-split rows: a task by ``task_weights``, then a prompt of that task uniformly."""

    def __init__(self, rows: Sequence[dict], task_weights: Sequence[float]):
        self.by_task = {t: [r for r in rows if r["task"] == t] for t in TASKS}
        w = np.array([wt if self.by_task[t] else 0.0 for t, wt in zip(TASKS, task_weights)], dtype=float)
        if w.sum() <= 0:
            raise ValueError("task_weights: no train prompts for any task with positive weight")
        self.p = w / w.sum()

    def sample(self, rng: np.random.Generator, n: int) -> list[dict]:
        out = []
        for _ in range(n):
            rows = self.by_task[TASKS[int(rng.choice(len(TASKS), p=self.p))]]
            out.append(rows[int(rng.integers(len(rows)))])
        return out


def _group(spec: dict, count: int) -> dict:
    return {"color": spec["color"], "shape": spec["shape"], "count": count}


def near_miss(row: dict, rng: np.random.Generator) -> dict:
    """A scene spec one mistake away from ``row``'s caption, built from the caption's own objects only.

    single object → two of it; counting n → n ± 1 (equally likely; 4 + 1 becomes 3, 2 − 1 a single
    object); two objects → one of them alone or twice (each 1/4); position → the relation flipped.
    No colour or shape is changed, so no colour–shape pair outside the caption (e.g. a held-out test
    composition) is ever drawn.
    """
    task, objs = row["task"], row["objects"]
    if task == "single_object":
        return {"task": "counting", "objects": [_group(objs[0], 2)], "relation": None}
    if task == "counting":
        n = objs[0]["count"] + (1 if rng.random() < 0.5 else -1)
        top = max(COUNT_WORDS)
        n = top - 1 if n > top else n
        if n == 1:
            return {"task": "single_object", "objects": [_group(objs[0], 1)], "relation": None}
        return {"task": "counting", "objects": [_group(objs[0], n)], "relation": None}
    if task == "two_object":
        keep = objs[int(rng.integers(2))]
        if rng.random() < 0.5:
            return {"task": "single_object", "objects": [_group(keep, 1)], "relation": None}
        return {"task": "counting", "objects": [_group(keep, 2)], "relation": None}
    if task == "position":
        return {"task": "position", "objects": objs, "relation": OPPOSITE[row["relation"]]}
    raise ValueError(f"unknown task {task!r}; tasks: {', '.join(TASKS)}")


def scene_specs(rows: Sequence[dict], rng: np.random.Generator, caption_noise: float) -> list[dict]:
    """What to render for each captioned row: the row itself, or with probability ``caption_noise`` a near miss.

    ``caption_noise = 0`` returns ``rows`` without touching ``rng``, so clean runs draw exactly as before.
    """
    if caption_noise <= 0:
        return list(rows)
    return [near_miss(r, rng) if rng.random() < caption_noise else r for r in rows]


def render_rows(rows: Sequence[dict], rng: np.random.Generator) -> torch.Tensor:
    """A fresh scene per row, rendered: float ``[B, 3, 64, 64]`` in [-1, 1]."""
    imgs = np.stack([render(sample_scene(r, rng)) for r in rows])  # [B, 64, 64, 3] uint8
    return torch.from_numpy(imgs).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


def scaled_latents(vae, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Posterior samples of ``x`` in the denoiser's units: ``z₀ = (E(x) − shift) · scale``.

    ``shift`` and ``scale`` are the VAE config's ``shift_factor`` (None = 0, the SD convention) and
    ``scaling_factor``, the inverse of the pipelines' decoding ``D(z / scale + shift)``.
    """
    z = vae.encode(x).latent_dist.sample(generator=gen)  # [B, 4, h, w]
    shift = vae.config.shift_factor
    return (z - shift if shift else z) * vae.config.scaling_factor


class TrainingData:
    """The sampler of train rows and the training randomness (saved in checkpoints, see the module docstring)."""

    def __init__(self, task_weights: Sequence[float], seed: int):
        self.sampler = TaskBalancedSampler(load_split("train"), task_weights)
        self.seed = seed
        self.rng = np.random.default_rng(seed)  # prompts, scenes
        self.gen = torch.Generator().manual_seed(seed + 1)  # posterior samples, dropout, t, noise

    def images(self, n: int) -> torch.Tensor:
        """``n`` fresh renders of sampled rows (captions unused): ``[n, 3, 64, 64]`` in [-1, 1]."""
        return render_rows(self.sampler.sample(self.rng, n), self.rng)

    def latents(self, vae, cfg) -> tuple[torch.Tensor, list[str]]:
        """A denoiser batch: ``(z₀ [B, 4, h, w], prompts)`` for ``B = cfg.batch_size``.

        1. rows = B / K sampled rows (K = noise_per_image); scenes = a near miss of each with probability
           caption_noise, else the row; x = their renders                       # [B/K, 3, 64, 64]
        2. z₀ = scaled_latents(vae, x), each repeated K times in a row          # [B, 4, h, w]
        3. prompts = each row's prompt K times, each replaced by "" with probability cond_dropout
        """
        k = cfg.noise_per_image
        rows = self.sampler.sample(self.rng, cfg.batch_size // k)
        x = render_rows(scene_specs(rows, self.rng, cfg.caption_noise), self.rng)  # captions stay rows' prompts
        with torch.no_grad():
            z0 = scaled_latents(vae, x, self.gen).repeat_interleave(k, 0)  # [B, 4, h, w]
        prompts = [r["prompt"] for r in rows for _ in range(k)]
        drop = torch.rand(len(prompts), generator=self.gen) < cfg.cond_dropout
        return z0, ["" if d else p for p, d in zip(prompts, drop.tolist())]

    @torch.no_grad()
    def fresh_posteriors(self, vae, n: int, chunk: int = 64) -> Iterator[tuple[list[dict], object, torch.Tensor]]:
        """``(rows, posterior, posterior sample [b, 4, h, w])`` of ``n`` fresh renders, ``chunk`` at a time.

        They draw from their own generators (seed + 7): the training draws are unaffected.
        """
        rng = np.random.default_rng(self.seed + 7)
        gen = torch.Generator().manual_seed(self.seed + 7)
        for i in range(0, n, chunk):
            rows = self.sampler.sample(rng, min(chunk, n - i))
            post = vae.encode(render_rows(rows, rng)).latent_dist
            yield rows, post, post.sample(generator=gen)

    def state_dict(self) -> dict:
        return {"data_rng": self.rng.bit_generator.state, "torch_gen": self.gen.get_state().tolist()}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["data_rng"]
        self.gen.set_state(torch.tensor(state["torch_gen"], dtype=torch.uint8))
