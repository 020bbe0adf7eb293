"""The MotionWorld evaluator's model: a motion encoder and a text encoder into one embedding space.

:class:`MotionEvaluator` (the architecture in :mod:`worlds.motion.evaluator`'s docstring; settings
:class:`EvaluatorConfig`), its folder format (``model.safetensors`` + ``config.json``, :meth:`~MotionEvaluator.save`
/ :meth:`~MotionEvaluator.from_dir`) and :func:`load_evaluator`, which loads the shipped one once per process.
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

from foundation.atomic_io import atomic_write_text, replacing

from .evaluator_text import CLS, SPECIALS, UNK, tokenize
from .features import FEATURE_DIM, load_stats

#: where the shipped evaluator lives
MODEL_DIR = Path(__file__).resolve().parent / "models" / "evaluator"
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
#: ``config.json``'s ``format`` field
FORMAT = "motionworld-evaluator"
#: motions per forward pass when embedding
EMBED_BATCH = 128


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
        with replacing(path / WEIGHTS_NAME) as tmp:
            save_file(state, str(tmp), metadata={"format": FORMAT})
        config = {"format": FORMAT, "version": 1, "model": asdict(self.cfg), "vocab": self.vocab, **(extra or {})}
        atomic_write_text(path / CONFIG_NAME, json.dumps(config, indent=1) + "\n")
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
                    "python -m worlds.motion train-evaluator)"
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
