"""Word-level ``CLIPTokenizer``: one token per word of a small grammar, any other text by characters.

:func:`build_word_tokenizer` is a ``CLIPTokenizer`` whose BPE merges were *learned* on the grammar's
words (:func:`learn_bpe_merges`), so every word of the grammar is exactly one token, while any other
text still tokenizes character by character (every printable character is in the vocabulary). One
token per word makes the bindings of a compositional grammar (colour–shape, action–order) far easier
for a small text encoder to learn than character sequences (:mod:`ddpo_grpo.tiny`), and keeps
sequences short. The files live in a temporary directory; ``save_pretrained`` writes them with the
pipeline.
"""

from __future__ import annotations

import collections
import json
import string
import tempfile
from collections.abc import Sequence
from pathlib import Path


def learn_bpe_merges(words: Sequence[str]) -> list[tuple[str, str]]:
    """Learn BPE merges on ``words`` (each once) until every word is a single symbol.

    Standard BPE training (most frequent adjacent pair first, ties broken by the pair itself), so
    applying the merges by rank — what ``CLIPTokenizer`` does — reproduces the training segmentation:
    each word becomes one token. Word-final characters carry CLIP's ``</w>`` marker.
    """
    return merge_until_single({w: tuple(w[:-1]) + (w[-1] + "</w>",) for w in words})


def merge_until_single(segs: dict[str, tuple[str, ...]]) -> list[tuple[str, str]]:
    """The BPE training loop of :func:`learn_bpe_merges` from given segmentations (updated in place): merge the
    most frequent adjacent pair (ties by the pair) until no word has two symbols; returns the merges in order."""
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
            segs[w] = merge_pair(s, pair)


def merge_pair(symbols: tuple[str, ...], pair: tuple[str, str]) -> tuple[str, ...]:
    """``symbols`` with every non-overlapping occurrence of ``pair`` (left to right) joined into one symbol."""
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
            out.append(symbols[i] + symbols[i + 1])
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return tuple(out)


def check_words(words: Sequence[str]) -> list[str]:
    """``words`` deduplicated in order; ValueError unless each is lowercase letters / digits / punctuation."""
    allowed = set(string.ascii_lowercase + string.digits + string.punctuation)
    out = list(dict.fromkeys(words))
    bad = [w for w in out if not w or set(w) - allowed]
    if bad:
        raise ValueError(
            f"word tokenizer: words must be non-empty, lowercase ASCII letters, digits or punctuation, "
            f"without spaces; got {bad[:5]}"
        )
    return out


def word_vocab_and_merges(words: Sequence[str]) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Vocabulary (specials, every printable char alone and word-final, every merge result) and merges."""
    merges = learn_bpe_merges(check_words(words))
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in string.ascii_lowercase + string.digits + string.punctuation:
        vocab.setdefault(ch, len(vocab))
        vocab.setdefault(ch + "</w>", len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab, merges


def build_word_tokenizer(words: Sequence[str], max_length: int):
    """A ``CLIPTokenizer`` where each of ``words`` is one token; ``model_max_length = max_length`` (BOS/EOS incl.)."""
    from transformers import CLIPTokenizer

    if max_length < 3:
        raise ValueError(f"word tokenizer: max_length={max_length} leaves no room for a word between BOS and EOS")
    vocab, merges = word_vocab_and_merges(words)
    with tempfile.TemporaryDirectory() as tmp:
        vpath, mpath = Path(tmp) / "vocab.json", Path(tmp) / "merges.txt"
        vpath.write_text(json.dumps(vocab))
        mpath.write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
        return CLIPTokenizer(str(vpath), str(mpath), model_max_length=max_length)


def word_text_config(tokenizer, *, hidden: int, ff: int, layers: int, heads: int, projection_dim: int):
    """A ``CLIPTextConfig`` for a :func:`build_word_tokenizer` tokenizer: its vocabulary size, its length as the
    position count, and its special ids (BOS 0, EOS = padding 1, as :func:`word_vocab_and_merges` lays them out)."""
    from transformers import CLIPTextConfig

    return CLIPTextConfig(
        vocab_size=len(tokenizer.get_vocab()),
        hidden_size=hidden,
        intermediate_size=ff,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        max_position_embeddings=tokenizer.model_max_length,
        projection_dim=projection_dim,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
