"""Tokenizer of the ShapesWorld models: one token per grammar word.

:func:`build_word_tokenizer` is the core's word-level ``CLIPTokenizer``
(:func:`ddpo_grpo.pretraining.tokenizer.build_word_tokenizer`) learned on the 23 ShapesWorld words,
so every word of the grammar is exactly one token (a 10-word prompt is 12 tokens with BOS/EOS;
``max_length = 16``), while any other text still tokenizes character by character. One token per word
makes the colour/shape/count/relation bindings far easier to learn than the 64-character sequences of
:mod:`ddpo_grpo.tiny`, and shortens the joint-attention sequence (64 image + 16 text + 1 null token).
"""

from __future__ import annotations

from ddpo_grpo.pretraining import tokenizer as word_tokenizer
from worlds.shapes.world import COLORS, COUNT_WORDS, RELATIONS, SHAPES


def grammar_words() -> list[str]:
    """The 23 words of the ShapesWorld grammar."""
    words = ["a", "and", *COUNT_WORDS.values(), *COLORS, *SHAPES, *(s + "s" for s in SHAPES)]
    for phrase in RELATIONS.values():
        words += phrase.split()
    return list(dict.fromkeys(words))


def build_word_tokenizer(max_length: int = 16):
    """A ``CLIPTokenizer`` where each ShapesWorld word is one token (files in a temporary directory)."""
    return word_tokenizer.build_word_tokenizer(grammar_words(), max_length)
