"""Tokenizer of the ShapesWorld models: one token per grammar word.

:func:`build_word_tokenizer` is a ``CLIPTokenizer`` whose BPE merges were *learned* on the 23
ShapesWorld words, so every word of the grammar is exactly one token (a 10-word prompt is 12 tokens
with BOS/EOS; ``max_length = 16``), while any other text still tokenizes character by character
(every printable character is in the vocabulary). One token per word makes the colour/shape/count/
relation bindings far easier to learn than the 64-character sequences of :mod:`ddpo_grpo.tiny`, and
shortens the joint-attention sequence (64 image + 16 text + 1 null token).
"""
from __future__ import annotations

import collections
import json
import string
import tempfile
from collections.abc import Sequence
from pathlib import Path

from worlds.shapes.world import COLORS, COUNT_WORDS, RELATIONS, SHAPES


def grammar_words() -> list[str]:
    """The 23 words of the ShapesWorld grammar."""
    words = ["a", "and", *COUNT_WORDS.values(), *COLORS, *SHAPES, *(s + "s" for s in SHAPES)]
    for phrase in RELATIONS.values():
        words += phrase.split()
    return list(dict.fromkeys(words))


def learn_bpe_merges(words: Sequence[str]) -> list[tuple[str, str]]:
    """Learn BPE merges on ``words`` (each once) until every word is a single symbol.

    Standard BPE training (most frequent adjacent pair first, ties broken by the pair itself), so
    applying the merges by rank — what ``CLIPTokenizer`` does — reproduces the training segmentation:
    each word becomes one token. Word-final characters carry CLIP's ``</w>`` marker.
    """
    segs = {w: tuple(w[:-1]) + (w[-1] + "</w>",) for w in words}
    merges: list[tuple[str, str]] = []
    while True:
        counts: collections.Counter = collections.Counter()
        for s in segs.values():
            counts.update(zip(s, s[1:]))
        if not counts:
            return merges
        pair = min(counts, key=lambda p: (-counts[p], p))
        merges.append(pair)
        for w, s in segs.items():
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == pair:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            segs[w] = tuple(out)


def word_vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Vocabulary (specials, every printable char alone and word-final, every merge result) and merges."""
    merges = learn_bpe_merges(grammar_words())
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in string.ascii_lowercase + string.digits + string.punctuation:
        vocab.setdefault(ch, len(vocab))
        vocab.setdefault(ch + "</w>", len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab, merges


def build_word_tokenizer(max_length: int = 16):
    """A ``CLIPTokenizer`` where each ShapesWorld word is one token (files in a temporary directory)."""
    from transformers import CLIPTokenizer

    vocab, merges = word_vocab_and_merges()
    with tempfile.TemporaryDirectory() as tmp:
        vpath, mpath = Path(tmp) / "vocab.json", Path(tmp) / "merges.txt"
        vpath.write_text(json.dumps(vocab))
        mpath.write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
        return CLIPTokenizer(str(vpath), str(mpath), model_max_length=max_length)
