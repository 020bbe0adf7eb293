"""MotionWorld's text–motion evaluator: a small contrastive model and the HumanML3D set metrics.

A measuring instrument in the style of the T2M evaluator (Guo et al. 2022) and TMR (Petrovich et al. 2023):
a **motion encoder** and a **text encoder** map a clip and a prompt into one L2-normalised embedding space
(:attr:`EvaluatorConfig.dim` = 128) where matching pairs are close. It was trained with a symmetric InfoNCE
loss on procedurally generated clips of *every* prompt of the grammar (train and test splits; see
:mod:`worlds.motion.evaluator_train` and ``worlds/motion/README.md``, "Evaluator") and ships in
``models/evaluator/`` (``model.safetensors`` + ``config.json``).

* **Motion encoder**: the denormalised features ``[frames, 263]`` are normalised with statistics stored
  in the weights (the shipped ``data/motion_{mean,std}.npy`` at training time), cut into patches of
  :attr:`~EvaluatorConfig.patch` frames (zero-padded; a ragged tail patch is zero-filled), projected to
  ``d_model``, given sinusoidal positions and a learned ``[CLS]`` token, run through a pre-norm transformer
  with a key-padding mask (variable lengths in one batch), and the ``[CLS]`` output is projected and
  L2-normalised.
* **Text encoder**: word-level over the grammar's vocabulary (:func:`tokenize`: lower case, one final
  period dropped, whitespace split; unknown words map to ``<unk>``), learned positions, a ``[CLS]`` token,
  a pre-norm transformer; the ``[CLS]`` output is projected and L2-normalised. Word order matters
  ("A then B" vs "B then A").

Set metrics (:func:`set_metrics`, the HumanML3D protocol on this evaluator's embeddings; distances are
Euclidean between unit vectors, so in ``[0, 2]``):

* **R-precision** top-1/2/3 (:func:`r_precision`): motions in batches of 32; each motion's own prompt is
  ranked by distance among the 32 prompts of its batch (its own and 31 others). Batches are drawn with a
  fixed seed in round-robin order over repeated prompts so that a batch holds distinct prompts where the
  set allows; a prompt identical to the motion's own never counts against it. The last incomplete batch
  is dropped (a set smaller than one batch is one batch).
* **Matching score** (:func:`matching_score`): mean distance between each motion and its own prompt.
* **FID** (:func:`fid`): Fréchet distance between the Gaussians fitted to the motion embeddings and to
  those of *real* clips drawn by the generator for the same prompts (:func:`reference_features`, master
  seed :data:`REFERENCE_SEED`).
* **Diversity** (:func:`diversity`): mean distance between :data:`DIVERSITY_PAIRS` random pairs of motion
  embeddings (fixed seed).
* **MM-Dist** (``mm_dist``): HumanML3D's name for the matching score.
* **MultiModality** (:func:`multimodality`): for each prompt with at least two motions, the mean distance of
  :data:`MULTIMODALITY_PAIRS` random pairs of *its own* motions; averaged over those prompts. How different
  the motions of one text are (Guo et al. 2022 / MDM draw 10 pairs from 30 motions per text; here the pairs
  come from however many motions per prompt the set holds, reported as ``multimodality_texts``).

``python -m worlds.motion.evaluator`` measures them (real clips vs perturbed and mismatched ones) on the
test split; the README holds the numbers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .features import FEATURE_DIM, load_stats
from .generator import dataset_seed, generate
from .grammar import PHRASES, all_prompts, format_prompt, spec_of

#: where the shipped evaluator lives
MODEL_DIR = Path(__file__).resolve().parent / "models" / "evaluator"
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
#: ``config.json``'s ``format`` field
FORMAT = "motionworld-evaluator"
#: special tokens: padding, unknown word, the pooled ``[CLS]`` slot
PAD, UNK, CLS = "<pad>", "<unk>", "<cls>"
SPECIALS = (PAD, UNK, CLS)
#: master seed of the real reference clips of :func:`set_metrics` (per-clip seeds ``dataset_seed(seed, i, 0)``)
REFERENCE_SEED = 20_000
#: R-precision batch (HumanML3D: 32)
R_PRECISION_BATCH = 32
#: random pairs of the diversity metric (HumanML3D: 300)
DIVERSITY_PAIRS = 300
#: random pairs per prompt of the multimodality metric (HumanML3D: 10)
MULTIMODALITY_PAIRS = 10
#: motions per forward pass when embedding
EMBED_BATCH = 128


# --------------------------------------------------------------------------------------------
# text
# --------------------------------------------------------------------------------------------


def tokenize(prompt: str) -> list[str]:
    """Words of ``prompt``: lower case, whitespace split, one final period dropped."""
    text = " ".join(str(prompt).strip().lower().split())
    if text.endswith("."):
        text = text[:-1].rstrip()
    return text.split()


def grammar_vocab() -> list[str]:
    """:data:`SPECIALS` then every word of the grammar's prompts, sorted (the shipped vocabulary)."""
    words = {w for p in all_prompts() for w in tokenize(p)}
    return [*SPECIALS, *sorted(words)]


def clause_prompt(action: str) -> str:
    """The single-action prompt of ``action`` (``"jump_2"`` -> ``"a person jumps twice"``)."""
    if action not in PHRASES:
        raise ValueError(f"unknown action {action!r}")
    return f"a person {PHRASES[action][0]}"


def segment_prompts(prompt) -> tuple[str, str] | None:
    """For an "A then B" prompt (string, row or spec): the clause prompts of its halves, else ``None``."""
    spec = spec_of(prompt)
    if spec.compose != "then":
        return None
    return clause_prompt(spec.actions[0]), clause_prompt(spec.actions[1])


# --------------------------------------------------------------------------------------------
# the model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvaluatorConfig:
    """Architecture of the evaluator (``config.json``'s ``"model"``)."""

    #: shared embedding size
    dim: int = 128
    #: transformer width (both encoders)
    d_model: int = 128
    heads: int = 4
    #: feed-forward width
    ff: int = 256
    motion_layers: int = 3
    text_layers: int = 2
    #: frames per motion token
    patch: int = 4
    dropout: float = 0.1
    #: longest prompt in words (longer prompts are cut)
    max_words: int = 24
    #: initial ``1 / temperature`` of the contrastive logits (learned, capped at 100)
    init_logit_scale: float = 1.0 / 0.07

    @classmethod
    def from_dict(cls, d: dict) -> EvaluatorConfig:
        """The config from a dict (unknown keys are an error)."""
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown evaluator config fields {sorted(unknown)}; fields: {sorted(names)}")
        return cls(**d)


def sinusoid(n: int, d: int) -> torch.Tensor:
    """Sinusoidal position codes ``[n, d]`` (Vaswani et al. 2017)."""
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    i = torch.arange(0, d, 2, dtype=torch.float32)
    angle = pos / torch.pow(10000.0, i / d)
    out = torch.zeros(n, d)
    out[:, 0::2] = torch.sin(angle)
    out[:, 1::2] = torch.cos(angle[:, : d // 2])
    return out


def _encoder(cfg: EvaluatorConfig, layers: int) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(
        cfg.d_model, cfg.heads, cfg.ff, cfg.dropout, activation="gelu", batch_first=True, norm_first=True
    )
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


class MotionEncoder(nn.Module):
    """Normalised features ``[B, T, 263]`` (zero-padded) and lengths ``[B]`` -> embeddings ``[B, dim]``."""

    def __init__(self, cfg: EvaluatorConfig):
        super().__init__()
        self.patch = cfg.patch
        self.proj = nn.Linear(FEATURE_DIM * cfg.patch, cfg.d_model)
        self.cls = nn.Parameter(torch.randn(1, 1, cfg.d_model) * 0.02)
        self.encoder = _encoder(cfg, cfg.motion_layers)
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.dim)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        b, t, f = x.shape
        n_tok = -(-t // self.patch)
        x = nn.functional.pad(x, (0, 0, 0, n_tok * self.patch - t)).reshape(b, n_tok, self.patch * f)
        h = self.proj(x) + sinusoid(n_tok, self.proj.out_features).to(x)
        h = torch.cat([self.cls.expand(b, -1, -1), h], dim=1)
        tokens = torch.div(lengths + self.patch - 1, self.patch, rounding_mode="floor")
        pad = torch.arange(n_tok, device=x.device)[None] >= tokens[:, None]
        pad = torch.cat([torch.zeros(b, 1, dtype=torch.bool, device=x.device), pad], dim=1)
        h = self.encoder(h, src_key_padding_mask=pad)
        return self.head(self.norm(h[:, 0]))


class TextEncoder(nn.Module):
    """Token ids ``[B, L]`` (``<cls>`` first, ``<pad>`` = 0 after the words) -> embeddings ``[B, dim]``."""

    def __init__(self, cfg: EvaluatorConfig, vocab_size: int):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, cfg.d_model)
        self.pos = nn.Parameter(torch.randn(1, cfg.max_words + 1, cfg.d_model) * 0.02)
        self.encoder = _encoder(cfg, cfg.text_layers)
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids) + self.pos[:, : ids.shape[1]]
        h = self.encoder(h, src_key_padding_mask=ids == 0)
        return self.head(self.norm(h[:, 0]))


def _features_list(features: Any, lengths: Sequence[int] | None, name: str = "features") -> list[np.ndarray]:
    """Denormalised features as a list of float32 ``[frames_i, 263]`` arrays, each cut to its length.

    ``features``: an array / tensor ``[N, frames, 263]`` (or one ``[frames, 263]``) or a list of them.
    """
    if isinstance(features, (list, tuple)):
        items = list(features)
    else:
        if hasattr(features, "detach"):
            features = features.detach().float().cpu().numpy()
        arr = np.asarray(features)
        if arr.ndim == 2:
            arr = arr[None]
        if arr.ndim != 3 or arr.shape[-1] != FEATURE_DIM:
            raise ValueError(
                f"{name} must be denormalised HumanML3D features [N, frames, {FEATURE_DIM}] or a list "
                f"of [frames, {FEATURE_DIM}] arrays, got shape {tuple(arr.shape)}"
            )
        items = list(arr)
    out = []
    for x in items:
        if hasattr(x, "detach"):
            x = x.detach().float().cpu().numpy()
        x = np.asarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[-1] != FEATURE_DIM:
            raise ValueError(f"each of {name} must be [frames, {FEATURE_DIM}], got {tuple(x.shape)}")
        out.append(x)
    if lengths is not None:
        lengths = [int(n) for n in lengths]
        if len(lengths) != len(out):
            raise ValueError(f"{len(lengths)} lengths for {len(out)} motions")
        out = [x[: max(1, min(n, len(x)))] for x, n in zip(out, lengths)]
    for x in out:
        if len(x) < 1:
            raise ValueError(f"{name}: a motion has no frames")
    return out


def pad_batch(items: Sequence[np.ndarray | torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``[frames_i, F]`` arrays -> zero-padded float32 ``[B, max frames, F]`` and int64 lengths ``[B]``."""
    lengths = torch.tensor([len(x) for x in items], dtype=torch.long)
    out = torch.zeros(len(items), int(lengths.max()), items[0].shape[-1])
    for i, x in enumerate(items):
        out[i, : len(x)] = torch.as_tensor(x, dtype=torch.float32)
    return out, lengths


class MotionEvaluator(nn.Module):
    """The two encoders, the vocabulary, the normalisation statistics and the learned temperature.

    Inference helpers (no gradients, eval mode): :meth:`embed_texts`, :meth:`embed_motions` (denormalised
    features in, unit-norm numpy embeddings out). Training uses :meth:`encode_text_ids` /
    :meth:`encode_motions` on normalised tensors.
    """

    def __init__(
        self, cfg: EvaluatorConfig, vocab: Sequence[str], mean: np.ndarray | None = None, std: np.ndarray | None = None
    ):
        super().__init__()
        if tuple(vocab[: len(SPECIALS)]) != SPECIALS:
            raise ValueError(f"the vocabulary must start with {SPECIALS}")
        self.cfg = cfg
        self.vocab = list(vocab)
        self.word_ids = {w: i for i, w in enumerate(self.vocab)}
        if mean is None or std is None:
            mean, std = load_stats()
        self.register_buffer("mean", torch.as_tensor(np.asarray(mean, dtype=np.float32)).clone())
        self.register_buffer("std", torch.as_tensor(np.asarray(std, dtype=np.float32)).clone())
        self.motion = MotionEncoder(cfg)
        self.text = TextEncoder(cfg, len(self.vocab))
        self.logit_scale = nn.Parameter(torch.tensor(math.log(cfg.init_logit_scale)))
        self._text_cache: dict[str, np.ndarray] = {}

    # --- tensors ------------------------------------------------------------------------------

    def token_ids(self, prompts: Sequence[str]) -> torch.Tensor:
        """int64 ``[B, L]``: ``<cls>``, the words (``<unk>`` when unknown, at most ``max_words``), ``<pad>``."""
        rows = [
            [self.word_ids[CLS]] + [self.word_ids.get(w, self.word_ids[UNK]) for w in tokenize(p)][: self.cfg.max_words]
            for p in prompts
        ]
        out = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.long)
        for i, r in enumerate(rows):
            out[i, : len(r)] = torch.tensor(r)
        return out

    def encode_text_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """Unit-norm text embeddings ``[B, dim]`` of token ids."""
        return nn.functional.normalize(self.text(ids.to(self.mean.device)), dim=-1)

    def encode_motions(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Unit-norm motion embeddings ``[B, dim]`` of *normalised*, zero-padded features ``[B, T, 263]``."""
        dev = self.mean.device
        return nn.functional.normalize(self.motion(x.to(dev), lengths.to(dev)), dim=-1)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Denormalised -> normalised features with the stored statistics."""
        return (x - self.mean.to(x)) / self.std.to(x)

    # --- inference ----------------------------------------------------------------------------

    @torch.no_grad()
    def embed_texts(self, prompts: Sequence[str]) -> np.ndarray:
        """Unit-norm float32 embeddings ``[N, dim]`` of prompts (cached per prompt; eval mode)."""
        prompts = [str(p) for p in prompts]
        missing = sorted({p for p in prompts if p not in self._text_cache})
        if missing:
            was = self.training
            self.eval()
            for i in range(0, len(missing), EMBED_BATCH):
                chunk = missing[i : i + EMBED_BATCH]
                emb = self.encode_text_ids(self.token_ids(chunk)).float().cpu().numpy()
                self._text_cache.update(zip(chunk, emb))
            self.train(was)
        if not prompts:
            return np.zeros((0, self.cfg.dim), dtype=np.float32)
        return np.stack([self._text_cache[p] for p in prompts])

    @torch.no_grad()
    def embed_motions(self, features: Any, lengths: Sequence[int] | None = None) -> np.ndarray:
        """Unit-norm float32 embeddings ``[N, dim]`` of denormalised features (eval mode).

        ``features``: ``[N, frames, 263]`` array / tensor (with optional ``lengths`` of the valid frames of
        each padded motion) or a list of ``[frames_i, 263]``. Non-finite motions give NaN rows.
        """
        items = _features_list(features, lengths)
        out = np.full((len(items), self.cfg.dim), np.nan, dtype=np.float32)
        ok = [i for i, x in enumerate(items) if np.all(np.isfinite(x))]
        order = sorted(ok, key=lambda i: len(items[i]))  # similar lengths share a batch: less padding
        was = self.training
        self.eval()
        for s in range(0, len(order), EMBED_BATCH):
            idx = order[s : s + EMBED_BATCH]
            x, n = pad_batch([items[i] for i in idx])
            x = self.normalize(x) * (torch.arange(x.shape[1])[None, :, None] < n[:, None, None])
            out[idx] = self.encode_motions(x, n).float().cpu().numpy()
        self.train(was)
        return out

    # --- files --------------------------------------------------------------------------------

    def save(self, path: str | Path, extra: dict | None = None) -> Path:
        """Write ``model.safetensors`` and ``config.json`` (with ``extra`` entries) into the folder ``path``."""
        from safetensors.torch import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        tmp = path / (WEIGHTS_NAME + ".tmp")
        save_file(state, str(tmp), metadata={"format": FORMAT})
        tmp.replace(path / WEIGHTS_NAME)
        (path / WEIGHTS_NAME).chmod(0o644)
        config = {"format": FORMAT, "version": 1, "model": asdict(self.cfg), "vocab": self.vocab, **(extra or {})}
        tmp = path / (CONFIG_NAME + ".tmp")
        tmp.write_text(json.dumps(config, indent=1) + "\n", encoding="utf-8")
        tmp.replace(path / CONFIG_NAME)
        return path

    @classmethod
    def from_dir(cls, path: str | Path, device: str | torch.device = "cpu") -> MotionEvaluator:
        """Load a folder written by :meth:`save` (eval mode, no gradients)."""
        from safetensors.torch import load_file

        path = Path(path)
        cfg_path, w_path = path / CONFIG_NAME, path / WEIGHTS_NAME
        for p in (cfg_path, w_path):
            if not p.is_file():
                raise FileNotFoundError(
                    f"{p} is missing: not a MotionWorld evaluator folder (train one with "
                    "scripts/train_motion_evaluator.py)"
                )
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
        if config.get("format") != FORMAT:
            raise ValueError(f"{cfg_path}: format {config.get('format')!r}, expected {FORMAT!r}")
        state = load_file(str(w_path))
        model = cls(
            EvaluatorConfig.from_dict(config["model"]), config["vocab"], state["mean"].numpy(), state["std"].numpy()
        )
        model.load_state_dict(state)
        model.config_json = config
        model.requires_grad_(False)
        return model.to(device).eval()


@lru_cache(maxsize=4)
def _load_cached(path: str, device: str) -> MotionEvaluator:
    return MotionEvaluator.from_dir(path, device)


def load_evaluator(path: str | Path | None = None, device: str = "cpu") -> MotionEvaluator:
    """The evaluator in ``path`` (default: the shipped one in ``models/evaluator``), loaded once per process."""
    return _load_cached(str(Path(path or MODEL_DIR).resolve()), str(device))


# --------------------------------------------------------------------------------------------
# set metrics
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# measurement (python -m worlds.motion.evaluator)
# --------------------------------------------------------------------------------------------

#: master seed of the "generated" real clips of :func:`measure` (the reference set uses REFERENCE_SEED)
MEASURE_SEED = 30_000
#: conditions of :func:`measure`
CONDITIONS: dict[str, str] = {
    "real": "real clips of the prompts, other seeds than the reference (the ceiling)",
    "noise_1cm": "real clips, Gaussian noise sigma = 1 cm per joint coordinate and frame",
    "noise_3cm": "real clips, Gaussian noise sigma = 3 cm",
    "frozen": "the clip's first pose held for its length",
    "mismatch_close": "a real clip of a one-edit wrong prompt (judge.mismatches), labelled with the prompt",
    "mismatch_random": "a real clip of another prompt of the set, labelled with the prompt",
}


def _rows(split: str) -> list[dict]:
    from .grammar import load_split

    return load_split(split)


def measure(
    split: str = "test",
    clips: int = 4,
    seed: int = 0,
    evaluator: MotionEvaluator | None = None,
    conditions: Sequence[str] = tuple(CONDITIONS),
    frames: int | None = None,
) -> dict[str, Any]:
    """The README's numbers: set metrics per condition, and the reward's separation of close prompts.

    ``clips`` clips per prompt of ``split`` (``generate(row, dataset_seed(MEASURE_SEED + seed, i, k),
    frames)``; ``frames`` = joint frames of every clip, ``None`` = the generator's own lengths), perturbed or
    swapped per :data:`CONDITIONS`, scored by :func:`set_metrics` against the reference clips of
    :data:`REFERENCE_SEED` (as long as the clips). ``separation``: for every real clip and every one-edit wrong prompt
    of its prompt (:func:`worlds.motion.judge.mismatches`), the fraction of (clip, wrong prompt) pairs
    whose reward is below the own prompt's, per edit kind, for the whole-clip and the segment-dense
    reward (which differ on "then" prompts only), and the mean cosines.
    """
    from .features import features_from_joints
    from .judge import mismatches

    ev = evaluator if evaluator is not None else load_evaluator()
    rows = _rows(split)
    rng = np.random.default_rng([seed, 7])
    prompts, specs, motions = [], [], []
    for i, row in enumerate(rows):
        for k in range(clips):
            spec = spec_of(row)
            prompts.append(format_prompt(spec))
            specs.append(spec)
            motions.append(generate(spec, dataset_seed(MEASURE_SEED + seed, i, k), frames))
    reference = reference_features(prompts, REFERENCE_SEED, [matched_frames(m.frames - 1) for m in motions])
    n = len(prompts)
    out: dict[str, Any] = {"split": split, "n": n, "frames": frames, "conditions": {}}
    for cond in conditions:
        if cond == "real":
            feats = [m.features() for m in motions]
        elif cond.startswith("noise_"):
            sigma = float(cond[len("noise_") : -2]) / 100.0
            feats = [
                features_from_joints(m.joints + rng.normal(0.0, sigma, m.joints.shape)).astype(np.float32)
                for m in motions
            ]
        elif cond == "frozen":
            feats = [features_from_joints(np.repeat(m.joints[:1], m.frames, 0)).astype(np.float32) for m in motions]
        elif cond == "mismatch_close":
            feats = []
            for spec, m in zip(specs, motions):
                wrong = mismatches(spec)
                feats.append(generate(wrong[int(rng.integers(len(wrong)))][1], m.seed, frames).features())
        elif cond == "mismatch_random":
            shift = rng.permutation(n)
            feats = []
            for j in range(n):
                other = next(int(x) for x in np.roll(shift, -j) if prompts[int(x)] != prompts[j])
                feats.append(motions[other].features())
        else:
            raise ValueError(f"unknown condition {cond!r}; conditions: {', '.join(CONDITIONS)}")
        out["conditions"][cond] = set_metrics(feats, prompts, reference=reference, seed=seed, evaluator=ev)
    # reward separation on the real clips
    whole = ev.embed_motions([m.features() for m in motions])
    halves = {}
    for j, m in enumerate(motions):
        x = m.features()
        h = len(x) // 2
        halves[j] = ev.embed_motions([x[:h], x[h:]])

    def reward(j: int, spec, dense: bool) -> float:
        seg = segment_prompts(spec) if dense else None
        if seg is None:
            return float(whole[j] @ ev.embed_texts([format_prompt(spec)])[0])
        t = ev.embed_texts(list(seg))
        return float((halves[j] * t).sum(-1).mean())

    sep: dict[str, dict[str, list[float]]] = {}
    for j, spec in enumerate(specs):
        own = {d: reward(j, spec, d) for d in (False, True)}
        for kind, wrong in mismatches(spec):
            for d in (False, True):
                key = ("dense/" if d else "") + kind
                rec = sep.setdefault(key, {"win": [], "own": [], "wrong": []})
                w = reward(j, wrong, d)
                rec["win"].append(float(own[d] > w))
                rec["own"].append(own[d])
                rec["wrong"].append(w)
    out["separation"] = {
        k: {
            "pairs": len(v["win"]),
            "accuracy": float(np.mean(v["win"])),
            "own": float(np.mean(v["own"])),
            "wrong": float(np.mean(v["wrong"])),
        }
        for k, v in sorted(sep.items(), key=lambda kv: (kv[0].startswith("dense/"), kv[0]))
    }
    for d in ("", "dense/"):
        wins = [w for k, v in sep.items() if k.startswith(d) and (d or "/" not in k) for w in v["win"]]
        out["separation"][d + "all"] = {"pairs": len(wins), "accuracy": float(np.mean(wins))}
    return out


def format_measurement(res: dict[str, Any]) -> str:
    """Markdown tables of a :func:`measure` result."""
    keys = ("r_precision_top1", "r_precision_top3", "matching_score", "cosine", "fid", "diversity")
    length = "the generator's own lengths" if res.get("frames") is None else f"{res['frames']} joint frames"
    lines = [
        f"{res['split']} split, {res['n']} clips ({length}); reference diversity "
        f"{next(iter(res['conditions'].values()))['reference_diversity']:.3f}",
        "",
        "| condition | R@1 | R@3 | matching | cosine | FID | diversity |",
        "|---|---|---|---|---|---|---|",
    ]
    for cond, m in res["conditions"].items():
        lines.append(f"| {cond} | " + " | ".join(f"{m[k]:.3f}" for k in keys) + " |")
    lines += ["", "| wrong prompt (edit) | pairs | own > wrong | mean cosine own / wrong |", "|---|---|---|---|"]
    for kind, s in res["separation"].items():
        extra = f"{s['own']:.3f} / {s['wrong']:.3f}" if "own" in s else ""
        lines.append(f"| {kind} | {s['pairs']} | {s['accuracy']:.4f} | {extra} |")
    return "\n".join(lines)


def _main(argv: Sequence[str] | None = None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description="Measure the MotionWorld evaluator's set metrics and reward separation.")
    ap.add_argument("--split", choices=("train", "test"), default="test")
    ap.add_argument("--clips", type=int, default=4, help="clips per prompt")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--frames", type=int, default=None, help="joint frames of every clip (default: natural)")
    ap.add_argument("--model", default=None, help="evaluator folder (default: the shipped one)")
    ap.add_argument("--json", default=None, help="also write the result as JSON here")
    args = ap.parse_args(argv)
    if args.clips < 1:
        ap.error("--clips must be >= 1")
    torch.set_num_threads(1)
    res = measure(args.split, args.clips, args.seed, load_evaluator(args.model), frames=args.frames)
    print(format_measurement(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")


__all__ = [
    "CONDITIONS",
    "CONFIG_NAME",
    "DIVERSITY_PAIRS",
    "MEASURE_SEED",
    "MODEL_DIR",
    "MULTIMODALITY_PAIRS",
    "REFERENCE_SEED",
    "R_PRECISION_BATCH",
    "SPECIALS",
    "WEIGHTS_NAME",
    "EvaluatorConfig",
    "MotionEncoder",
    "MotionEvaluator",
    "TextEncoder",
    "batch_order",
    "clause_prompt",
    "diversity",
    "embedding_metrics",
    "fid",
    "format_measurement",
    "grammar_vocab",
    "load_evaluator",
    "matched_frames",
    "matching_score",
    "measure",
    "multimodality",
    "pad_batch",
    "r_precision",
    "reference_features",
    "segment_prompts",
    "set_embeddings",
    "set_metrics",
    "sinusoid",
    "tokenize",
]


if __name__ == "__main__":
    _main()
