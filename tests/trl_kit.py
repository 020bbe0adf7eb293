"""A tiny Qwen2 and its word-level tokenizer, built in memory (no download), for the TRL side-by-side tests."""

from __future__ import annotations

WORDS = ["<pad>", "<eos>", "<unk>", *map(str, range(10)), "+", "-", "=", "####", "what", "is"]


def tiny_tokenizer():
    """A fast tokenizer over ``WORDS``, split on whitespace; pad 0, eos 1."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def tiny_qwen2(seed: int = 0):
    """A 2-layer Qwen2ForCausalLM (hidden 32) over ``WORDS``, fp32, weights drawn at ``seed``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(WORDS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=1,
        tie_word_embeddings=False,
    )
    return Qwen2ForCausalLM(config).float()
