r"""Math reward: extract a response's final answer and compare it with the ground truth numerically.

Extraction, first rule that applies:

1. the text after the last ``####`` (GSM8K's answer marker), up to the end of that line;
2. else the content of the last ``\boxed{...}`` (braces balanced, so ``\boxed{\frac{3}{4}}`` works);
3. else the last number in the text (``-1,234.5``, ``.5``, ``3/4``).

Normalisation of an answer: drop ``$``, spaces, ``\!`` / ``\,`` / ``{,}`` thin spaces, ``\left`` /
``\right``, a ``\text{...}`` wrapper, a trailing ``.``, a trailing ``%`` or ``^\circ``, a leading
``+`` and thousands commas; ``\frac{a}{b}`` (``\dfrac``, ``\tfrac``) becomes ``a/b``. The result is
parsed as an exact rational when it is a number, a decimal or a fraction ``a/b``.

Comparison: two numbers are equal when ``|answer − truth| ≤ 1e-6 · max(1, |truth|)`` (a relative
tolerance of one part in a million, absolute 1e-6 near zero; it forgives float printing such as
``0.3333333`` for ``1/3`` only up to that tolerance, so ``0.33`` is wrong). When the ground truth is not
a number, the normalised strings are compared, case-insensitively. A ground truth that itself contains
``####`` or ``\boxed{}`` (a raw GSM8K / MATH solution) is reduced by the same extraction first.

``format`` (per-sample info) is 1 when the response ends its reasoning with a well-formed ``#### <number>``
line (the GSM8K / embedded arithmetic world's format), whatever the correctness.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

REL_TOL = 1e-6
_NUMBER = r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+"
_LAST_NUMBER = re.compile(rf"(?:{_NUMBER})(?:\s*/\s*(?:{_NUMBER}))?")
_FRAC = re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}")
_TEXT = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")


def last_boxed(text: str) -> str | None:
    r"""Content of the last ``\boxed{...}`` (or ``\fbox{...}``) with balanced braces, else None."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j]
    return None  # unbalanced: no answer


def hash_answer(text: str) -> str | None:
    """The text after the last ``####``, to the end of its line (stripped), else None."""
    if "####" not in text:
        return None
    return text.rsplit("####", 1)[1].strip().split("\n", 1)[0].strip()


def extract_answer(text: str) -> str | None:
    """The final answer of ``text`` by the rules of the module docstring (not yet normalised), or None."""
    for found in (hash_answer(text), last_boxed(text)):
        if found:
            return found
    numbers = _LAST_NUMBER.findall(text)
    return numbers[-1] if numbers else None


def normalize(answer: str) -> str:
    """Normalised answer string (module docstring)."""
    s = _TEXT.sub(r"\1", answer)
    for old in ("\\left", "\\right", "\\!", "\\,", "\\;", "{,}", "$", "^\\circ", "^{\\circ}", "\\%", "%"):
        s = s.replace(old, "")
    s = _FRAC.sub(r"(\1)/(\2)", s)
    s = re.sub(r"\s+", "", s).rstrip(".").lstrip("+")
    s = re.sub(r"\((-?[\d.]+)\)", r"\1", s)  # (3)/(4) -> 3/4
    if re.fullmatch(rf"(?:{_NUMBER})(?:/(?:{_NUMBER}))?", s):
        s = s.replace(",", "")
    return s


def to_number(answer: str) -> Fraction | None:
    """An exact rational for a normalised number / decimal / fraction, else None."""
    try:
        num, _, den = answer.partition("/")
        value = Fraction(num) / (Fraction(den) if den else 1)
    except (ValueError, ZeroDivisionError):
        return None
    return value


def _truth(ground_truth: Any) -> str:
    text = str(ground_truth)
    if "####" in text or "\\boxed" in text or "\\fbox" in text:
        text = hash_answer(text) or last_boxed(text) or text
    return normalize(text)


def equal(answer: str, ground_truth: Any) -> bool:
    """``answer`` (normalised) equals the ground truth under the module's comparison rule."""
    truth = _truth(ground_truth)
    t, a = to_number(truth), to_number(answer)
    if t is not None:
        return a is not None and abs(float(a - t)) <= REL_TOL * max(1.0, abs(float(t)))
    return answer.lower() == truth.lower()


def score_math(response: str, ground_truth: Any) -> tuple[float, dict]:
    """(1.0 or 0.0, {"format": 0/1}) for one response."""
    marked = hash_answer(response)
    well_formed = marked is not None and to_number(normalize(marked)) is not None
    answer = extract_answer(response)
    correct = answer is not None and equal(normalize(answer), ground_truth)
    return float(correct), {"format": float(well_formed)}


__all__ = ["REL_TOL", "equal", "extract_answer", "hash_answer", "last_boxed", "normalize", "score_math", "to_number"]
