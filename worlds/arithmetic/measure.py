"""ArithmeticWorld's own measurement of a causal LM on prompt rows: pass@1, pass@k, greedy exact match, length.

For each row the model continues the plain-text prompt (the bare question, no special token in front — the layout
of :mod:`worlds.arithmetic.tokenizer`) with HF ``generate``, KV-cached, up to ``max_new_tokens`` tokens or ``<eos>``:

* ``k`` samples at the RL recipe's sampling (temperature 1.0, top-p 1.0, no top-k), torch's RNG seeded with
  ``seed`` inside a forked RNG state (the caller's stream is untouched);
* one greedy continuation.

A response is correct iff the number after its ``####`` equals the row's ``ground_truth``
(:func:`worlds.arithmetic.problems.is_correct`). With ``c_i`` correct of ``k`` samples for prompt ``i`` of ``n``:

* ``pass@1 = (1/n) Σ c_i / k`` — exact match of one temperature-1 sample (the unbiased estimator of pass@1);
* ``pass@k = (1/n) Σ [c_i > 0]`` — at least one of the ``k`` samples is right (the ``n = k`` case of Chen et
  al.'s estimator ``1 − C(n−c, k)/C(n, k)``);
* ``greedy`` — exact match of the greedy continuation;
* ``mean_length`` — generated tokens per sample, ``<eos>`` included (``max_new_tokens`` when it never came).

Every figure is also given per held-out stratum (``extra_info["held_out"]``) under ``by_stratum``.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import torch

from .problems import is_correct

MAX_NEW_TOKENS = 48


def load(model_dir: str | Path):
    """``(model, tokenizer)`` from a saved directory (offline, float32, eval mode)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return model.eval(), tokenizer


@torch.no_grad()
def generate(model, tokenizer, prompts: list[str], *, sample: bool, k: int = 1, max_new_tokens: int = MAX_NEW_TOKENS):
    """The responses (text, special tokens dropped) and their lengths in tokens, ``k`` per prompt in order."""
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    options = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0) if sample else dict(do_sample=False)
    out = model.generate(
        **enc,
        **options,
        num_return_sequences=k,
        max_new_tokens=max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    new = out[:, enc["input_ids"].shape[1] :]
    eos = new == tokenizer.eos_token_id
    lengths = torch.where(eos.any(1), eos.int().argmax(1) + 1, torch.full_like(eos[:, 0], new.shape[1], dtype=int))
    texts = [tokenizer.decode(row[:n], skip_special_tokens=True) for row, n in zip(new, lengths.tolist())]
    return texts, lengths.tolist()


def measure(model, tokenizer, rows: list[dict], k: int = 8, seed: int = 0, batch_prompts: int = 64) -> dict:
    """The figures of the module docstring over ``rows`` (a model object and its tokenizer)."""
    model.eval()
    per_row = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in range(0, len(rows), batch_prompts):
            chunk = rows[start : start + batch_prompts]
            prompts = [r["prompt"] for r in chunk]
            texts, lengths = generate(model, tokenizer, prompts, sample=True, k=k)
            greedy, _ = generate(model, tokenizer, prompts, sample=False)
            for i, r in enumerate(chunk):
                gt = r["ground_truth"]
                hits = [is_correct(t, gt) for t in texts[i * k : (i + 1) * k]]
                per_row.append(
                    {
                        "stratum": (r.get("extra_info") or {}).get("held_out") or "train",
                        "c": sum(hits),
                        "greedy": is_correct(greedy[i], gt),
                        "length": float(np.mean(lengths[i * k : (i + 1) * k])),
                    }
                )

    def figures(items: list[dict]) -> dict:
        return {
            "n": len(items),
            "pass@1": round(float(np.mean([x["c"] / k for x in items])), 4),
            f"pass@{k}": round(float(np.mean([x["c"] > 0 for x in items])), 4),
            "greedy": round(float(np.mean([x["greedy"] for x in items])), 4),
            "mean_length": round(float(np.mean([x["length"] for x in items])), 2),
        }

    groups = defaultdict(list)
    for x in per_row:
        groups[x["stratum"]].append(x)
    return {**figures(per_row), "k": k, "by_stratum": {s: figures(v) for s, v in sorted(groups.items())}}


def format_figures(res: dict, label: str = "held-out") -> str:
    """A markdown table of :func:`measure`'s result, one line per stratum and the total."""
    k = res["k"]
    lines = [f"| {label} | n | pass@1 (T=1) | pass@{k} | greedy | mean length |", "|---|---|---|---|---|---|"]
    for name, f in [*res["by_stratum"].items(), ("all", res)]:
        lines.append(
            f"| {name} | {f['n']} | {f['pass@1']:.3f} | {f[f'pass@{k}']:.3f} | {f['greedy']:.3f} | "
            f"{f['mean_length']:.1f} |"
        )
    return "\n".join(lines)


__all__ = ["MAX_NEW_TOKENS", "format_figures", "generate", "load", "measure"]
