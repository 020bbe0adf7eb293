"""The MotionWorld evaluator's text side: the word-level tokenizer over the grammar's vocabulary.

:func:`tokenize` (lower case, one final period dropped, whitespace split; unknown words map to ``<unk>`` in
the model), :func:`grammar_vocab` (the shipped vocabulary), and the clause prompts of an "A then B" prompt's
halves (:func:`segment_prompts`) that the segment-dense reward scores.
"""

from __future__ import annotations

from .grammar import PHRASES, all_prompts, spec_of

#: special tokens: padding, unknown word, the pooled ``[CLS]`` slot
PAD, UNK, CLS = "<pad>", "<unk>", "<cls>"
SPECIALS = (PAD, UNK, CLS)


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


__all__ = ["CLS", "PAD", "SPECIALS", "UNK", "clause_prompt", "grammar_vocab", "segment_prompts", "tokenize"]
