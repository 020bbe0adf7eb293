"""Reward registry, loading of user reward files, and the weighted ``MultiReward``.

Contract of a batched reward function::

    fn(images, prompts, metadata) -> (scores, info)

* ``images``: float tensor in ``[0, 1]`` of shape ``(B, 3, H, W)``;
* ``prompts``: ``list[str]`` of length ``B``;
* ``metadata``: ``list[dict]`` of length ``B`` (the dataset rows);
* ``scores``: anything coercible to ``np.float32`` of shape ``[B]``
  (``np.ndarray``, list, tensor); ``NaN`` means "not applicable to this sample";
* ``info``: ``dict`` of extra diagnostics (may be empty).

A *factory* is ``factory(**kwargs) -> fn``; the registry maps names to factories
so that heavy imports (models, weights) only happen when a reward is requested.

A user file (``"path/to/file.py:attr"``) may also provide a per-sample scorer in verl's style,
``compute_score(data_source, solution, ground_truth, extra_info) -> float``, or a dict
``{data_source: scorer}`` routing rows by their ``data_source``; :func:`load_reward` adapts both
into the batched contract (see :mod:`reward_models.per_sample`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from foundation import plugins
from foundation.errors import RewardError

from .contract import RewardFactory, RewardFn, coerce_scores, takes_three_positional
from .per_sample import adapt_per_sample, is_per_sample

#: name -> factory(**kwargs) -> reward fn
REGISTRY: dict[str, RewardFactory] = {}


def register(name: str) -> Callable[[RewardFactory], RewardFactory]:
    """Decorator adding ``factory`` to :data:`REGISTRY` under ``name``.

    Raises ``ValueError`` if the name is already taken by a different factory.
    """

    def deco(factory: RewardFactory) -> RewardFactory:
        existing = REGISTRY.get(name)
        if existing is not None and existing is not factory:
            raise ValueError(
                f"reward {name!r} is already registered ({existing.__module__}.{existing.__qualname__}); "
                "pick another name"
            )
        REGISTRY[name] = factory
        return factory

    return deco


def _available() -> str:
    names = ", ".join(sorted({*REGISTRY, *plugins.names("rewards")})) or "(none)"
    return (
        f"registered rewards: {names}; or a user file as 'path/to/file.py:fn_name' (a batched "
        "fn(images, prompts, metadata), a factory, a per-sample compute_score(data_source, solution, "
        "ground_truth, extra_info), or a {data_source: scorer} dict)"
    )


#: attributes tried, in order, for a spec naming only a file ("path/to/file.py")
DEFAULT_USER_ATTRS = ("REWARDS", "compute_score")


def _load_user_attr(spec_str: str) -> Any:
    """Import ``path/to/file.py`` and return its attribute ``attr`` (spec ``"path/to/file.py:attr"``).

    A spec without ``:attr`` picks the first of :data:`DEFAULT_USER_ATTRS` the file defines. The
    attribute must be callable or a dict (a ``{data_source: scorer}`` routing table).
    """
    path, sep, attr = spec_str.rpartition(":")
    if not sep and spec_str.endswith(".py"):
        path, attr = spec_str, ""
    elif not path or not attr:
        raise ValueError(f"reward {spec_str!r}: expected 'path/to/file.py:fn_name'")
    path = os.path.expanduser(path)
    if not os.path.isfile(path):
        raise ValueError(
            f"reward {spec_str!r}: file {path!r} does not exist (cwd: {os.getcwd()}); "
            "give a path to a .py file followed by ':fn_name'"
        )
    try:
        module = plugins.import_user_file(path)
    except ValueError as exc:
        raise ValueError(f"reward {spec_str!r}: {exc}") from exc
    except RuntimeError as exc:  # the user file's own error, with context
        raise RuntimeError(f"reward {spec_str!r}: {exc}") from exc
    public = sorted(n for n in vars(module) if not n.startswith("_") and callable(getattr(module, n)))
    if not attr:
        attr = next((a for a in DEFAULT_USER_ATTRS if hasattr(module, a)), "")
        if not attr:
            raise ValueError(
                f"reward {spec_str!r}: file {path!r} defines none of {list(DEFAULT_USER_ATTRS)}; "
                f"name the function as 'file.py:fn_name' (callables defined there: {public})"
            )
    if not hasattr(module, attr):
        raise ValueError(
            f"reward {spec_str!r}: file {path!r} has no attribute {attr!r}; callables defined there: {public}"
        )
    obj = getattr(module, attr)
    if not callable(obj) and not isinstance(obj, Mapping):
        raise ValueError(
            f"reward {spec_str!r}: {attr!r} in {path!r} is not callable (nor a {{data_source: scorer}} dict)"
        )
    return obj


def _is_factory(obj: Callable) -> bool:
    """A user callable is a factory if it cannot take 3 positional args and is not a per-sample scorer.

    Per-sample scorers (parameters ``data_source, solution, ground_truth, extra_info``) are recognised
    first, by name, because verl's ``extra_info=None`` default would otherwise let them bind 3
    positional args and pass for a batched fn.
    """
    return not is_per_sample(obj) and not takes_three_positional(obj)


def check_reward_spec(spec: str) -> str | None:
    """Why ``spec`` (a reward name or ``"path/to/file.py:fn"``) cannot be loaded, or None; nothing is built."""
    if spec in REGISTRY or spec in plugins.names("rewards"):
        return None
    if ":" in spec or spec.endswith(".py"):
        path = spec if spec.endswith(".py") else spec.rpartition(":")[0]
        if not os.path.isfile(os.path.expanduser(path)):
            return f"reward {spec!r}: file {path!r} does not exist (cwd: {os.getcwd()})"
        return None
    return f"unknown reward {spec!r}; {_available()}"


def load_reward(name: str, **kwargs: Any) -> RewardFn:
    """Build a reward fn from a registry ``name`` or a ``"path/to/file.py:attr"`` spec.

    For a user file, ``attr`` is resolved in this order:

    1. a dict ``{data_source: scorer}`` -> rows routed by ``metadata[i]["data_source"]``
       (:class:`reward_models.per_sample.DataSourceRouter`; unrouted rows score NaN);
    2. a per-sample scorer ``(data_source, solution, ground_truth, extra_info)``, recognised by
       its parameter names -> adapted to the batched contract
       (:class:`reward_models.per_sample.PerSampleReward`); ``kwargs`` are passed on every call;
    3. a batched reward fn, i.e. a callable accepting three positional arguments
       (used directly; ``kwargs`` must then be empty);
    4. otherwise a factory ``factory(**kwargs) -> fn``.

    ``"path/to/file.py"`` without ``:attr`` uses the file's ``REWARDS``, else its ``compute_score``.
    """
    if name not in REGISTRY:
        factory = plugins.load("rewards", name)  # a reward offered by an installed package (a world)
        if factory is not None:
            register(name)(factory)
    if name in REGISTRY:
        return REGISTRY[name](**kwargs)
    if ":" in name or name.endswith(".py"):
        obj = _load_user_attr(name)
        if isinstance(obj, Mapping) or is_per_sample(obj):
            return adapt_per_sample(obj, name, **kwargs)
        if _is_factory(obj):
            fn = obj(**kwargs)
            if not callable(fn):
                raise ValueError(f"reward {name!r}: factory returned {type(fn).__name__}, expected a callable")
            return fn
        if kwargs:
            raise ValueError(
                f"reward {name!r} is a plain reward fn(images, prompts, metadata), so it cannot take "
                f"reward.kwargs {sorted(kwargs)}; remove them or make it a factory(**kwargs) -> fn"
            )
        return obj
    raise ValueError(f"unknown reward {name!r}; {_available()}")


class MultiReward:
    """Weighted set of rewards: ``(name, weight, fn)`` triples.

    ``__call__`` returns the per-reward scores; :meth:`combine` reduces them to the
    scalar reward used for advantages; :meth:`stats` gives logging metrics.
    """

    def __init__(self, entries: Sequence[tuple[str, float, RewardFn]]):
        if not entries:
            raise ValueError("MultiReward needs at least one reward")
        self.entries: list[tuple[str, float, RewardFn]] = [(n, float(w), f) for n, w, f in entries]

    @property
    def names(self) -> list[str]:
        """Reward names in evaluation order."""
        return [n for n, _, _ in self.entries]

    @property
    def weights(self) -> dict[str, float]:
        """name -> weight."""
        return {n: w for n, w, _ in self.entries}

    def __call__(self, images: Any, prompts: list[str], metadata: list[dict]) -> tuple[dict[str, np.ndarray], dict]:
        """Evaluate every reward; returns ``(per_reward, info)``.

        ``info`` holds each reward's info dict under its name (only non-empty ones).
        """
        batch = len(images)
        if len(prompts) != batch or len(metadata) != batch:
            raise ValueError(f"rewards got {batch} images but {len(prompts)} prompts and {len(metadata)} metadata rows")
        per_reward: dict[str, np.ndarray] = {}
        info: dict[str, Any] = {}
        for name, _, fn in self.entries:
            try:
                out = fn(images, prompts, metadata)
            except Exception as exc:
                raise RewardError(f"reward {name!r} raised {type(exc).__name__}: {exc}") from exc
            if not (isinstance(out, tuple) and len(out) == 2):
                raise RewardError(f"reward {name!r} must return a (scores, info) tuple, got {type(out).__name__}")
            scores, r_info = out
            try:
                per_reward[name] = coerce_scores(name, scores, batch)
            except ValueError as exc:
                raise RewardError(str(exc)) from exc
            infinite = np.flatnonzero(np.isinf(per_reward[name]))
            if infinite.size:
                i = int(infinite[0])
                raise RewardError(
                    f"reward {name!r} returned {per_reward[name][i]} for sample {i} (prompt {prompts[i]!r}); scores "
                    "must be finite numbers, or NaN for 'not applicable'"
                )
            if r_info:
                info[name] = r_info
        return per_reward, info

    def combine(self, per_reward: dict[str, np.ndarray]) -> np.ndarray:
        """Weighted sum ``sum_i w_i * s_i``; NaN terms are skipped, all-NaN -> NaN."""
        stacked = np.stack([np.asarray(per_reward[n], dtype=np.float32) for n in self.names])  # [R, B]
        w = np.asarray([w for _, w, _ in self.entries], dtype=np.float32)[:, None]
        valid = ~np.isnan(stacked)
        total = np.where(valid, stacked * w, 0.0).sum(axis=0).astype(np.float32)
        total[~valid.any(axis=0)] = np.nan
        return total

    def stats(self, per_reward: dict[str, np.ndarray], combined: np.ndarray) -> dict[str, float]:
        """NaN-aware mean/std of the combined reward and of each reward."""

        def mean_std(x: np.ndarray) -> tuple[float, float]:
            x = np.asarray(x, dtype=np.float64)
            x = x[~np.isnan(x)]
            if x.size == 0:
                return float("nan"), float("nan")
            return float(x.mean()), float(x.std())

        out: dict[str, float] = {}
        out["reward/mean"], out["reward/std"] = mean_std(combined)
        for name in self.names:
            out[f"reward/{name}/mean"], out[f"reward/{name}/std"] = mean_std(per_reward[name])
        return out


def build_reward(
    fns: dict[str, float], kwargs: dict[str, dict] | None = None, sources: dict[str, str] | None = None
) -> MultiReward:
    """Build a :class:`MultiReward` from ``{name: weight}`` and optional ``{name: factory kwargs}``.

    ``sources`` maps a name to what it loads (a registry name or ``"path/to/file.py:fn"``); a name
    without an entry loads itself. It exists because ml-collections config keys cannot contain dots,
    so a user file is given an alias: ``reward.sources = {"mine": "my_reward.py:score"}``,
    ``reward.fns = {"mine": 1.0}``; metrics are then logged as ``reward/mine/...``.
    """
    sources = dict(sources or {})
    unknown_src = sorted(set(sources) - set(fns))
    if unknown_src:
        raise ValueError(f"reward.sources has entries {unknown_src} that are not in reward.fns {sorted(fns)}")
    if not fns:
        raise ValueError(
            "no rewards configured: set reward.fns = {name: weight}, e.g. {'jpeg_compressibility': 1.0}; "
            + _available()
        )
    kwargs = dict(kwargs or {})
    unknown_kw = sorted(set(kwargs) - set(fns))
    if unknown_kw:
        raise ValueError(f"reward.kwargs has entries {unknown_kw} that are not in reward.fns {sorted(fns)}")
    entries = []
    for name, weight in fns.items():
        try:
            weight = float(weight)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"reward.fns[{name!r}]: weight {weight!r} is not a number") from exc
        entries.append((name, weight, load_reward(sources.get(name, name), **kwargs.get(name, {}))))
    return MultiReward(entries)
