"""MotionWorld prompts: the action vocabulary, the grammar, every prompt, parsing, and the fixed split.

Actions (17): eleven *leg* actions — ``walk_forward``, ``walk_backward``, ``walk_left``, ``walk_right``,
``run_forward``, ``turn_left``, ``turn_right``, ``turn_around``, ``jump_1``, ``jump_2``, ``jump_3`` — and
six *arm* actions — ``wave_{left,right,both}``, ``raise_{left,right,both}``. Each has a clause
(``walks forward``, ``runs forward``, ``turns around``, ``jumps three times``, ``waves the right
hand``, ``raises both hands``) and a gerund (``walking to the left``, ``waving both hands``).

Grammar (lower case, no final period; ``{A}``/``{B}`` = any action's clause, ``{leg}`` a leg action's
clause, ``{arm-ing}`` an arm action's gerund):

================  ===============================================  ======================  =====
task              form                                             actions                 count
================  ===============================================  ======================  =====
``locomotion``    ``a person {walks …|runs forward}``              one walk / run          5
``turn``          ``a person turns {left|right|around}``           one turn                3
``jump``          ``a person jumps {once|twice|three times}``      one jump                3
``arms``          ``a person {waves|raises} {the left hand|the     one arm action          6
                  right hand|both hands}``
``simultaneous``  ``a person {leg} while {arm-ing}``               (leg, arm)              66
``sequence``      ``a person {A} then {B}``                        (A, B), A != B          272
================  ===============================================  ======================  =====

Train/test split (:func:`make_split`, shipped as ``data/motion_{train,test}.jsonl``; rows
``{"prompt", "task", "compose", "actions"}``). Fixed by :data:`SPLIT_SEED` through SHA-256 ranks (no
RNG: the same on every platform); :func:`split_rule` returns the held-out sets:

* every single-action prompt is in *train* (all 17 atomic actions are seen);
* **held-out "while" pairs**: the 11 leg actions in rank order, leg ``i`` paired with arm action
  ``i mod 6`` of the arms' rank order — 11 pairs (each arm action held out with one or two legs);
* **held-out "then" pairs**: the 17 actions in rank order ``π``; ``(π[i], π[i + k mod 17])`` for
  ``k ∈ {1, 2, 4}`` — 51 ordered pairs; every action is held out exactly three times as the first and
  three times as the second action, and the reverse order of every held-out pair is in train
  (``-k mod 17`` is never 1, 2 or 4), so the test asks for known actions in unseen orders and pairings.

With seed 0: 293 train prompts (5 locomotion, 3 turn, 3 jump, 6 arms, 55 simultaneous, 221 sequence)
and 62 test prompts (11 simultaneous, 51 sequence). The split files are read and written by
:mod:`ddpo_grpo.split_files` (atomically).

Wrong prompts for a clip (:func:`mismatches`): single edits of its prompt that contradict it — what the judge
must reject and the evaluator must separate.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ddpo_grpo.split_files import Splits

#: seed of the shipped split
SPLIT_SEED = 0
DATA_DIR = Path(__file__).resolve().parent / "data"
SPLITS = ("train", "test")

LEG_ACTIONS: tuple[str, ...] = (
    "walk_forward",
    "walk_backward",
    "walk_left",
    "walk_right",
    "run_forward",
    "turn_left",
    "turn_right",
    "turn_around",
    "jump_1",
    "jump_2",
    "jump_3",
)
ARM_ACTIONS: tuple[str, ...] = ("wave_left", "wave_right", "wave_both", "raise_left", "raise_right", "raise_both")
ACTIONS: tuple[str, ...] = LEG_ACTIONS + ARM_ACTIONS
TASKS: tuple[str, ...] = ("locomotion", "turn", "jump", "arms", "simultaneous", "sequence")
COMPOSITIONS: tuple[str, ...] = ("single", "while", "then")

_DIRS = {"forward": "forward", "backward": "backward", "left": "to the left", "right": "to the right"}
_COUNTS = {"1": "once", "2": "twice", "3": "three times"}
_HANDS = {"left": "the left hand", "right": "the right hand", "both": "both hands"}


def _phrases(action: str) -> tuple[str, str]:
    kind, arg = action.split("_")
    if kind == "walk":
        return f"walks {_DIRS[arg]}", f"walking {_DIRS[arg]}"
    if kind == "run":
        return "runs forward", "running forward"
    if kind == "turn":
        return f"turns {arg}", f"turning {arg}"
    if kind == "jump":
        return f"jumps {_COUNTS[arg]}", f"jumping {_COUNTS[arg]}"
    if kind == "wave":
        return f"waves {_HANDS[arg]}", f"waving {_HANDS[arg]}"
    return f"raises {_HANDS[arg]}", f"raising {_HANDS[arg]}"


#: action -> (clause, gerund)
PHRASES: dict[str, tuple[str, str]] = {a: _phrases(a) for a in ACTIONS}
_CLAUSE_TO_ACTION = {c: a for a, (c, _) in PHRASES.items()}
_GERUND_TO_ACTION = {g: a for a, (_, g) in PHRASES.items()}


def action_kind(action: str) -> tuple[str, str]:
    """``(kind, argument)``: ``"walk_left"`` -> ``("walk", "left")``, ``"jump_2"`` -> ``("jump", "2")``."""
    if action not in PHRASES:
        raise ValueError(f"unknown action {action!r}; actions: {', '.join(ACTIONS)}")
    kind, arg = action.split("_")
    return kind, arg


def is_leg(action: str) -> bool:
    """True for the eleven leg actions (walk, run, turn, jump)."""
    return action in LEG_ACTIONS


@dataclass(frozen=True)
class MotionSpec:
    """What a prompt asks for: its actions and how they combine.

    ``compose``: ``"single"`` (one action), ``"while"`` (``actions = (leg, arm)``, at the same time) or
    ``"then"`` (``actions = (A, B)``, A in the first half of the clip, B in the second).
    """

    actions: tuple[str, ...]
    compose: str = "single"

    def __post_init__(self) -> None:
        acts = tuple(self.actions) if not isinstance(self.actions, str) else (self.actions,)
        object.__setattr__(self, "actions", acts)
        for a in acts:
            if a not in PHRASES:
                raise ValueError(f"unknown action {a!r}; actions: {', '.join(ACTIONS)}")
        if self.compose == "single":
            ok = len(acts) == 1
        elif self.compose == "while":
            ok = len(acts) == 2 and is_leg(acts[0]) and not is_leg(acts[1])
        elif self.compose == "then":
            ok = len(acts) == 2 and acts[0] != acts[1]
        else:
            raise ValueError(f"unknown composition {self.compose!r}; compositions: {', '.join(COMPOSITIONS)}")
        if not ok:
            raise ValueError(
                f"actions {list(acts)} do not fit composition {self.compose!r} (single: one action; while: "
                "(leg action, arm action); then: two different actions)"
            )

    @property
    def task(self) -> str:
        """The task label (group): locomotion, turn, jump, arms, simultaneous or sequence."""
        if self.compose == "while":
            return "simultaneous"
        if self.compose == "then":
            return "sequence"
        kind, _ = action_kind(self.actions[0])
        return {"walk": "locomotion", "run": "locomotion", "turn": "turn", "jump": "jump"}.get(kind, "arms")

    def to_row(self) -> dict:
        """``{"task", "compose", "actions"}`` (the split files' fields besides ``prompt``)."""
        return {"task": self.task, "compose": self.compose, "actions": list(self.actions)}

    @classmethod
    def from_row(cls, row: dict) -> MotionSpec:
        """Inverse of :meth:`to_row` (extra keys ignored; ``task`` is checked against the actions)."""
        spec = cls(tuple(row["actions"]), row.get("compose", "single"))
        if "task" in row and row["task"] != spec.task:
            raise ValueError(f"row {row!r}: task {row['task']!r} does not match its actions (expected {spec.task!r})")
        return spec


# --------------------------------------------------------------------------------------------
# text <-> spec
# --------------------------------------------------------------------------------------------


def format_prompt(spec: MotionSpec) -> str:
    """The prompt text of ``spec`` (inverse of :func:`parse_prompt`)."""
    a = spec.actions
    if spec.compose == "single":
        return f"a person {PHRASES[a[0]][0]}"
    if spec.compose == "while":
        return f"a person {PHRASES[a[0]][0]} while {PHRASES[a[1]][1]}"
    return f"a person {PHRASES[a[0]][0]} then {PHRASES[a[1]][0]}"


def parse_prompt(prompt: str) -> MotionSpec:
    """Parse a MotionWorld prompt into its :class:`MotionSpec`.

    Case, surrounding/repeated whitespace and one final period are forgiven. Raises ``ValueError``
    naming the prompt and the accepted forms when it is not in the grammar.
    """
    if not isinstance(prompt, str):
        raise ValueError(f"MotionWorld prompt must be a string, got {type(prompt).__name__}: {prompt!r}")
    text = " ".join(prompt.strip().lower().split())
    if text.endswith("."):
        text = text[:-1].rstrip()
    err = ValueError(
        f"{prompt!r} is not a MotionWorld prompt; expected 'a person {{clause}}', 'a person {{leg clause}} while "
        f"{{arm gerund}}' or 'a person {{clause}} then {{clause}}' with clauses "
        f"{', '.join(repr(c) for c, _ in PHRASES.values())}"
    )
    if not text.startswith("a person "):
        raise err
    body = text[len("a person ") :]
    if body in _CLAUSE_TO_ACTION:
        return MotionSpec((_CLAUSE_TO_ACTION[body],))
    for sep, compose in ((" while ", "while"), (" then ", "then")):
        if sep in body:
            first, _, second = body.partition(sep)
            table = _GERUND_TO_ACTION if compose == "while" else _CLAUSE_TO_ACTION
            if first in _CLAUSE_TO_ACTION and second in table:
                try:
                    return MotionSpec((_CLAUSE_TO_ACTION[first], table[second]), compose)
                except ValueError as exc:
                    raise ValueError(f"MotionWorld prompt {prompt!r}: {exc}") from exc
    raise err


def spec_of(item) -> MotionSpec:
    """:class:`MotionSpec` of a prompt string, a row dict or a spec.

    A row's ``actions``/``compose`` fields are used when present, else its ``prompt`` is parsed.
    """
    if isinstance(item, MotionSpec):
        return item
    if isinstance(item, str):
        return parse_prompt(item)
    if isinstance(item, dict):
        if "actions" in item:
            return MotionSpec.from_row(item)
        if "prompt" in item:
            return parse_prompt(item["prompt"])
        raise ValueError(f"row {item!r} has neither 'actions' nor 'prompt'")
    raise ValueError(f"expected a MotionWorld prompt, a row dict or a MotionSpec, got {type(item).__name__}")


# --------------------------------------------------------------------------------------------
# enumeration and split
# --------------------------------------------------------------------------------------------


def enumerate_specs(task: str | None = None) -> Iterator[MotionSpec]:
    """Every prompt's spec, task by task in :data:`TASKS` order (or only ``task``)."""
    tasks = TASKS if task is None else (task,)
    for t in tasks:
        if t not in TASKS:
            raise ValueError(f"unknown task {t!r}; tasks: {', '.join(TASKS)}")
        if t == "simultaneous":
            for leg in LEG_ACTIONS:
                for arm in ARM_ACTIONS:
                    yield MotionSpec((leg, arm), "while")
        elif t == "sequence":
            for a in ACTIONS:
                for b in ACTIONS:
                    if a != b:
                        yield MotionSpec((a, b), "then")
        else:
            for a in ACTIONS:
                spec = MotionSpec((a,))
                if spec.task == t:
                    yield spec


def all_prompts(task: str | None = None) -> list[str]:
    """Every prompt (of ``task``, or of all tasks)."""
    return [format_prompt(s) for s in enumerate_specs(task)]


def make_row(spec: MotionSpec) -> dict:
    """``{"prompt", "task", "compose", "actions"}`` — the row format of the split files."""
    return {"prompt": format_prompt(spec), **spec.to_row()}


def _rank(seed: int, key: str) -> str:
    return hashlib.sha256(f"motionworld/{seed}/{key}".encode()).hexdigest()


#: offsets k of the held-out "then" pairs (π[i], π[i + k])
THEN_OFFSETS = (1, 2, 4)


def split_rule(seed: int = SPLIT_SEED) -> dict[str, list]:
    """The held-out sets of the split (see the module docstring).

    Returns ``{"held_out_while": [(leg, arm)] * 11, "held_out_then": [(a, b)] * 51, "action_order": π}``.
    """
    legs = sorted(LEG_ACTIONS, key=lambda a: _rank(seed, f"while-leg/{a}"))
    arms = sorted(ARM_ACTIONS, key=lambda a: _rank(seed, f"while-arm/{a}"))
    held_while = [(leg, arms[i % len(arms)]) for i, leg in enumerate(legs)]
    order = sorted(ACTIONS, key=lambda a: _rank(seed, f"then/{a}"))
    n = len(order)
    held_then = [(order[i], order[(i + k) % n]) for i in range(n) for k in THEN_OFFSETS]
    return {"held_out_while": held_while, "held_out_then": held_then, "action_order": order}


def split_of(spec: MotionSpec, seed: int = SPLIT_SEED, rule: dict | None = None) -> str:
    """``"train"`` or ``"test"``: which split the prompt of ``spec`` belongs to."""
    rule = split_rule(seed) if rule is None else rule
    pair = tuple(spec.actions)
    if spec.compose == "while":
        return "test" if pair in rule["held_out_while"] else "train"
    if spec.compose == "then":
        return "test" if pair in rule["held_out_then"] else "train"
    return "train"


def make_split(seed: int = SPLIT_SEED) -> dict[str, list[dict]]:
    """``{"train": rows, "test": rows}`` over every prompt, in enumeration order."""
    rule = split_rule(seed)
    held = {"while": set(rule["held_out_while"]), "then": set(rule["held_out_then"])}
    out: dict[str, list[dict]] = {"train": [], "test": []}
    for spec in enumerate_specs():
        test = tuple(spec.actions) in held.get(spec.compose, set())
        out["test" if test else "train"].append(make_row(spec))
    return out


#: the shipped train / test split files (``data/motion_{train,test}.jsonl``)
SPLIT_FILES = Splits("MotionWorld", DATA_DIR, "motion", make_split, "worlds.motion.grammar.write_split()")


#: a shipped split file's path, its rows, and the files rewritten (``write_split(out_dir=None, seed=SPLIT_SEED)``)
split_path, load_split, write_split = SPLIT_FILES.path, SPLIT_FILES.load, SPLIT_FILES.write
#: the ``motion_train`` and ``motion_test`` prompt sources (the test split: held-out compositions)
train_rows, test_rows = functools.partial(load_split, "train"), functools.partial(load_split, "test")


def mismatches(spec: MotionSpec) -> list[tuple[str, MotionSpec]]:
    """Wrong prompts for a clip of ``spec``: single edits that contradict it.

    Kinds: ``"replace"`` (one action by another of the same family, leg or arm), ``"swap"`` ("then": the
    other order), ``"add"`` (a single leg action gets an arm action: "while"; a single arm action gets a
    leg action), ``"drop"`` ("while": only the leg or only the arm action), ``"compose"`` ("then" <->
    "while" with the same actions where both exist).
    """
    out: list[tuple[str, MotionSpec]] = []

    def add(kind: str, actions, compose: str) -> None:
        try:
            cand = MotionSpec(tuple(actions), compose)
        except ValueError:
            return
        if cand != spec:
            out.append((kind, cand))

    acts = spec.actions
    for i, a in enumerate(acts):
        family = LEG_ACTIONS if a in LEG_ACTIONS else ARM_ACTIONS
        for b in family:
            if b != a:
                new = list(acts)
                new[i] = b
                add("replace", new, spec.compose)
    if spec.compose == "then":
        add("swap", acts[::-1], "then")
        add("compose", acts, "while")
    elif spec.compose == "while":
        add("drop", acts[:1], "single")
        add("drop", acts[1:], "single")
        add("compose", acts, "then")
    else:
        a = acts[0]
        if a in LEG_ACTIONS:
            for arm in ARM_ACTIONS:
                add("add", (a, arm), "while")
        else:
            for leg in LEG_ACTIONS:
                add("add", (leg, a), "while")
    return out


__all__ = [
    "ACTIONS",
    "ARM_ACTIONS",
    "COMPOSITIONS",
    "LEG_ACTIONS",
    "PHRASES",
    "SPLIT_SEED",
    "TASKS",
    "THEN_OFFSETS",
    "MotionSpec",
    "action_kind",
    "all_prompts",
    "enumerate_specs",
    "format_prompt",
    "is_leg",
    "load_split",
    "make_row",
    "make_split",
    "mismatches",
    "parse_prompt",
    "spec_of",
    "split_of",
    "split_path",
    "split_rule",
    "test_rows",
    "train_rows",
    "write_split",
]
