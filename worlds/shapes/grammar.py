"""ShapesWorld prompts: the grammar, every prompt of every task, parsing, and the fixed split.

Grammar (lower case, no final period; the spec in this package's README.md is authoritative):

=================  ==========================================================  =====
task               form                                                        count
=================  ==========================================================  =====
``single_object``  ``a {color} {shape}``                                       15
``counting``       ``{two|three|four} {color} {shape}s``                       45
``two_object``     ``a {c1} {s1} and a {c2} {s2}``, ``(c1, s1) != (c2, s2)``   210
``position``       ``a {c1} {s1} {to the left of|to the right of|above|below}  840
                   a {c2} {s2}``, ``(c1, s1) != (c2, s2)``
=================  ==========================================================  =====

Both orders of a two-object pair are distinct prompts. Position prompts also name two different
colour–shape pairs (with two identical objects "A left of A" would not say which is which).

Train/test split (:func:`make_split`, shipped as ``worlds/shapes/data/shapes_{train,test}.jsonl``;
``python -m worlds.shapes split`` regenerates them). The prompt sets are disjoint and the rule is
fixed by :data:`SPLIT_SEED` through SHA-256 ranks (no RNG, so it is the same on every platform and
library version); :func:`split_rule` returns the drawn sets:

* **held-out pairs** — 3 colour–shape pairs, one per shape, with 3 different colours. A two-object
  or position prompt goes to *test* iff it names at least one held-out pair, so these pairs never
  appear in any *train* two-object or position prompt (every colour and every shape still does,
  with other partners). They do appear in train as single objects and in counting prompts.
* **held-out counting combos** — 9 ``(count, color, shape)`` triples, 3 per count, with 9
  different colour–shape pairs: each held-out pair-at-a-count is in test, while the same pair at the
  two other counts, and the same count with 12 other pairs, are in train.
* **held-out singles** — 3 single-object prompts (pairs outside the held-out pairs) are in test;
  those pairs are still seen in train inside counting / two-object / position prompts.

With seed 0: 708 train prompts (12 single, 36 counting, 132 two-object, 528 position) and 402 test
prompts (3, 9, 78, 312).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ddpo_grpo.split_files import Splits

from .world import (
    CANVAS,
    COLORS,
    COUNT_WORDS,
    RELATIONS,
    SHAPES,
    TASKS,
    Constraints,
    ObjectSpec,
    Scene,
    render,
    sample_scene,
)

#: seed of the shipped split
SPLIT_SEED = 0
#: directory of the shipped split files
DATA_DIR = Path(__file__).resolve().parent / "data"
SPLITS = ("train", "test")

_WORD_COUNTS = {w: n for n, w in COUNT_WORDS.items()}
_PHRASE_RELATIONS = {p: r for r, p in RELATIONS.items()}
_C = "(" + "|".join(COLORS) + ")"
_S = "(" + "|".join(SHAPES) + ")"
_REL = "(" + "|".join(re.escape(p) for p in RELATIONS.values()) + ")"
_PATTERNS = {
    "single_object": re.compile(rf"^a {_C} {_S}$"),
    "counting": re.compile(rf"^({'|'.join(_WORD_COUNTS)}) {_C} {_S}s$"),
    "two_object": re.compile(rf"^a {_C} {_S} and a {_C} {_S}$"),
    "position": re.compile(rf"^a {_C} {_S} {_REL} a {_C} {_S}$"),
}


# --------------------------------------------------------------------------------------------
# text <-> constraints
# --------------------------------------------------------------------------------------------


def format_prompt(c: Constraints) -> str:
    """The prompt text of ``c`` (inverse of :func:`parse_prompt`)."""
    o = c.objects
    if c.task == "single_object":
        return f"a {o[0].color} {o[0].shape}"
    if c.task == "counting":
        return f"{COUNT_WORDS[o[0].count]} {o[0].color} {o[0].shape}s"
    if c.task == "two_object":
        return f"a {o[0].color} {o[0].shape} and a {o[1].color} {o[1].shape}"
    return f"a {o[0].color} {o[0].shape} {RELATIONS[c.relation]} a {o[1].color} {o[1].shape}"


def parse_prompt(prompt: str) -> Constraints:
    """Parse a ShapesWorld prompt into its :class:`Constraints`.

    Case, surrounding/repeated whitespace and one final period are forgiven. Raises ``ValueError``
    naming the prompt (and the accepted forms) if it is not in the grammar.
    """
    if not isinstance(prompt, str):
        raise ValueError(f"ShapesWorld prompt must be a string, got {type(prompt).__name__}: {prompt!r}")
    text = " ".join(prompt.strip().lower().split())
    if text.endswith("."):
        text = text[:-1].rstrip()
    for task, pat in _PATTERNS.items():
        m = pat.match(text)
        if not m:
            continue
        g = m.groups()
        try:
            if task == "single_object":
                return Constraints(task, (ObjectSpec(g[0], g[1]),))
            if task == "counting":
                return Constraints(task, (ObjectSpec(g[1], g[2], _WORD_COUNTS[g[0]]),))
            if task == "two_object":
                return Constraints(task, (ObjectSpec(g[0], g[1]), ObjectSpec(g[2], g[3])))
            return Constraints(task, (ObjectSpec(g[0], g[1]), ObjectSpec(g[3], g[4])), _PHRASE_RELATIONS[g[2]])
        except ValueError as exc:
            raise ValueError(f"ShapesWorld prompt {prompt!r}: {exc}") from exc
    raise ValueError(
        f"{prompt!r} is not a ShapesWorld prompt; expected 'a {{color}} {{shape}}', "
        f"'{{two|three|four}} {{color}} {{shape}}s', 'a {{color}} {{shape}} and a {{color}} {{shape}}' or "
        f"'a {{color}} {{shape}} {{{'|'.join(RELATIONS.values())}}} a {{color}} {{shape}}' "
        f"with colours {'/'.join(COLORS)} and shapes {'/'.join(SHAPES)}"
    )


def constraints_of(item) -> Constraints:
    """:class:`Constraints` from a prompt string, a row dict (its ``task``/``objects``/``relation``
    fields when present, else its ``prompt``) or a :class:`Constraints`."""
    if isinstance(item, Constraints):
        return item
    if isinstance(item, str):
        return parse_prompt(item)
    if isinstance(item, dict):
        if "task" in item and "objects" in item:
            return Constraints.from_row(item)
        if "prompt" in item:
            return parse_prompt(item["prompt"])
        raise ValueError(f"row {item!r} has neither 'task'/'objects' nor 'prompt'")
    raise TypeError(f"expected a prompt, a row dict or Constraints, got {type(item).__name__}")


# --------------------------------------------------------------------------------------------
# enumeration
# --------------------------------------------------------------------------------------------


def all_pairs() -> list[tuple[str, str]]:
    """The 15 colour–shape pairs, colour-major."""
    return [(c, s) for c in COLORS for s in SHAPES]


def enumerate_constraints(task: str | None = None) -> Iterator[Constraints]:
    """Every prompt's constraints, task by task in :data:`TASKS` order (or only ``task``)."""
    tasks = TASKS if task is None else (task,)
    for t in tasks:
        if t not in TASKS:
            raise ValueError(f"unknown task {t!r}; tasks: {', '.join(TASKS)}")
        if t == "single_object":
            for c, s in all_pairs():
                yield Constraints(t, (ObjectSpec(c, s),))
        elif t == "counting":
            for n in COUNT_WORDS:
                for c, s in all_pairs():
                    yield Constraints(t, (ObjectSpec(c, s, n),))
        else:
            for p1 in all_pairs():
                for p2 in all_pairs():
                    if p1 == p2:
                        continue
                    objs = (ObjectSpec(*p1), ObjectSpec(*p2))
                    if t == "two_object":
                        yield Constraints(t, objs)
                    else:
                        for rel in RELATIONS:
                            yield Constraints(t, objs, rel)


def all_prompts(task: str | None = None) -> list[str]:
    """Every prompt (of ``task``, or of all tasks)."""
    return [format_prompt(c) for c in enumerate_constraints(task)]


def make_row(c: Constraints) -> dict:
    """``{"prompt", "task", "objects", "relation"}`` — the row format of the split files."""
    return {"prompt": format_prompt(c), **c.to_row()}


# --------------------------------------------------------------------------------------------
# split
# --------------------------------------------------------------------------------------------


def _rank(seed: int, key: str) -> str:
    return hashlib.sha256(f"shapesworld/{seed}/{key}".encode()).hexdigest()


def split_rule(seed: int = SPLIT_SEED) -> dict[str, list]:
    """The held-out sets of the split (see the module docstring).

    Returns ``{"held_out_pairs": [(color, shape)] * 3, "held_out_counting": [(count, color, shape)] * 9,
    "held_out_singles": [(color, shape)] * 3}``.
    """
    colors = sorted(COLORS, key=lambda c: _rank(seed, f"pair-colour/{c}"))
    held_pairs = [(colors[i], shape) for i, shape in enumerate(SHAPES)]
    by_rank = sorted(all_pairs(), key=lambda p: _rank(seed, f"counting/{p[0]} {p[1]}"))
    counts = [n for n in COUNT_WORDS for _ in range(3)]
    held_counting = [(n, c, s) for n, (c, s) in zip(counts, by_rank)]
    singles = sorted((p for p in all_pairs() if p not in held_pairs), key=lambda p: _rank(seed, f"single/{p}"))
    return {"held_out_pairs": held_pairs, "held_out_counting": held_counting, "held_out_singles": singles[:3]}


def split_of(c: Constraints, seed: int = SPLIT_SEED, rule: dict | None = None) -> str:
    """``"train"`` or ``"test"``: which split the prompt of ``c`` belongs to."""
    rule = split_rule(seed) if rule is None else rule
    o = c.objects
    if c.task == "single_object":
        held = o[0].pair in rule["held_out_singles"]
    elif c.task == "counting":
        held = (o[0].count, o[0].color, o[0].shape) in rule["held_out_counting"]
    else:
        held = any(spec.pair in rule["held_out_pairs"] for spec in o)
    return "test" if held else "train"


def make_split(seed: int = SPLIT_SEED) -> dict[str, list[dict]]:
    """``{"train": rows, "test": rows}`` over every prompt, in enumeration order."""
    rule = split_rule(seed)
    out: dict[str, list[dict]] = {"train": [], "test": []}
    for c in enumerate_constraints():
        out[split_of(c, rule=rule)].append(make_row(c))
    return out


#: the shipped train / test split files (``data/shapes_{train,test}.jsonl``)
SPLIT_FILES = Splits("ShapesWorld", DATA_DIR, "shapes", make_split, "`python -m worlds.shapes split`")


#: a shipped split file's path, its rows, and the files rewritten (``write_split(out_dir=None, seed=SPLIT_SEED)``)
split_path, load_split, write_split = SPLIT_FILES.path, SPLIT_FILES.load, SPLIT_FILES.write
#: the ``shapes_train`` and ``shapes_test`` prompt sources (the test split: held-out compositions)
train_rows, test_rows = functools.partial(load_split, "train"), functools.partial(load_split, "test")


def scene_for_prompt(prompt: str | Constraints | dict, seed: int) -> Scene:
    """The scene drawn for ``prompt`` with ``numpy.random.default_rng(seed)`` (deterministic)."""
    return sample_scene(constraints_of(prompt), np.random.default_rng(int(seed)))


def render_prompt(prompt: str | Constraints | dict, seed: int, size: int = CANVAS) -> np.ndarray:
    """``render(scene_for_prompt(prompt, seed), size)``: a ground-truth image for ``prompt``."""
    return render(scene_for_prompt(prompt, seed), size)
