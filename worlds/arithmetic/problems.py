"""ArithmeticWorld problems: the templates, the worked answers, the train / held-out rule and the shipped splits.

A problem is a template (a word problem with operand slots) filled with a name, an item and operands. Its worked
answer is one line per operation, then the final line ``#### N`` (GSM8K's convention)::

    Ben has 3 boxes of 7 pears and 5 loose pears. How many pears does he have in all?
    3 * 7 = 21
    21 + 5 = 26
    #### 26

Operands (this package's README.md is the spec): a ``+`` / ``-`` operand is drawn from 2..20 and a ``*`` factor from
2..9; a subtraction never goes below zero (its operand is drawn from 2..running value).

Train / held-out rule (:func:`split_of`, exact):

* **held-out templates** — the templates of :data:`HELD_OUT_TEMPLATES` never occur in training (not in pretraining,
  not in the ``train`` split); each recombines phrases of the train templates into a new sentence (``finds {b}
  more`` with ``How many ... have now?``; a basket that is filled and then emptied; bags that are bought and then
  given away), a compositional generalisation the base model makes only in part;
* **held-out numbers** — the operand values :data:`HELD_OUT_NUMBERS` (13..16) never occur as an operand in
  training (they do occur as intermediate results and final answers, e.g. ``9 + 5 = 14``).

A problem is *train* iff its template is a train template and none of its operands is in 13..16; otherwise it is
*held out*, in one of three strata (``extra_info["held_out"]``): ``template`` (new template, train numbers),
``number`` (train template, at least one held-out operand), ``both``. The shipped test split draws the strata in the
proportions of :data:`TEST_STRATA`. Pretraining draws fresh train problems (:func:`sample_problem` with
``split="train"``) from its own seed; the shipped files are :func:`make_split` of :data:`SPLIT_SEED`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ddpo_grpo.split_files import Splits

DATA_SOURCE = "arithmetic"
SPLIT_SEED = 0
DATA_DIR = Path(__file__).resolve().parent / "data"
N_TRAIN, N_TEST = 2000, 400
#: held-out stratum -> fraction of the shipped test split
TEST_STRATA = {"template": 0.5, "number": 0.25, "both": 0.25}
HELD_OUT_NUMBERS = frozenset(range(13, 17))
ADD_RANGE, MUL_RANGE = (2, 20), (2, 9)  # inclusive operand ranges of + / - and of *

NAMES = {"Tom": "he", "Ann": "she", "Sam": "he", "Mia": "she", "Ben": "he", "Zoe": "she", "Max": "he", "Lily": "she"}
ITEMS = ("apples", "pears", "coins", "books", "shells", "cards", "stickers", "marbles")


@dataclass(frozen=True)
class Template:
    """A word problem: ``text`` with slots ``{name} {pron} {items}`` and one operand slot per letter of
    ``ops`` after the first operand ``{a}`` (``{b}``, ``{c}``); ``ops[i]`` combines the running value with the
    ``i+1``-th operand, left to right."""

    name: str
    text: str
    ops: str  # e.g. "+-": (a + b) - c


TEMPLATES = (
    Template("buy", "{name} has {a} {items} and buys {b} more. How many {items} does {pron} have now?", "+"),
    Template(
        "give", "{name} has {a} {items} and gives {b} of them to a friend. How many {items} does {pron} have left?", "-"
    ),
    Template("bags", "{name} buys {a} bags with {b} {items} in each bag. How many {items} does {pron} buy?", "*"),
    Template("basket", "A basket holds {a} {items}. {name} puts in {b} more. How many {items} are in the basket?", "+"),
    Template("shelf", "There are {a} {items} on a shelf. {name} takes {b} of them. How many {items} are left?", "-"),
    Template(
        "find_lose",
        "{name} has {a} {items}, finds {b} more and then loses {c}. How many {items} does {pron} have?",
        "+-",
    ),
    Template(
        "boxes",
        "{name} has {a} boxes of {b} {items} and {c} loose {items}. How many {items} does {pron} have in all?",
        "*+",
    ),
    Template("rows", "{name} packs {a} rows of {b} {items} and eats {c} of them. How many {items} are left?", "*-"),
    # ---- held-out templates: seen phrases in new combinations ----
    Template("find", "{name} has {a} {items} and finds {b} more. How many {items} does {pron} have now?", "+"),
    Template("lose", "{name} has {a} {items} and loses {b}. How many {items} are left?", "-"),
    Template(
        "basket_take",
        "A basket holds {a} {items}. {name} puts in {b} more and then takes {c} of them. How many {items} are left?",
        "+-",
    ),
    Template(
        "bags_give",
        "{name} buys {a} bags with {b} {items} in each bag and gives {c} of them to a friend. How many {items} are "
        "left?",
        "*-",
    ),
)
TEMPLATE_BY_NAME = {t.name: t for t in TEMPLATES}
HELD_OUT_TEMPLATES = frozenset({"find", "lose", "basket_take", "bags_give"})
TRAIN_TEMPLATES = tuple(t.name for t in TEMPLATES if t.name not in HELD_OUT_TEMPLATES)


@dataclass(frozen=True)
class Problem:
    template: str
    name: str
    item: str
    operands: tuple[int, ...]

    @property
    def question(self) -> str:
        t = TEMPLATE_BY_NAME[self.template]
        slots = dict(zip("abc", self.operands))
        return t.text.format(name=self.name, pron=NAMES[self.name], items=self.item, **slots)

    def steps(self) -> list[tuple[int, str, int, int]]:
        """``(x, op, y, result)`` per operation, left to right."""
        value, out = self.operands[0], []
        for op, y in zip(TEMPLATE_BY_NAME[self.template].ops, self.operands[1:]):
            new = value + y if op == "+" else value - y if op == "-" else value * y
            out.append((value, op, y, new))
            value = new
        return out

    @property
    def value(self) -> int:
        """The running value after the operands given so far (the answer once all are given)."""
        steps = self.steps()
        return steps[-1][3] if steps else self.operands[0]

    @property
    def answer(self) -> int:
        return self.value

    @property
    def worked(self) -> str:
        """The worked answer: one ``x op y = z`` line per operation, then ``#### N``."""
        return "".join(f"{x} {op} {y} = {z}\n" for x, op, y, z in self.steps()) + f"#### {self.answer}"

    def split(self) -> str:
        """``train``, or the held-out stratum: ``template``, ``number`` or ``both``."""
        new_template = self.template in HELD_OUT_TEMPLATES
        new_number = any(v in HELD_OUT_NUMBERS for v in self.operands)
        return {(False, False): "train", (True, False): "template", (False, True): "number"}.get(
            (new_template, new_number), "both"
        )


def split_of(problem: Problem) -> str:
    """``train`` or ``test`` by the module docstring's rule."""
    return "train" if problem.split() == "train" else "test"


def _pool(kind: str, cap: int | None, held: bool | None) -> list[int]:
    """The values an operand entering ``kind`` (``+``, ``-``, ``*``) may take: its range, at most ``cap`` (a
    subtrahend never passes the running value), inside (``held`` True) / outside (False) :data:`HELD_OUT_NUMBERS`."""
    lo, hi = MUL_RANGE if kind == "*" else ADD_RANGE
    hi = hi if cap is None else min(hi, cap)
    return [v for v in range(lo, hi + 1) if held is None or (v in HELD_OUT_NUMBERS) == held]


def sample_problem(rng: np.random.Generator, split: str = "train") -> Problem:
    """One problem of ``split``: ``train`` or a held-out stratum (``template``, ``number``, ``both``).

    The first operand is drawn like its partner (a factor when the first operation is ``*``); in the ``number`` and
    ``both`` strata one ``+`` / ``-`` operand, drawn uniformly among the template's, is a held-out number and the
    others are not; a draw with no admissible value starts again."""
    templates = TRAIN_TEMPLATES if split in ("train", "number") else tuple(sorted(HELD_OUT_TEMPLATES))
    want_number = split in ("number", "both")
    while True:
        t = TEMPLATE_BY_NAME[templates[rng.integers(len(templates))]]
        name = list(NAMES)[rng.integers(len(NAMES))]
        item = ITEMS[rng.integers(len(ITEMS))]
        kinds = t.ops[0] + t.ops  # the operation each operand enters
        slots = [i for i, k in enumerate(kinds) if k != "*"]
        if want_number and not slots:
            continue
        forced = slots[rng.integers(len(slots))] if want_number else -1
        operands: list[int] = []
        for i, kind in enumerate(kinds):
            cap = Problem(t.name, name, item, tuple(operands)).value if kind == "-" and i > 0 else None
            pool = _pool(kind, cap, held=i == forced)
            if not pool:
                break
            operands.append(int(pool[rng.integers(len(pool))]))
        else:
            return Problem(t.name, name, item, tuple(operands))


def row(problem: Problem, split: str) -> dict:
    """verl's row layout: ``prompt``, ``ground_truth``, ``data_source``, ``extra_info``."""
    return {
        "prompt": problem.question,
        "ground_truth": str(problem.answer),
        "data_source": DATA_SOURCE,
        "extra_info": {
            "template": problem.template,
            "split": split,
            "held_out": None if split == "train" else problem.split(),
            "operands": list(problem.operands),
            "worked": problem.worked,
        },
    }


def make_split(seed: int = SPLIT_SEED) -> dict[str, list[dict]]:
    """``{"train": N_TRAIN rows, "test": N_TEST rows}``, drawn with ``numpy.random.default_rng(seed)``; the test
    strata in the proportions of :data:`TEST_STRATA`. Questions are unique within and across the files."""
    rng = np.random.default_rng(seed)
    seen: set[str] = set()

    def draw(split: str, n: int) -> list[dict]:
        rows = []
        while len(rows) < n:
            p = sample_problem(rng, split)
            if p.question not in seen:
                seen.add(p.question)
                rows.append(row(p, "train" if split == "train" else "test"))
        return rows

    test = [r for stratum, frac in TEST_STRATA.items() for r in draw(stratum, round(N_TEST * frac))]
    return {"train": draw("train", N_TRAIN), "test": test}


SPLIT_FILES = Splits("ArithmeticWorld", DATA_DIR, "arithmetic", make_split, "`python -m worlds.arithmetic split`")
split_path, load_split, write_split = SPLIT_FILES.path, SPLIT_FILES.load, SPLIT_FILES.write
#: the ``arithmetic_train`` and ``arithmetic_test`` prompt sources
train_rows, test_rows = functools.partial(load_split, "train"), functools.partial(load_split, "test")

_FINAL = re.compile(r"####\s*(-?[\d,]*\.?\d+)")


def final_answer(response: str) -> str | None:
    """The number after the first ``####`` of ``response`` (commas dropped), or None."""
    m = _FINAL.search(response)
    return None if m is None else m.group(1).replace(",", "")


def is_correct(response: str, ground_truth: str) -> bool:
    """Exact match of the final answer: the number after ``####`` equals ``ground_truth`` numerically."""
    got = final_answer(response)
    try:
        return got is not None and float(got) == float(ground_truth)
    except ValueError:
        return False


def parse_problem(extra_info: dict, question: str) -> Problem:
    """The :class:`Problem` of a row (its template and operands; name and item read back from the question)."""
    name = next(n for n in NAMES if question.startswith(n) or f" {n} " in question)
    item = next(i for i in ITEMS if f" {i}" in question)
    return Problem(extra_info["template"], name, item, tuple(extra_info["operands"]))


__all__ = [
    "DATA_SOURCE",
    "HELD_OUT_NUMBERS",
    "HELD_OUT_TEMPLATES",
    "TEMPLATES",
    "TRAIN_TEMPLATES",
    "Problem",
    "Template",
    "final_answer",
    "is_correct",
    "load_split",
    "make_split",
    "parse_problem",
    "row",
    "sample_problem",
    "split_of",
    "test_rows",
    "train_rows",
    "write_split",
]
