"""Training of the MotionWorld evaluator (:mod:`worlds.motion.evaluator`): symmetric InfoNCE on generated clips.

**Prompts**: by default every prompt of the grammar (``prompts="all"``: the 293 train and the 62 test
prompts). The evaluator is a measuring instrument, like GenEval's object detector: it must recognise the
held-out compositions it is asked to score, and what it learns from the generator's clips is what the
words mean, not how to produce motions. The generator under RL never sees a test prompt (its prompt
source is ``motion_train``); the test split stays unseen *by the model being measured*. ``prompts="train"``
trains on the train split only, to measure how far the evaluator itself generalises to held-out
compositions.

**Data**: a pool of :attr:`TrainConfig.pool_per_prompt` clips per prompt (normalised features), of which
:attr:`~TrainConfig.refresh` slots are regenerated after every step in round-robin order, so the run sees
``steps × refresh`` fresh clips on top of the pool. Clip ``k`` of prompt ``i`` in its ``g``-th generation
has generator seed ``SeedSequence([seed, POOL_TAG, i, k, g])`` — never one of the evaluation seeds
(``dataset_seed(seed, i, k)`` hashes three words) — and the pool at any step is a function of the step,
so a resumed run rebuilds it exactly. **Lengths**: with probability :attr:`~TrainConfig.length_jitter` a
clip gets a length drawn uniformly from :attr:`~TrainConfig.frames_range` joint frames
(``generate(..., frames=)``: the actions keep their timing rules inside the longer or shorter clip; a
"then" clip's halves move with its midpoint), else the generator's own length for the prompt. Generators
with a fixed sample shape (MDM-style models sample e.g. 96 feature frames for every prompt) are so inside
the evaluator's training distribution. A jittered clip the judge rejects falls back to the generator's own
length (same seed): "then" clips shorter than about 90 frames squeeze their actions out of the halves
(judge strict 0.24 at 60 frames, 0.57 at 80, 1.0 from 97), and the evaluator must not learn that a clip
without the action shows it.

**Batches** (:func:`draw_batch`, RNG ``default_rng([seed, BATCH_TAG, step])``):

* :attr:`~TrainConfig.anchors` distinct prompts, drawn by composition (single / while / then with
  :attr:`~TrainConfig.compose_weights`, uniform inside), each with a random pool clip;
* **hard negatives**: for each anchor, :attr:`~TrainConfig.hard_negatives` prompts that differ by one edit
  (:func:`worlds.motion.grammar.mismatches`: another hand, direction or count, the other order of a "then",
  an arm action added or dropped, "then" <-> "while"), with their own clips, so that the in-batch
  negatives include the close prompts the evaluator must separate;
* **halves**: :attr:`~TrainConfig.halves` "then" clips of the batch also give one half (first ``n // 2``
  frames or the rest) paired with that half's clause prompt — what the segment-dense reward scores.

**Loss**: symmetric InfoNCE over the batch's cosine logits times a learned ``1 / temperature`` (CLIP;
capped at 100). Items with the same prompt text (a half's clause prompt can equal an anchor's) are all
positives of each other: the target row is uniform over them.

**Optimiser**: AdamW, linear warm-up then cosine decay to ``lr_min``; gradient norm clipped at 1. The
dropout RNG is reseeded from ``(seed, step)`` every step, so a run resumed from a checkpoint continues
bit for bit.

Entry point: :func:`train` (``python -m worlds.motion train-evaluator`` is its command line).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from foundation.atomic_io import replacing

from .evaluator import (
    EvaluatorConfig,
    MotionEvaluator,
    grammar_vocab,
    pad_batch,
    r_precision,
    segment_prompts,
)
from .features import load_stats
from .generator import dataset_seed, generate
from .grammar import MotionSpec, enumerate_specs, format_prompt, mismatches, split_of, test_rows
from .judge import judge

#: extra words of the pool and batch seed sequences (keep them apart from every other seed use)
POOL_TAG, BATCH_TAG, TORCH_TAG, LENGTH_TAG = 71_401, 71_402, 71_403, 71_404
#: master seed of the validation clips (``dataset_seed(VAL_SEED, i, k)`` over the test split)
VAL_SEED = 10_000
CHECKPOINT = "checkpoint.pt"
LOG = "train_log.jsonl"
#: prompt sets
PROMPT_SETS = ("all", "train")


@dataclass(frozen=True)
class TrainConfig:
    """The recipe (``config.json``'s ``"train"``); :meth:`tiny` gives toy sizes for tests."""

    seed: int = 0
    #: "all" (train + test prompts: the shipped instrument) or "train" (generalisation study)
    prompts: str = "all"
    steps: int = 3000
    anchors: int = 32
    hard_negatives: int = 1
    halves: int = 8
    #: sampling weights of the compositions of the anchors (single, while, then)
    compose_weights: tuple[float, float, float] = (0.15, 0.25, 0.6)
    pool_per_prompt: int = 8
    refresh: int = 8
    #: probability that a pool clip gets a length from ``frames_range`` instead of the generator's own
    length_jitter: float = 0.5
    #: joint frames of the jittered lengths (inclusive; the generator allows 60–200)
    frames_range: tuple[int, int] = (60, 200)
    lr: float = 5e-4
    lr_min: float = 2e-5
    warmup: int = 200
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    #: validation (R-precision on test-split clips of VAL_SEED) and checkpoint period, steps
    eval_every: int = 250
    val_clips: int = 2
    #: only N prompts of the set, evenly spaced over its enumeration order (0 = all): toy runs
    prompt_limit: int = 0
    model: EvaluatorConfig = field(default_factory=EvaluatorConfig)

    def __post_init__(self) -> None:
        if self.prompts not in PROMPT_SETS:
            raise ValueError(f"prompts must be one of {PROMPT_SETS}, got {self.prompts!r}")
        for name in ("steps", "anchors", "pool_per_prompt", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("hard_negatives", "halves", "refresh", "warmup", "val_clips", "prompt_limit"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if not 0.0 <= self.length_jitter <= 1.0:
            raise ValueError(f"length_jitter must be in [0, 1], got {self.length_jitter}")
        lo, hi = self.frames_range
        if not 60 <= lo <= hi <= 200:
            raise ValueError(
                f"frames_range must satisfy 60 <= low <= high <= 200 joint frames, got {self.frames_range}"
            )
        if len(self.compose_weights) != 3 or min(self.compose_weights) < 0 or sum(self.compose_weights) <= 0:
            raise ValueError(f"compose_weights must be 3 non-negative weights, got {self.compose_weights}")

    @classmethod
    def tiny(cls, **kw: Any) -> TrainConfig:
        """Toy sizes (seconds on one thread)."""
        model = EvaluatorConfig(dim=16, d_model=16, heads=2, ff=32, motion_layers=1, text_layers=1, patch=8)
        base = dict(
            steps=4,
            anchors=4,
            hard_negatives=1,
            halves=1,
            pool_per_prompt=1,
            refresh=1,
            warmup=1,
            eval_every=2,
            val_clips=0,
            prompt_limit=12,
            model=model,
        )
        return cls(**{**base, **kw})

    def to_dict(self) -> dict:
        """JSON-ready dict (the model config nested)."""
        d = asdict(self)
        d["compose_weights"] = list(self.compose_weights)
        d["frames_range"] = list(self.frames_range)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        """Inverse of :meth:`to_dict` (unknown keys are an error)."""
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown training config fields {sorted(unknown)}; fields: {sorted(names)}")
        d = dict(d)
        if "model" in d and isinstance(d["model"], dict):
            d["model"] = EvaluatorConfig.from_dict(d["model"])
        if "compose_weights" in d:
            d["compose_weights"] = tuple(float(w) for w in d["compose_weights"])
        if "frames_range" in d:
            d["frames_range"] = tuple(int(f) for f in d["frames_range"])
        return cls(**d)


# --------------------------------------------------------------------------------------------
# data
# --------------------------------------------------------------------------------------------


def training_specs(cfg: TrainConfig) -> list[MotionSpec]:
    """The prompts the evaluator trains on, in enumeration order."""
    specs = list(enumerate_specs())
    if cfg.prompts == "train":
        specs = [s for s in specs if split_of(s) == "train"]
    if cfg.prompt_limit and cfg.prompt_limit < len(specs):
        keep = np.unique(np.linspace(0, len(specs) - 1, cfg.prompt_limit).round().astype(int))
        specs = [specs[i] for i in keep]
    return specs


def clip_seed(seed: int, prompt_index: int, k: int, generation: int) -> int:
    """Generator seed of pool slot ``(prompt_index, k)`` in its ``generation``-th filling."""
    ss = np.random.SeedSequence([int(seed), POOL_TAG, int(prompt_index), int(k), int(generation)])
    return int(ss.generate_state(1, np.uint32)[0])


def clip_length(cfg: TrainConfig, prompt_index: int, k: int, generation: int) -> int | None:
    """Joint frames of that pool clip (``None``: the generator's own length for the prompt).

    Drawn from ``frames_range`` with probability ``length_jitter``.
    """
    if cfg.length_jitter <= 0.0:
        return None
    rng = np.random.default_rng([int(cfg.seed), LENGTH_TAG, int(prompt_index), int(k), int(generation)])
    jitter = rng.random() < cfg.length_jitter
    frames = int(rng.integers(cfg.frames_range[0], cfg.frames_range[1] + 1))
    return frames if jitter else None


class ClipPool:
    """``pool_per_prompt`` normalised clips per prompt, refreshed round-robin (``refresh`` slots per step)."""

    def __init__(self, cfg: TrainConfig, specs: list[MotionSpec], mean: np.ndarray, std: np.ndarray):
        self.cfg, self.specs, self.mean, self.std = cfg, specs, mean, std
        self.k = cfg.pool_per_prompt
        self.size = len(specs) * self.k
        self.clips: list[np.ndarray] = [np.zeros(0)] * self.size

    def generation(self, slot: int, step: int) -> int:
        """How many times ``slot`` has been regenerated before ``step`` (refreshes happen after a step)."""
        done = step * self.cfg.refresh  # refresh events so far, in slot order 0, 1, …, size − 1, 0, …
        return 0 if done <= slot else (done - 1 - slot) // self.size + 1

    def fill(self, slot: int, step: int) -> None:
        i, k = divmod(slot, self.k)
        g = self.generation(slot, step)
        spec, seed, frames = self.specs[i], clip_seed(self.cfg.seed, i, k, g), clip_length(self.cfg, i, k, g)
        motion = generate(spec, seed, frames)
        if frames is not None and not judge(motion.joints, spec)["strict"]:
            motion = generate(spec, seed)  # squeezed out of its length: the generator's own length
        feats = motion.features()
        self.clips[slot] = ((feats - self.mean) / self.std).astype(np.float32)

    def build(self, step: int) -> None:
        """Every slot as it is at the start of ``step``."""
        for slot in range(self.size):
            self.fill(slot, step)

    def refresh_after(self, step: int) -> None:
        """Regenerate the slots refreshed after ``step`` (so the pool is that of ``step + 1``)."""
        for r in range(self.cfg.refresh):
            self.fill((step * self.cfg.refresh + r) % self.size, step + 1)

    def clip(self, prompt_index: int, k: int) -> np.ndarray:
        return self.clips[prompt_index * self.k + k]


@dataclass
class Batch:
    """Normalised padded motions, their lengths, their prompt texts and the positive-pair groups."""

    motions: torch.Tensor
    lengths: torch.Tensor
    texts: list[str]
    groups: torch.Tensor


def hard_negative_table(specs: list[MotionSpec]) -> list[list[int]]:
    """For each prompt index, the indices of its one-edit wrong prompts that are in the training set."""
    index = {s: i for i, s in enumerate(specs)}
    return [[index[m] for _, m in mismatches(s) if m in index] for s in specs]


def draw_batch(
    cfg: TrainConfig, step: int, specs: list[MotionSpec], pool: ClipPool, negatives: list[list[int]]
) -> Batch:
    """The batch of ``step`` (see the module docstring); a function of ``(seed, step)`` and the pool."""
    rng = np.random.default_rng([cfg.seed, BATCH_TAG, step])
    compose = np.array([("single", "while", "then").index(s.compose) for s in specs])
    weights = np.asarray(cfg.compose_weights, dtype=np.float64)[compose]
    counts = np.bincount(compose, minlength=3)
    weights = weights / counts[compose]
    weights = weights / weights.sum()
    n_anchor = min(cfg.anchors, int((weights > 0).sum()))
    chosen = list(rng.choice(len(specs), size=n_anchor, replace=False, p=weights))
    in_batch = set(chosen)
    for a in list(chosen):
        options = [j for j in negatives[a] if j not in in_batch]
        for j in rng.permutation(options)[: cfg.hard_negatives] if options else []:
            chosen.append(int(j))
            in_batch.add(int(j))
    items = [(pool.clip(int(i), int(rng.integers(pool.k))), format_prompt(specs[int(i)])) for i in chosen]
    then = [n for n, i in enumerate(chosen) if specs[int(i)].compose == "then"]
    for n in rng.permutation(then)[: cfg.halves] if then else []:
        clip, prompt = items[int(n)]
        first, second = segment_prompts(specs[int(chosen[int(n)])])
        h = len(clip) // 2
        items.append((clip[:h], first) if rng.random() < 0.5 else (clip[h:], second))
    motions, lengths = pad_batch([c for c, _ in items])
    texts = [t for _, t in items]
    ids = {t: g for g, t in enumerate(dict.fromkeys(texts))}
    return Batch(motions, lengths, texts, torch.tensor([ids[t] for t in texts]))


def contrastive_loss(
    motion_emb: torch.Tensor, text_emb: torch.Tensor, groups: torch.Tensor, logit_scale: torch.Tensor
) -> torch.Tensor:
    """Symmetric InfoNCE; every pair with the same ``groups`` id is a positive (uniform soft targets)."""
    logits = logit_scale.exp().clamp(max=100.0) * motion_emb @ text_emb.T
    same = (groups[:, None] == groups[None, :]).float()
    target = same / same.sum(1, keepdim=True)
    loss_m = -(target * torch.log_softmax(logits, dim=1)).sum(1).mean()
    loss_t = -(target * torch.log_softmax(logits.T, dim=1)).sum(1).mean()
    return (loss_m + loss_t) / 2


def learning_rate(cfg: TrainConfig, step: int) -> float:
    """Linear warm-up to ``lr`` over ``warmup`` steps, then cosine decay to ``lr_min`` at ``steps``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    progress = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr_min + 0.5 * (cfg.lr - cfg.lr_min) * (1.0 + math.cos(math.pi * min(1.0, progress)))


# --------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------


def validation_set(cfg: TrainConfig) -> tuple[list[np.ndarray], list[str]]:
    """``val_clips`` real clips per test prompt (master seed :data:`VAL_SEED`), denormalised."""
    feats, prompts = [], []
    for i, row in enumerate(test_rows()):
        for k in range(cfg.val_clips):
            feats.append(generate(row, dataset_seed(VAL_SEED, i, k)).features())
            prompts.append(row["prompt"])
    return feats, prompts


def validate(model: MotionEvaluator, feats: list[np.ndarray], prompts: list[str]) -> dict[str, float]:
    """R-precision and mean matched cosine of the validation set."""
    if len(feats) < 2:
        return {}
    model._text_cache.clear()
    m, t = model.embed_motions(feats), model.embed_texts(prompts)
    model._text_cache.clear()
    out = r_precision(m, t, prompts)
    out["cosine"] = float((m * t).sum(-1).mean())
    return out


# --------------------------------------------------------------------------------------------
# the loop
# --------------------------------------------------------------------------------------------


def _save_checkpoint(
    out: Path, model: MotionEvaluator, opt: torch.optim.Optimizer, step: int, cfg: TrainConfig, wall: float
) -> None:
    state = {"step": step, "model": model.state_dict(), "optimizer": opt.state_dict(), "config": cfg.to_dict()}
    with replacing(out / CHECKPOINT) as tmp:
        torch.save({**state, "wall_s": wall}, tmp)


def build_model(cfg: TrainConfig) -> MotionEvaluator:
    """A freshly initialised evaluator (torch RNG seeded with ``cfg.seed``)."""
    mean, std = load_stats()
    torch.manual_seed(cfg.seed)
    return MotionEvaluator(cfg.model, grammar_vocab(), mean, std)


def train(
    cfg: TrainConfig,
    out: str | Path,
    resume: bool = False,
    export: str | Path | None = None,
    stop_after: int | None = None,
    log: Callable[[str], None] | None = print,
) -> MotionEvaluator:
    """Train the evaluator; run folder ``out`` (``checkpoint.pt``, ``train_log.jsonl``, ``final/``).

    ``resume``: continue from ``out/checkpoint.pt`` with its saved config (``cfg`` is ignored except for
    a larger ``steps``). ``export``: also write the final model there (e.g. ``worlds/motion/models/evaluator``).
    ``stop_after``: stop (with a checkpoint) once that many steps are done, as an interruption would.
    Returns the trained model (eval mode).
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    say = log or (lambda s: None)
    start, wall0 = 0, 0.0
    state = None
    if resume:
        path = out / CHECKPOINT
        if not path.is_file():
            raise FileNotFoundError(f"nothing to resume: {path} is missing")
        state = torch.load(path, map_location="cpu", weights_only=True)
        saved = TrainConfig.from_dict(state["config"])
        cfg = replace(saved, steps=max(saved.steps, cfg.steps))
        start, wall0 = int(state["step"]), float(state.get("wall_s", 0.0))
        say(f"resuming at step {start} of {cfg.steps}")
    specs = training_specs(cfg)
    model = build_model(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    if state is not None:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
    t0 = time.time()
    pool = ClipPool(cfg, specs, model.mean.numpy(), model.std.numpy())
    pool.build(start)
    negatives = hard_negative_table(specs)
    val_feats, val_prompts = validation_set(cfg)
    say(
        f"{len(specs)} prompts ({cfg.prompts}), pool {pool.size} clips ({time.time() - t0:.1f} s), "
        f"{sum(p.numel() for p in model.parameters())} parameters"
    )
    logf = open(out / LOG, "a", encoding="utf-8")
    losses: list[float] = []
    step = start
    try:
        while step < cfg.steps:
            model.train()
            torch.manual_seed(int(np.random.SeedSequence([cfg.seed, TORCH_TAG, step]).generate_state(1)[0]))
            batch = draw_batch(cfg, step, specs, pool, negatives)
            for g in opt.param_groups:
                g["lr"] = learning_rate(cfg, step)
            m = model.encode_motions(batch.motions, batch.lengths)
            t = model.encode_text_ids(model.token_ids(batch.texts))
            loss = contrastive_loss(m, t, batch.groups, model.logit_scale)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            with torch.no_grad():
                model.logit_scale.clamp_(max=math.log(100.0))
            losses.append(loss.item())
            pool.refresh_after(step)
            step += 1
            if step % cfg.eval_every == 0 or step == cfg.steps or step == stop_after:
                wall = wall0 + time.time() - t0
                rec = {
                    "step": step,
                    "loss": float(np.mean(losses)),
                    "lr": learning_rate(cfg, step - 1),
                    "temperature": math.exp(-model.logit_scale.item()),
                    "wall_s": round(wall, 1),
                    **{f"val/{k}": v for k, v in validate(model, val_feats, val_prompts).items()},
                }
                losses = []
                logf.write(json.dumps(rec) + "\n")
                logf.flush()
                say(json.dumps(rec))
                _save_checkpoint(out, model, opt, step, cfg, wall)
            if stop_after is not None and step >= stop_after:
                break
    finally:
        logf.close()
    model.eval()
    if step >= cfg.steps:
        wall = wall0 + time.time() - t0
        extra = {
            "train": cfg.to_dict(),
            "summary": {"steps": step, "wall_s": round(wall, 1), "val": validate(model, val_feats, val_prompts)},
        }
        model.save(out / "final", extra)
        if export is not None:
            model.save(export, extra)
            say(f"exported to {export}")
    return model


__all__ = [
    "CHECKPOINT",
    "LOG",
    "PROMPT_SETS",
    "VAL_SEED",
    "Batch",
    "ClipPool",
    "TrainConfig",
    "build_model",
    "clip_seed",
    "clip_length",
    "contrastive_loss",
    "draw_batch",
    "hard_negative_table",
    "learning_rate",
    "train",
    "training_specs",
    "validate",
    "validation_set",
]
