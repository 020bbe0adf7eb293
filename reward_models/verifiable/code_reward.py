"""Code reward: run the response's program against the row's tests in the sandbox; score = fraction passed.

Program: the last fenced block opened with ```` ```python ```` (or ```` ```py ````/```` ```python3 ````) in
the response; else the first fenced block of any language; else the whole response. ``format`` = 1 when
a fenced block was found.

Tests (``ground_truth``, or a JSON string of it), three layouts:

* ``[{"input": stdin, "output": expected stdout}, ...]``;
* ``{"inputs": [...], "outputs": [...]}`` (verl's ``sandbox_fusion`` / APPS layout);
* a string of Python statements with ``assert`` lines (MBPP / HumanEval style): the other top-level
  statements are setup, run after the program; each ``assert`` is one test.

A stdin/stdout test passes when the program exits with status 0 within the limits and its stdout
equals the expected output after stripping trailing whitespace from every line and trailing blank
lines. Each such test is one sandboxed run; after the first test that times out the remaining ones
are not run and count as failed (a program that loops forever costs one wall-time limit per row, not
one per test). Assert tests run in one sandboxed run.

Score = passed / total, as verl's ``sandbox_fusion.compute_score`` (its default, non-``continuous``
mode) computes it; a row with no test scores NaN with a one-line error instead (see routing).
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from .code_sandbox import SandboxLimits, asserts_passed, run_program

_PY_FENCE = re.compile(r"```(?:python3?|py)[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_ANY_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)


def extract_program(response: str) -> tuple[str, bool]:
    """(program, fenced): the last ```python block, else the first fenced block, else the whole text."""
    blocks = _PY_FENCE.findall(response)
    if blocks:
        return blocks[-1], True
    match = _ANY_FENCE.search(response)
    if match:
        return match.group(1), True
    return response, False


def parse_tests(ground_truth: Any) -> tuple[str, Any]:
    """``("io", [(stdin, expected), ...])`` or ``("assert", {"setup": str, "asserts": [str, ...]})``.

    Raises ValueError naming what is wrong with the layout.
    """
    if isinstance(ground_truth, str):
        text = ground_truth.strip()
        if text[:1] in "[{":
            try:
                return parse_tests(json.loads(text))
            except json.JSONDecodeError:
                pass  # Python source that starts with a bracket
        return "assert", _split_asserts(ground_truth)
    if isinstance(ground_truth, dict) and "inputs" in ground_truth and "outputs" in ground_truth:
        ins, outs = ground_truth["inputs"], ground_truth["outputs"]
        if len(ins) != len(outs):
            raise ValueError(f"tests have {len(ins)} inputs but {len(outs)} outputs")
        return "io", [(str(i), str(o)) for i, o in zip(ins, outs)]
    if isinstance(ground_truth, (list, tuple)) and all(
        isinstance(t, dict) and "input" in t and "output" in t for t in ground_truth
    ):
        return "io", [(str(t["input"]), str(t["output"])) for t in ground_truth]
    raise ValueError(
        "code tests must be a list of {'input': stdin, 'output': stdout}, a dict {'inputs': [...], "
        f"'outputs': [...]}}, or a string of assert statements; got {type(ground_truth).__name__}"
    )


def _split_asserts(source: str) -> dict:
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"assert-style tests do not parse as Python: {exc}") from None
    setup = [ast.get_source_segment(source, s) for s in tree.body if not isinstance(s, ast.Assert)]
    asserts = [ast.get_source_segment(source, s) for s in tree.body if isinstance(s, ast.Assert)]
    if not asserts:
        raise ValueError("assert-style tests contain no assert statement")
    return {"setup": "\n".join(setup), "asserts": asserts}


def outputs_match(got: str, expected: str) -> bool:
    """Equal up to trailing whitespace on each line and trailing blank lines."""

    def norm(text: str) -> list[str]:
        lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        return lines

    return norm(got) == norm(expected)


def score_code(response: str, ground_truth: Any, limits: SandboxLimits | None = None) -> tuple[float, dict]:
    """(score, info) of one response; info: ``format``, ``tests_passed``, ``tests_total``, ``timed_out``."""
    program, fenced = extract_program(response)
    kind, tests = parse_tests(ground_truth)
    timed_out = 0
    if kind == "assert":
        total = len(tests["asserts"])
        result = run_program(program, "", limits, tests=tests)
        passed, timed_out = asserts_passed(result), int(result.timed_out)
    else:
        total, passed = len(tests), 0
        for stdin, expected in tests:
            result = run_program(program, stdin, limits)
            if result.timed_out:
                timed_out = 1
                break
            passed += result.returncode == 0 and outputs_match(result.stdout, expected)
    score = passed / total if total else float("nan")
    return score, {"format": float(fenced), "tests_passed": passed, "tests_total": total, "timed_out": timed_out}


__all__ = ["extract_program", "outputs_match", "parse_tests", "score_code"]
