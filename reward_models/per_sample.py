"""Per-sample (verl-style) user scorers, adapted into the batched reward contract.

A user file may define, instead of a batched ``fn(images, prompts, metadata)``, a scorer of one
sample in the style of verl's ``compute_score``::

    def compute_score(data_source, solution, ground_truth, extra_info) -> float | dict | None

``load_reward("path/to/file.py:compute_score")`` recognises it **by its parameter names**: it has
parameters named ``data_source``, ``solution`` (or verl's ``solution_str``), ``ground_truth`` and
``extra_info``, and every other parameter has a default (or is ``*args`` / ``**kwargs``). Such a
function is wrapped by :func:`adapt_per_sample`; for sample ``i`` of a batch it is called with
keywords:

* ``data_source  = metadata[i].get("data_source")``;
* ``solution     = samples[i]`` itself when the samples are strings (a language model's decoded
  responses, prompt excluded: verl's ``solution_str``); for an image family the i-th generated image
  as an RGB ``PIL.Image`` (uint8-rounded as :func:`reward_models.contract.to_pil`);
* ``ground_truth = metadata[i]["ground_truth"]``, else verl's ``metadata[i]["reward_model"]["ground_truth"]``
  (:func:`ground_truth_of`), else ``None``;
* ``extra_info   = {**the row's other fields, "prompt": prompts[i], "index": i}`` where "other
  fields" are the row's fields except ``data_source``, ``ground_truth`` and ``extra_info``; a
  row-level ``"extra_info"`` dict (verl's dataset layout) is merged in, flattened. ``prompt`` and
  ``index`` (the sample's position in the batch) are always set last and win. The dict is a fresh
  copy per call.

``reward.kwargs`` of such a reward are passed as extra keywords on every call (verl's
``reward_kwargs``); they must match parameters of the scorer.

Return value, per sample:

* a number (``int``/``float``/``bool``/numpy scalar/one-element tensor) → the score;
* a dict with a ``"score"`` key → that score; its other numeric entries are collected into the
  reward's info as per-sample arrays under ``info["extras"][key]`` (NaN where a sample lacks one);
* ``None`` (or ``{"score": None}``) → NaN, "not applicable" (the sample is then skipped by the
  weighted sum, like any NaN score); counted in ``info["num_none"]``;
* anything else → ``ValueError`` naming the plug-in, the sample index, its prompt and the value.

An exception raised by the scorer is re-raised as ``RuntimeError`` (chained, ``__cause__`` is the
original) naming the plug-in, the sample index, its prompt and its data source.

Routing by data source. A ``dict`` plug-in maps ``data_source`` values to scorers::

    REWARDS = {"counting": count_score, "ocr": ocr_score}

loaded with ``load_reward("file.py:REWARDS")`` (or ``load_reward("file.py")``, which picks a
module's ``REWARDS``, else its ``compute_score``). Each row goes to the scorer of its
``data_source``; a value may be a per-sample scorer (above) or a batched reward fn
``fn(images, prompts, metadata)`` (called once on the sub-batch of its rows). Rows whose
``data_source`` has no entry (including rows with none) score NaN, "not applicable", rather than
raising, so that a mixed dataset can be scored by several plug-ins side by side; they are counted in
``info["unrouted"]`` (and ``info["routed"]`` counts rows per data source), so a typo shows up as a
large unrouted count and a NaN ``reward/<name>/mean``.
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .contract import coerce_scores, takes_three_positional, to_pil

#: the four parameters (by name) that mark a per-sample scorer; "solution_str" is accepted for "solution"
PER_SAMPLE_PARAMS = ("data_source", "solution", "ground_truth", "extra_info")
_SOLUTION_NAMES = ("solution", "solution_str")
_ROW_KEYS = ("data_source", "ground_truth", "extra_info")  # row fields not copied flat into extra_info


def ground_truth_of(row: Mapping | None) -> Any:
    """A row's ground truth: its ``ground_truth``, else verl's ``reward_model: {"ground_truth": ...}``, else None."""
    row = row or {}
    if row.get("ground_truth") is not None:
        return row["ground_truth"]
    nested = row.get("reward_model")
    return nested.get("ground_truth") if isinstance(nested, Mapping) else None


def _solution(samples: Any, i: int) -> Any:
    """Sample ``i`` as a per-sample scorer receives it: the string of a text batch, else a PIL image."""
    if isinstance(samples, (list, tuple)) and isinstance(samples[i], str):
        return samples[i]
    return to_pil(samples[i : i + 1])[0]


def _solution_param(obj: Callable) -> str | None:
    """Name of the "solution" parameter if ``obj`` is a per-sample scorer, else ``None``."""
    try:
        params = inspect.signature(obj).parameters
    except (TypeError, ValueError):
        return None
    solution = next((n for n in _SOLUTION_NAMES if n in params), None)
    if solution is None or not all(n in params for n in ("data_source", "ground_truth", "extra_info")):
        return None
    named = {"data_source", solution, "ground_truth", "extra_info"}
    for name, p in params.items():
        if name in named:
            if p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL, p.VAR_KEYWORD):
                return None  # cannot be passed by keyword
        elif p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.default is p.empty:
            return None  # another required parameter: not the per-sample contract
    return solution


def is_per_sample(obj: Any) -> bool:
    """True if ``obj`` is a per-sample scorer ``(data_source, solution, ground_truth, extra_info)``.

    The test is on parameter names (see the module docstring); the batched 3-positional-argument
    contract ``fn(images, prompts, metadata)`` and factories never match it.
    """
    return callable(obj) and _solution_param(obj) is not None


def _short(text: Any, limit: int = 80) -> str:
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _as_score(value: Any) -> float | None:
    """A scorer's return value -> float, ``None`` for "not applicable"; raises TypeError otherwise."""
    if isinstance(value, dict):
        if "score" not in value:
            raise TypeError("dict without a 'score' key")
        value = value["score"]
        if isinstance(value, dict):
            raise TypeError("'score' is itself a dict")
    if value is None:
        return None
    if isinstance(value, numbers.Real):  # int, float, bool, numpy scalars
        return float(value)
    if hasattr(value, "detach"):  # torch tensor, without importing torch here
        value = value.detach().float().cpu().numpy()
    if isinstance(value, np.ndarray) and value.size == 1 and np.issubdtype(value.dtype, np.number):
        return float(value.reshape(()))
    raise TypeError(f"type {type(value).__name__}")


def _describe(value: Any) -> str:
    return f"{_short(repr(value), 60)} ({type(value).__name__})"


def _call_kwargs(images: Any, prompts: list[str], metadata: list[dict], i: int) -> dict[str, Any]:
    """The keyword arguments of the per-sample call for sample ``i`` (solution under "solution")."""
    row = metadata[i] or {}
    extra = {k: v for k, v in row.items() if k not in _ROW_KEYS}
    row_extra = row.get("extra_info")
    if isinstance(row_extra, Mapping):
        extra.update(row_extra)
    elif row_extra is not None:
        extra["extra_info"] = row_extra
    extra["prompt"] = prompts[i]
    extra["index"] = i
    return {
        "data_source": row.get("data_source"),
        "solution": _solution(images, i),
        "ground_truth": ground_truth_of(row),
        "extra_info": extra,
    }


class PerSampleReward:
    """Batched reward fn around a per-sample scorer (see the module docstring for the call).

    ``name`` is used in error messages (the plug-in spec, e.g. ``"my.py:compute_score"``).
    """

    def __init__(self, scorer: Callable, name: str, **kwargs: Any):
        solution = _solution_param(scorer)
        if solution is None:
            raise ValueError(
                f"reward {name!r}: expected a per-sample scorer with parameters {', '.join(PER_SAMPLE_PARAMS)}"
            )
        if kwargs:
            try:
                inspect.signature(scorer).bind_partial(**kwargs)
            except TypeError as exc:
                raise ValueError(
                    f"reward {name!r}: reward.kwargs {sorted(kwargs)} do not match the scorer's parameters "
                    f"{list(inspect.signature(scorer).parameters)} ({exc})"
                ) from exc
        self.scorer, self.name, self.solution_param, self.kwargs = scorer, name, solution, dict(kwargs)

    def score_indices(self, images: Any, prompts: list[str], metadata: list[dict], indices) -> tuple[np.ndarray, dict]:
        """Scores ``[len(indices)]`` of the samples ``indices`` of a batch, and the info dict."""
        scores = np.full(len(indices), np.nan, dtype=np.float32)
        extras: dict[str, np.ndarray] = {}
        num_none = 0
        for j, i in enumerate(indices):
            call = _call_kwargs(images, prompts, metadata, i)
            call[self.solution_param] = call.pop("solution")
            sample = f"sample {i} (prompt {_short(prompts[i])!r}, data_source {call['data_source']!r})"
            try:
                value = self.scorer(**call, **self.kwargs)
            except Exception as exc:
                raise RuntimeError(
                    f"reward plug-in {self.name!r} raised {type(exc).__name__} for {sample}: {exc}"
                ) from exc
            try:
                score = _as_score(value)
            except TypeError:
                raise ValueError(
                    f"reward plug-in {self.name!r} returned {_describe(value)} for {sample}; "
                    "expected a float or {'score': float} (None = not applicable)"
                ) from None
            if score is None:
                num_none += 1
            else:
                scores[j] = score
            if isinstance(value, dict):
                for key, v in value.items():
                    if key != "score" and isinstance(v, numbers.Real):
                        extras.setdefault(key, np.full(len(indices), np.nan, dtype=np.float32))[j] = float(v)
        info: dict[str, Any] = {}
        if num_none:
            info["num_none"] = num_none
        if extras:
            info["extras"] = extras
        return scores, info

    def __call__(self, images: Any, prompts: list[str], metadata: list[dict]) -> tuple[np.ndarray, dict]:
        return self.score_indices(images, prompts, metadata, range(len(prompts)))


class DataSourceRouter:
    """Batched reward fn routing each row to the plug-in of its ``metadata[i]["data_source"]``.

    ``routes`` maps a data source to a per-sample scorer or a batched ``fn(images, prompts, metadata)``.
    Rows with no matching route score NaN (see the module docstring).
    """

    def __init__(self, routes: Mapping[Any, Callable], name: str, **kwargs: Any):
        if kwargs:
            raise ValueError(
                f"reward {name!r} routes by data_source, so it cannot take reward.kwargs {sorted(kwargs)}; "
                "bind them in the file (functools.partial) instead"
            )
        if not routes:
            raise ValueError(f"reward {name!r}: the data_source -> scorer dict is empty")
        self.name = name
        self.routes: dict[Any, Callable] = {}
        for source, fn in routes.items():
            label = f"{name}[{source!r}]"
            if is_per_sample(fn):
                self.routes[source] = PerSampleReward(fn, label)
            elif callable(fn) and takes_three_positional(fn):
                self.routes[source] = fn
            else:
                raise ValueError(
                    f"reward {label}: expected a per-sample scorer ({', '.join(PER_SAMPLE_PARAMS)}) or a "
                    f"batched fn(images, prompts, metadata), got {_short(repr(fn), 60)}"
                )

    def __call__(self, images: Any, prompts: list[str], metadata: list[dict]) -> tuple[np.ndarray, dict]:
        batch = len(prompts)
        scores = np.full(batch, np.nan, dtype=np.float32)
        groups: dict[Any, list[int]] = {}
        unrouted = 0
        for i, row in enumerate(metadata):
            source = (row or {}).get("data_source")
            try:
                routed = source in self.routes
            except TypeError:  # unhashable data_source
                routed = False
            if routed:
                groups.setdefault(source, []).append(i)
            else:
                unrouted += 1
        info: dict[str, Any] = {"unrouted": unrouted, "routed": {str(s): len(ix) for s, ix in groups.items()}}
        for source, idx in groups.items():
            fn = self.routes[source]
            label = f"{self.name}[{source!r}]"
            if isinstance(fn, PerSampleReward):
                sub, sub_info = fn.score_indices(images, prompts, metadata, idx)
            else:
                sel = _select(images, idx)
                try:
                    out = fn(sel, [prompts[i] for i in idx], [metadata[i] for i in idx])
                except Exception as exc:
                    raise RuntimeError(f"reward plug-in {label} raised {type(exc).__name__}: {exc}") from exc
                if not (isinstance(out, tuple) and len(out) == 2):
                    raise ValueError(f"reward plug-in {label} must return a (scores, info) tuple")
                sub, sub_info = coerce_scores(label, out[0], len(idx)), out[1]
            scores[idx] = sub
            if sub_info:
                info[str(source)] = sub_info
        return scores, info


def _select(images: Any, idx: list[int]) -> Any:
    """``images[idx]`` for a tensor, an array or a list (of strings: a language model's responses)."""
    if isinstance(images, (list, tuple)):
        return [images[i] for i in idx]
    if hasattr(images, "detach"):
        import torch

        return images[torch.as_tensor(idx, dtype=torch.long, device=images.device)]
    return np.asarray(images)[idx]


def adapt_per_sample(obj: Any, name: str, **kwargs: Any) -> Callable:
    """Wrap a per-sample scorer or a ``{data_source: scorer}`` dict into a batched reward fn."""
    if isinstance(obj, Mapping):
        return DataSourceRouter(obj, name, **kwargs)
    return PerSampleReward(obj, name, **kwargs)


__all__ = [
    "PER_SAMPLE_PARAMS",
    "DataSourceRouter",
    "PerSampleReward",
    "adapt_per_sample",
    "ground_truth_of",
    "is_per_sample",
]
