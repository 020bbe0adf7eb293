"""The ``verifiable`` reward: language-model responses scored by rule, each row routed by its ``data_source``.

``samples`` are the B decoded responses (strings, prompt excluded); ``metadata`` the B dataset rows.
A row's ground truth is its ``ground_truth`` field, else verl's ``reward_model: {"ground_truth": ...}``
(:func:`reward_models.per_sample.ground_truth_of`). Routing (:data:`DATA_SOURCES`, extended by the
``routes`` keyword, e.g. ``{"my_quiz": "text"}``):

========  =====================================================================================  =====================
task      data_source values                                                                     scorer
========  =====================================================================================  =====================
math      math, gsm8k, openai/gsm8k, lighteval/MATH, DigitalLearningGmbH/MATH-lighteval,         :mod:`.math_answer`
          HuggingFaceH4/MATH-500, arithmetic (the embedded arithmetic world)
text      qa, trivia, squad, rajpurkar/squad, trivia_qa, mandarjoshi/trivia_qa, nq,              :mod:`.text_match`
          natural_questions, hotpotqa
label     classification, label                                                                  :mod:`.label_match`
code      code, codecontests, apps, taco, mbpp, humaneval, livecodebench, primeintellect         :mod:`.code_reward`
========  =====================================================================================  =====================

A row whose ``data_source`` is not in the table raises one line naming it and the known ones
(``unknown="nan"`` scores such rows NaN instead, counted in ``info["unrouted"]``, so that another reward
can score them). A routed row without a ground truth raises one line naming the row and the field.

Per-sample ``info``: ``task`` (the row's data_source), ``format`` (an answer in the expected form was
found: ``#### <number>`` for math, a non-empty answer / label, a fenced program), and for code rows
``tests_passed``, ``tests_total``, ``timed_out`` (NaN on other rows).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..per_sample import ground_truth_of
from ..registry import register
from .code_reward import score_code
from .code_sandbox import SandboxLimits, run_program
from .label_match import score_label
from .math_answer import score_math
from .text_match import score_text

DATA_SOURCES: dict[str, str] = {
    **dict.fromkeys(
        [
            "math",
            "gsm8k",
            "openai/gsm8k",
            "lighteval/MATH",
            "DigitalLearningGmbH/MATH-lighteval",
            "HuggingFaceH4/MATH-500",
            "arithmetic",
        ],
        "math",
    ),
    **dict.fromkeys(
        ["qa", "trivia", "squad", "rajpurkar/squad", "trivia_qa", "mandarjoshi/trivia_qa", "nq"]
        + ["natural_questions", "hotpotqa"],
        "text",
    ),
    **dict.fromkeys(["classification", "label"], "label"),
    **dict.fromkeys(
        ["code", "codecontests", "apps", "taco", "mbpp", "humaneval", "livecodebench", "primeintellect"], "code"
    ),
}
SCORERS = {"math": score_math, "text": score_text, "label": score_label}
CODE_KEYS = ("tests_passed", "tests_total", "timed_out")


def check_sandbox(limits: SandboxLimits) -> None:
    """Run ``print(1)`` in the sandbox once; RuntimeError with the child's last line if it does not work."""
    result = run_program("print(1)", "", limits)
    if result.returncode != 0 or result.stdout.strip() != "1":
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(
            f"the code sandbox does not run a trivial program with {limits.python!r} ({last}); "
            "check reward.kwargs['verifiable'] (python, uid, namespaces)"
        )


class VerifiableReward:
    """Batched reward fn; see the module docstring."""

    def __init__(self, routes: dict[str, str] | None = None, unknown: str = "error", workers: int = 2, **sandbox):
        bad = {k: v for k, v in (routes or {}).items() if v not in (*SCORERS, "code")}
        if bad:
            raise ValueError(f"verifiable reward: routes {bad} name unknown tasks; use math, text, label or code")
        if unknown not in ("error", "nan"):
            raise ValueError(f"verifiable reward: unknown={unknown!r}; use 'error' or 'nan'")
        self.routes = {**DATA_SOURCES, **(routes or {})}
        self.unknown, self.workers = unknown, max(1, int(workers))
        self.limits = SandboxLimits(**sandbox)
        self._sandbox_checked = False

    def _task(self, i: int, row: dict) -> str | None:
        source = row.get("data_source")
        task = self.routes.get(source) if isinstance(source, str) else None
        if task is None and self.unknown == "error":
            known = ", ".join(sorted(self.routes))
            raise ValueError(
                f"verifiable reward: row {i} has data_source {source!r}, which no scorer handles; known: {known} "
                "(add one with reward.kwargs={'verifiable': {'routes': {NAME: 'math'|'text'|'label'|'code'}}})"
            )
        return task

    def __call__(self, samples: Any, prompts: list[str], metadata: list[dict]) -> tuple[np.ndarray, dict]:
        if not isinstance(samples, (list, tuple)) or not all(isinstance(s, str) for s in samples):
            raise TypeError(
                f"the verifiable reward scores text responses (a list of B strings), got {type(samples).__name__}; "
                "use it with a language-model policy"
            )
        batch = len(samples)
        scores = np.full(batch, np.nan, dtype=np.float32)
        # "correct" first: the evaluation's headline metric is the first per-sample entry (evaluation.score_batch)
        info: dict[str, Any] = {"correct": scores, "task": [None] * batch, "format": np.full(batch, np.nan, np.float32)}
        info.update({k: np.full(batch, np.nan, dtype=np.float32) for k in CODE_KEYS})
        jobs, unrouted = [], 0
        for i, row in enumerate(metadata):
            row = row or {}
            task = self._task(i, row)
            info["task"][i] = row.get("data_source")
            if task is None:
                unrouted += 1
                continue
            truth = ground_truth_of(row)
            if truth is None:
                raise ValueError(
                    f"verifiable reward: row {i} (data_source {row.get('data_source')!r}) has no ground_truth "
                    "(nor reward_model.ground_truth); add the field to the row"
                )
            jobs.append((i, task, truth))
        code = [(i, t) for i, task, t in jobs if task == "code"]
        if code and not self._sandbox_checked:
            check_sandbox(self.limits)
            self._sandbox_checked = True
        for i, task, truth in jobs:
            if task != "code":
                scores[i], row_info = SCORERS[task](samples[i], truth)
                info["format"][i] = row_info["format"]
        with ThreadPoolExecutor(max_workers=self.workers) as pool:  # sandboxed runs wait on processes
            results = list(pool.map(lambda job: self._score_code(*job, samples), code))
        for (i, _), (score, row_info) in zip(code, results):
            scores[i] = score
            for key in ("format", *CODE_KEYS):
                info[key][i] = row_info[key]
        info["unrouted"] = unrouted
        info["correct"] = scores.copy()
        return scores, info

    def _score_code(self, i: int, truth: Any, samples: list[str]) -> tuple[float, dict]:
        try:
            return score_code(samples[i], truth, self.limits)
        except ValueError as exc:  # the row's tests are malformed: the dataset's fault, named by row
            raise ValueError(f"verifiable reward: row {i}: {exc}") from None


@register("verifiable")
def verifiable(routes: dict[str, str] | None = None, unknown: str = "error", workers: int = 2, **sandbox):
    """Factory of the ``verifiable`` reward. ``sandbox``: fields of :class:`SandboxLimits` (``wall_s``, ...)."""
    from reward_models.video import declare_kinds

    return declare_kinds(VerifiableReward(routes=routes, unknown=unknown, workers=workers, **sandbox), "text")


__all__ = ["DATA_SOURCES", "VerifiableReward", "check_sandbox", "verifiable"]
