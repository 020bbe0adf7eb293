"""Text reward (qa, trivia): normalised exact match of the response's answer against acceptable answers.

Answer of a response, first rule that applies: the content of the last ``<answer>...</answer>``; the
text after the last ``####`` (to the end of its line); the last non-empty line, with a leading
``answer:`` / ``final answer:`` / ``the answer is`` removed (case-insensitive).

Normalisation (SQuAD's evaluation script): lower case, remove punctuation, remove the articles
``a``, ``an``, ``the`` as words, collapse whitespace. ``ground_truth`` is a string or a list of
acceptable strings; the score is 1.0 when the normalised answer equals any normalised one, else 0.0.
``format`` is 1 when a non-empty answer was found.
"""

from __future__ import annotations

import re
import string
from typing import Any

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_LEAD = re.compile(r"^(?:final answer|the answer is|answer)\s*[:\-]?\s*", re.IGNORECASE)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize_text(text: str) -> str:
    """SQuAD normalisation: lower, no punctuation, no articles, single spaces."""
    text = str(text).lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def answer_text(response: str) -> str:
    """The answer part of ``response`` (module docstring)."""
    tags = _ANSWER_TAG.findall(response)
    if tags:
        return tags[-1].strip()
    if "####" in response:
        return response.rsplit("####", 1)[1].strip().split("\n", 1)[0].strip()
    lines = [line.strip() for line in response.strip().split("\n") if line.strip()]
    return _LEAD.sub("", lines[-1]) if lines else ""


def acceptable(ground_truth: Any) -> list[str]:
    """The ground truth as a list of acceptable strings."""
    if isinstance(ground_truth, (list, tuple, set)):
        return [str(g) for g in ground_truth]
    return [str(ground_truth)]


def score_text(response: str, ground_truth: Any) -> tuple[float, dict]:
    """(1.0 or 0.0, {"format": 0/1}) for one response."""
    answer = normalize_text(answer_text(response))
    correct = bool(answer) and any(answer == normalize_text(g) for g in acceptable(ground_truth))
    return float(correct), {"format": float(bool(answer))}


__all__ = ["acceptable", "answer_text", "normalize_text", "score_text"]
