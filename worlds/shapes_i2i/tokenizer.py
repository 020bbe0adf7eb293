"""The ShapesWorld word tokenizer extended with the instruction words, keeping every existing token id.

The shipped ShapesWorld models tokenize each grammar word as one token (:mod:`worlds.shapes.pretrain.tokenizer`);
instructions add ``restore``, ``image``, ``make``, ``add``, ``remove``, ``move``. :func:`extend_bpe` continues
BPE training from the existing merges: each new word is first segmented by the old merges (applied by rank,
as ``CLIPTokenizer`` does), then new merges are learned until it is one symbol, and appended after the old
ones. Every old word is already one symbol after the old merges, so no new merge ever applies to it: old
text tokenizes exactly as before, the vocabulary only grows at the end, and a text encoder keeps its
embedding rows (:func:`extend_text_encoder` appends rows for the new ids).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch

from ddpo_grpo.pretraining.tokenizer import merge_pair, merge_until_single

#: the words instructions add to the ShapesWorld grammar
INSTRUCTION_WORDS = ("restore", "image", "make", "add", "remove", "move")


def _segment(word: str, ranks: dict[tuple[str, str], int]) -> tuple[str, ...]:
    """BPE of one word by merge rank (lowest first), CLIP-style (``</w>`` on the last character)."""
    symbols = tuple(word[:-1]) + (word[-1] + "</w>",)
    while len(symbols) > 1:
        pairs = [(ranks.get(p, len(ranks)), p) for p in zip(symbols, symbols[1:])]
        rank, best = min(pairs)
        if rank == len(ranks):
            break
        symbols = merge_pair(symbols, best)
    return symbols


def extend_bpe(vocab: dict[str, int], merges: list[tuple[str, str]], words: Sequence[str]):
    """``(vocab, merges)`` extended so that each of ``words`` is one token (module docstring)."""
    ranks = {m: i for i, m in enumerate(merges)}
    segs = {w: _segment(w, ranks) for w in dict.fromkeys(words)}
    new, vocab = merge_until_single(segs), dict(vocab)
    for pair in new:
        vocab.setdefault(pair[0] + pair[1], len(vocab))
    return vocab, list(merges) + new


def extended_tokenizer(base_tokenizer, words: Sequence[str] = INSTRUCTION_WORDS):
    """A ``CLIPTokenizer`` with ``base_tokenizer``'s vocabulary and merges plus ``words`` as single tokens."""
    from transformers import CLIPTokenizer

    vocab = dict(base_tokenizer.get_vocab())
    with tempfile.TemporaryDirectory() as tmp:
        base_tokenizer.save_pretrained(tmp)
        data = json.loads((Path(tmp) / "tokenizer.json").read_text())
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in data["model"]["merges"]]
    vocab, merges = extend_bpe(vocab, merges, words)
    with tempfile.TemporaryDirectory() as tmp:
        vpath, mpath = Path(tmp) / "vocab.json", Path(tmp) / "merges.txt"
        vpath.write_text(json.dumps(vocab))
        mpath.write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
        return CLIPTokenizer(str(vpath), str(mpath), model_max_length=base_tokenizer.model_max_length)


def extend_text_encoder(text_encoder, vocab_size: int, seed: int = 0):
    """A copy of ``text_encoder`` (a ``CLIPTextModel``) with ``vocab_size`` token embeddings.

    The old rows are kept; each new row is the mean of the old ones plus N(0, 0.02²) noise drawn from ``seed``
    (so new tokens start distinct).
    """
    from transformers import CLIPTextConfig, CLIPTextModel

    from ddpo_grpo.checkpoint import load_state_dict_checked

    old = text_encoder.get_input_embeddings().weight.detach()  # [V, D]
    if vocab_size < old.shape[0]:
        raise ValueError(f"extend_text_encoder: vocab_size={vocab_size} is smaller than the encoder's {old.shape[0]}")
    config = CLIPTextConfig(**{**text_encoder.config.to_dict(), "vocab_size": vocab_size})
    new = CLIPTextModel(config)
    report = load_state_dict_checked(new, text_encoder.state_dict(), strict=False, source="the base text encoder")
    if report["missing"] or report["unexpected"] or len(report["mismatched"]) != (vocab_size != old.shape[0]):
        raise ValueError(f"extend_text_encoder: unexpected key differences {report}")
    gen = torch.Generator().manual_seed(seed)
    extra = old.mean(0, keepdim=True) + 0.02 * torch.randn(vocab_size - old.shape[0], old.shape[1], generator=gen)
    with torch.no_grad():
        new.get_input_embeddings().weight.copy_(torch.cat([old, extra.to(old.dtype)]))
    return new
