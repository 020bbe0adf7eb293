"""Label reward (classification): the response's label against the row's label(s), case-insensitively.

The candidate is the last non-empty line of the response (the text after the last ``####`` when there
is one), with a leading ``label:`` / ``answer:`` / ``class:`` removed and surrounding quotes, ``*``,
brackets and final punctuation stripped. The response matches a label when, compared case-insensitively
after the same stripping of the label, either the whole candidate equals it or the candidate's first
whitespace-separated word (stripped the same way) equals it. So ``"Positive."``, ``"positive -- the
review praises..."`` and ``"Label: **positive**"`` all match ``"positive"``; ``"not positive"`` does not.
``ground_truth`` is one label or a list of acceptable labels; ``format`` is 1 when a candidate was found.
"""

from __future__ import annotations

import re
from typing import Any

from .text_match import acceptable

_LEAD = re.compile(r"^(?:label|answer|class|category)\s*[:\-]\s*", re.IGNORECASE)
_STRIP = " \t\"'`*_()[]{}<>.,;:!?"


def _clean(text: str) -> str:
    return text.strip(_STRIP).lower()


def candidate(response: str) -> str:
    """The label part of ``response`` (module docstring), not yet lower-cased."""
    if "####" in response:
        response = response.rsplit("####", 1)[1]
    lines = [line.strip() for line in response.strip().split("\n") if line.strip(_STRIP)]
    return _LEAD.sub("", lines[-1].strip(_STRIP)) if lines else ""


def score_label(response: str, ground_truth: Any) -> tuple[float, dict]:
    """(1.0 or 0.0, {"format": 0/1}) for one response."""
    cand = _clean(candidate(response))
    first = _clean(cand.split()[0]) if cand else ""
    labels = {_clean(g) for g in acceptable(ground_truth)}
    return float(bool(cand) and (cand in labels or first in labels)), {"format": float(bool(cand))}


__all__ = ["candidate", "score_label"]
