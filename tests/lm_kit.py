"""A tiny causal language model built from a config dict (Qwen2 architecture, a character tokenizer), and rows of
arithmetic questions, for the language-model tests: offline, random weights, a 3-step rollout in milliseconds."""

from __future__ import annotations

import json
from pathlib import Path

CHARACTERS = list("0123456789+-*= #?abcdefghijklmnopqrstuvwxyz.,\n")
SPECIALS = ["<pad>", "<eos>", "<bos>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def tokenizer():
    """A character-level ``PreTrainedTokenizerFast`` with pad / eos / bos and a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + CHARACTERS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", bos_token="<bos>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_lm(path, *, seed: int = 0, pad: bool = True, context: int = 128) -> Path:
    """Save a random tiny ``Qwen2ForCausalLM`` and its tokenizer to ``path`` (``pad=False``: a tokenizer without pad)."""
    import torch
    from tokenizers import decoders
    from transformers import Qwen2Config, Qwen2ForCausalLM

    path = Path(path)
    tok = tokenizer()
    tok.backend_tokenizer.decoder = decoders.Fuse()
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id,
    )
    Qwen2ForCausalLM(config).save_pretrained(path)
    if not pad:
        tok.pad_token = None
    tok.save_pretrained(path)
    return path


def write_rows(path, n: int = 8, chat: bool = False, **extra) -> Path:
    """A JSON file of verl rows ``{prompt, ground_truth, data_source}`` asking for small sums."""
    rows = []
    for i in range(n):
        a, b = i % 5, (3 * i) % 7
        question = f"{a}+{b}="
        prompt = [{"role": "user", "content": question}] if chat else question
        rows.append({"prompt": prompt, "ground_truth": str(a + b), "data_source": "arithmetic", **extra})
    Path(path).write_text(json.dumps(rows))
    return Path(path)


#: a verl-style per-sample scorer, graded so that a random model's responses differ: 1 when the response's last number is
#: the ground truth, else the fraction of its characters that are digits (a signal a few updates can follow)
REWARD_FILE = """
import re


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    found = re.findall(r"-?\\d+", solution_str)
    if found and found[-1] == str(ground_truth):
        return 1.0
    return sum(c.isdigit() for c in solution_str) / max(1, len(solution_str))
"""
