"""Prompt sources (built-in lists, .txt/.json/.jsonl files) and a deterministic sampler.

Every row is a ``dict`` with at least ``"prompt"`` (``str``); every other field of a JSON/JSONL row
(``ground_truth``, ``data_source``, ``extra_info``, ...) is kept as is and reaches the reward
functions as that sample's ``metadata`` (``rollout.sample_rollout`` puts all non-"prompt" fields
there).

Built-in sources (:data:`BUILTIN_PROMPTS`):

* ``"simple"``: a short list of object prompts (the default for smoke tests);
* ``"animals"``: 45 common animals ("cat", "dog", ...), DDPO's simple animal prompts, shipped as
  the package data file ``ddpo_grpo/data/animals.txt`` and read on first use.

Row sets of installed packages (``foundation.plugins``, entry-point group ``ddpo_grpo.prompt_sources``), e.g. the
embedded worlds' ``"shapes_train"`` / ``"shapes_test"`` (ShapesWorld's split, ``worlds/shapes/grammar.py``),
``"motion_train"``, ``"shapes_edit_test"``: rows with metadata, looked up by name like the built-ins.
"""

from __future__ import annotations

import collections.abc
import json
import os
from collections.abc import Callable, Iterator, Sequence
from importlib import resources

import numpy as np

from foundation import plugins

#: A short list of simple object prompts (the default for smoke tests).
SIMPLE_PROMPTS = (
    "a red circle",
    "a blue square",
    "a green triangle",
    "a yellow star",
    "a cat",
    "a dog",
    "a horse",
    "a bird",
    "an apple",
    "a banana",
    "a red car",
    "a wooden chair",
    "a coffee mug",
    "a house",
    "a tree",
    "a bicycle",
)


def _parse_txt(lines) -> list[str]:
    """Prompts of a text file's lines: stripped, blank lines and ``#`` comments skipped."""
    return [t for t in (line.strip() for line in lines) if t and not t.startswith("#")]


class PackagedPrompts(collections.abc.Sequence):
    """A prompt list stored as a package data file (one prompt per line), read on first access.

    ``resource`` is relative to the ``ddpo_grpo`` package, e.g. ``"data/animals.txt"``.
    """

    def __init__(self, resource: str, package: str = "ddpo_grpo"):
        self.resource, self.package = resource, package
        self._prompts: tuple[str, ...] | None = None

    def _load(self) -> tuple[str, ...]:
        if self._prompts is None:
            ref = resources.files(self.package).joinpath(self.resource)
            try:
                text = ref.read_text(encoding="utf-8")
            except (FileNotFoundError, OSError) as exc:
                raise FileNotFoundError(
                    f"built-in prompt file {self.package}/{self.resource} is missing from the installed package; "
                    "reinstall ddpo_grpo (it ships as package data)"
                ) from exc
            self._prompts = tuple(_parse_txt(text.splitlines()))
        return self._prompts

    def __len__(self) -> int:
        return len(self._load())

    def __getitem__(self, index):
        return self._load()[index]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __repr__(self) -> str:
        return f"PackagedPrompts({self.package}/{self.resource})"


#: 45 common animals (DDPO's simple animal prompts), from ddpo_grpo/data/animals.txt
ANIMAL_PROMPTS = PackagedPrompts("data/animals.txt")

#: built-in name -> sequence of prompts
BUILTIN_PROMPTS: dict[str, Sequence[str]] = {
    "simple": SIMPLE_PROMPTS,
    "animals": ANIMAL_PROMPTS,
}


def _check_row(row: object, where: str) -> dict:
    """Validate one JSON row; ``where`` is e.g. ``"file.jsonl line 3"``."""
    if not isinstance(row, dict):
        raise ValueError(f'{where}: expected a JSON object like {{"prompt": "..."}}, got {type(row).__name__}')
    if "prompt" not in row:
        raise ValueError(f'{where}: missing "prompt" field (fields present: {sorted(row)})')
    prompt = row["prompt"]
    if isinstance(prompt, list):  # chat messages (language models): [{"role": ..., "content": ...}, ...]
        if not prompt or not all(
            isinstance(m, dict) and isinstance(m.get("content"), str) and "role" in m for m in prompt
        ):
            raise ValueError(f'{where}: a list "prompt" must be chat messages [{{"role": ..., "content": "..."}}, ...]')
    elif not isinstance(prompt, str):
        raise ValueError(f'{where}: "prompt" must be a string or a list of chat messages, got {type(prompt).__name__}')
    return dict(row)


def _load_txt(path: str) -> list[dict]:
    """One prompt per line; blank lines and ``#`` comments are skipped."""
    with open(path, encoding="utf-8") as f:
        return [{"prompt": text} for text in _parse_txt(f)]


def _load_jsonl(path: str) -> list[dict]:
    """One JSON object per line; blank lines are skipped."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path} line {lineno}"
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: invalid JSON ({exc.msg} at column {exc.colno})") from exc
            rows.append(_check_row(obj, where))
    return rows


def _load_json(path: str) -> list[dict]:
    """A JSON list of objects."""
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path} line {exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from exc
    if not isinstance(data, list):
        raise ValueError(f'{path}: expected a JSON list of {{"prompt": ...}} objects, got {type(data).__name__}')
    return [_check_row(obj, f"{path} item [{i}]") for i, obj in enumerate(data)]


#: file extension -> loader(path) -> rows
FILE_LOADERS: dict[str, Callable[[str], list[dict]]] = {
    ".txt": _load_txt,
    ".json": _load_json,
    ".jsonl": _load_jsonl,
}


def load_prompts(source: str) -> list[dict]:
    """Load prompt rows from a built-in name or a ``.txt`` / ``.json`` / ``.jsonl`` file.

    JSON/JSONL rows keep all their fields (everything but "prompt" becomes reward metadata).

    Raises ``ValueError`` for an unknown source, a malformed row (naming file and
    line/index), or an empty result.
    """
    provider = None if source in BUILTIN_PROMPTS else plugins.load("prompt_sources", source)
    if source in BUILTIN_PROMPTS:
        rows = [{"prompt": p} for p in BUILTIN_PROMPTS[source]]
    elif provider is not None:
        rows = [_check_row(r, f"prompt source {source!r} row {i}") for i, r in enumerate(provider())]
    else:
        path = os.path.expanduser(str(source))
        ext = os.path.splitext(path)[1].lower()
        if not os.path.isfile(path) or ext not in FILE_LOADERS:
            reason = "unsupported file extension" if os.path.isfile(path) else "no such built-in or file"
            raise ValueError(
                f"prompt source {source!r}: {reason}; use a built-in "
                f"({', '.join(sorted([*BUILTIN_PROMPTS, *plugins.names('prompt_sources')]))}) "
                f"or a path to a {' / '.join(FILE_LOADERS)} file"
            )
        rows = FILE_LOADERS[ext](path)
    if not rows:
        raise ValueError(f"prompt source {source!r} contains no prompts")
    chat = [isinstance(r["prompt"], list) for r in rows]
    if any(chat) and not all(chat):
        first = chat.index(not chat[0])
        raise ValueError(
            f"prompt source {source!r} mixes chat rows (prompt = a list of messages) and plain-text rows: row 0 is "
            f"{'chat' if chat[0] else 'plain'}, row {first} is not; convert them to one kind"
        )
    return rows


class PromptSampler:
    """Deterministic per-epoch prompt draws.

    ``draw(epoch, n)`` depends only on ``(seed, epoch, n)``, never on call history,
    so every process (all ranks call it with the same ``seed``) agrees on the
    epoch's prompts, and a resumed run redraws the same prompts.

    ``stratify_by``: "" draws rows uniformly; a row field (e.g. "task") splits the rows into strata
    by that field's value and gives every stratum an equal share of each draw (the first
    ``n mod S`` strata of a per-epoch shuffle get one more), each stratum's share drawn as below.
    """

    def __init__(self, rows: Sequence[dict], seed: int = 0, stratify_by: str = ""):
        if not rows:
            raise ValueError("PromptSampler needs at least one prompt row")
        self.rows = list(rows)
        self.seed = int(seed)
        self.strata: list[list[int]] = [list(range(len(self.rows)))]
        if stratify_by:
            missing = [i for i, r in enumerate(self.rows) if stratify_by not in r]
            if missing:
                raise ValueError(
                    f"prompts.stratify_by={stratify_by!r}: row {missing[0]} (prompt {self.rows[missing[0]].get('prompt')!r}) "
                    f'has no field {stratify_by!r}; use a prompt file whose rows all have it, or stratify_by=""'
                )
            by_value: dict[str, list[int]] = {}
            for i, r in enumerate(self.rows):
                by_value.setdefault(str(r[stratify_by]), []).append(i)
            self.strata = [by_value[k] for k in sorted(by_value)]

    def draw(self, epoch: int, n: int, round_index: int = 0) -> list[dict]:
        """``n`` rows for ``epoch``; within a stratum without replacement if its share fits, else in
        whole shuffled passes over the stratum plus part of one more (each row ⌊k/m⌋ or ⌈k/m⌉ times for
        a share of k from m rows), so that no prompt gets more groups than its share requires. An extra
        round of the epoch (dynamic sampling, ``round_index`` > 0) draws its own rows the same way.

        Returned rows are shallow copies, so callers may annotate them freely.
        """
        if n < 0:
            raise ValueError(f"PromptSampler.draw: n must be >= 0, got {n}")
        key = self.seed * 1_000_003 + int(epoch)
        rng = np.random.default_rng(key if round_index == 0 else [key & 0xFFFFFFFF, int(round_index)])
        if len(self.strata) == 1:
            shares = [n]
        else:
            shares = [n // len(self.strata)] * len(self.strata)
            for s in rng.permutation(len(self.strata))[: n % len(self.strata)]:
                shares[s] += 1
        idx: list[int] = []
        for members, k in zip(self.strata, shares):
            passes = [rng.permutation(len(members)) for _ in range(-(-k // len(members)))]
            picked = np.concatenate(passes)[:k] if passes else []
            idx.extend(members[j] for j in picked)
        if len(self.strata) > 1:
            idx = [idx[j] for j in rng.permutation(len(idx))]
        return [dict(self.rows[i]) for i in idx]


def split_rows(rows: Sequence[dict]) -> tuple[list[str], list[dict]]:
    """Dataset rows as the reward contract takes them: (prompts, metadata = every other field of each row)."""
    return [r["prompt"] for r in rows], [{k: v for k, v in r.items() if k != "prompt"} for r in rows]
