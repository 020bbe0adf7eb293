r"""Pretraining ArithmeticWorld's base model: a tiny ``Qwen2ForCausalLM`` trained from scratch on train problems.

Recipe (every number is a field of :class:`ArithmeticConfig`; the defaults reproduce ``models/base``):

* data: each step draws ``batch_size`` fresh *train* problems (:func:`worlds.arithmetic.problems.sample_problem`)
  with ``numpy.random.default_rng(seed)``; a sequence is ``question + "\\n" + worked answer + <eos>``
  (:mod:`worlds.arithmetic.tokenizer`), right-padded with ``<pad>``;
* loss: next-token cross-entropy on the answer tokens only (the ``\\n``, the worked lines, ``#### N`` and
  ``<eos>``; the question is context), averaged over those tokens of the batch;
* optimiser: AdamW (betas 0.9, 0.95, weight decay ``weight_decay``), linear warm-up over ``warmup_steps`` then a
  constant ``lr`` — no decay, so stopping at step ``N`` of a longer run gives exactly the model of a run with
  ``steps=N`` (the evaluations in ``pretrain_log.jsonl`` are the figures each stopping point would ship);
  gradients clipped to global norm ``grad_clip``;
* the stopping point ``steps`` is chosen, not converged: an under-trained model whose held-out exact match at
  temperature 1 lies in 20–50 % and whose pass@8 is far above its pass@1, so that RL has something to learn
  (README.md gives the measured figures);
* determinism: ``torch.manual_seed(seed)`` before the model is built, one CPU thread (``--threads``); the same
  config gives the same weights bit for bit on the same machine and library versions.

Why not the core pretraining loop (``ddpo_grpo.pretraining``): its evaluation, EMA export and checkpoints are built
around a diffusers pipeline and the diffusion policies; this recipe is a few hundred steps of plain next-token
training, evaluated by :mod:`worlds.arithmetic.measure`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .problems import SPLIT_SEED, sample_problem
from .tokenizer import SEPARATOR, build_tokenizer

LOG_FILE = "pretrain_log.jsonl"
FINAL_DIR = "final"


@dataclass
class ArithmeticConfig:
    """The recipe; one command-line flag per field (``python -m worlds.arithmetic pretrain --help``)."""

    seed: int = 0
    steps: int = 1000  # the stopping point (module docstring): chosen for the held-out figures, not converged
    batch_size: int = 32
    lr: float = 1e-3
    warmup_steps: int = 100
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    # ---- Qwen2 architecture ----
    hidden_size: int = 128
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 512
    max_position_embeddings: int = 256
    # ---- evaluation and snapshots ----
    eval_every: int = 250  # steps between quick held-out measurements (0: only at the end)
    eval_prompts: int = 64  # held-out prompts (evenly spaced, all strata) of a quick measurement (k = 8; 0: none)
    save_every: int = 0  # also save the model as <out>/step_<n> every this many steps (0: never)
    log_every: int = 50

    def validate(self) -> None:
        for name in ("steps", "batch_size", "hidden_size", "num_hidden_layers", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}")
        if self.num_attention_heads % self.num_key_value_heads or self.hidden_size % self.num_attention_heads:
            raise ValueError(
                "num_attention_heads must divide hidden_size and be a multiple of num_key_value_heads; got "
                f"{self.hidden_size}, {self.num_attention_heads}, {self.num_key_value_heads}"
            )


def model_config(cfg: ArithmeticConfig, tokenizer):
    """The ``Qwen2Config`` of the recipe (tied embeddings, float32, the tokenizer's special ids)."""
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        torch_dtype="float32",
    )


def encode_batch(problems, tokenizer) -> dict[str, torch.Tensor]:
    """``input_ids``, ``attention_mask`` and ``labels`` (-100 outside the answer) of right-padded problems."""
    seqs, labels = [], []
    for p in problems:
        q = tokenizer(p.question, add_special_tokens=False).input_ids
        a = tokenizer(SEPARATOR + p.worked, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
        seqs.append(q + a)
        labels.append([-100] * len(q) + a)
    width = max(map(len, seqs))
    pad = tokenizer.pad_token_id
    return {
        "input_ids": torch.tensor([s + [pad] * (width - len(s)) for s in seqs]),
        "attention_mask": torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs]),
        "labels": torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels]),
    }


def build(cfg: ArithmeticConfig):
    """``(model, tokenizer)``: the freshly initialised model after ``torch.manual_seed(cfg.seed)``."""
    from transformers import Qwen2ForCausalLM

    tokenizer = build_tokenizer()
    torch.manual_seed(cfg.seed)
    return Qwen2ForCausalLM(model_config(cfg, tokenizer)).float(), tokenizer


def save(model, tokenizer, out: Path) -> Path:
    """Save the model (safetensors), its tokenizer and its generation config (the RL recipe's sampling) to ``out``."""
    from transformers import GenerationConfig

    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        max_new_tokens=48,
    )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def train(cfg: ArithmeticConfig, out: str | Path | None = None, log=print) -> torch.nn.Module:
    """Run the recipe; with ``out``: log to ``<out>/pretrain_log.jsonl``, snapshots, and the model in
    ``<out>/final``. The trained model."""
    from .measure import measure
    from .problems import test_rows

    cfg.validate()
    out = None if out is None else Path(out)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=1) + "\n")
    model, tokenizer = build(cfg)
    rng = np.random.default_rng(cfg.seed)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    other = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": other, "weight_decay": 0.0}],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )
    held_out = test_rows()[:: max(1, len(test_rows()) // max(1, cfg.eval_prompts))][: cfg.eval_prompts]
    t0, running = time.time(), []

    def record(entry: dict) -> None:
        log(json.dumps(entry))
        if out is not None:
            with open(out / LOG_FILE, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")

    for step in range(1, cfg.steps + 1):
        model.train()
        for group in opt.param_groups:
            group["lr"] = cfg.lr * min(1.0, step / max(1, cfg.warmup_steps))
        batch = encode_batch([sample_problem(rng, "train") for _ in range(cfg.batch_size)], tokenizer)
        loss = model(**batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        running.append(loss.item())
        if step % cfg.log_every == 0 or step == cfg.steps:
            record(
                {
                    "step": step,
                    "loss": float(np.mean(running)),
                    "grad_norm": float(norm),
                    "s": round(time.time() - t0, 1),
                }
            )
            running = []
        if cfg.eval_prompts and ((cfg.eval_every and step % cfg.eval_every == 0) or step == cfg.steps):
            res = measure(model, tokenizer, held_out, k=8, seed=SPLIT_SEED)
            record({"step": step, "eval": {k: res[k] for k in ("pass@1", "pass@8", "greedy", "mean_length")}})
        if out is not None and cfg.save_every and step % cfg.save_every == 0:
            save(model, tokenizer, out / f"step_{step}")
    if out is not None:
        save(model, tokenizer, out / FINAL_DIR)
    return model


__all__ = ["FINAL_DIR", "LOG_FILE", "ArithmeticConfig", "build", "encode_batch", "model_config", "save", "train"]
