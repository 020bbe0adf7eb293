"""MotionWorld judge: rule-based, re-checkable scoring of a motion against a prompt.

The judge reads joint positions ``[T, 22, 3]`` (recovered from features with
:func:`~worlds.motion.features.recover_joints`; metres, ``y`` up, floor at 0). Every measurement is
made over a **window** of frames — the whole clip, or a half ``[0, h)`` / ``[h, n)`` with ``h = n // 2``
— in the **facing frame of the window's first frame** (so "forward" after a turn means the new facing).
All thresholds are module constants.

Signals (per frame):

* root = joint 0; its xz path; **speed** = mean over the window of the horizontal root speed of the
  path smoothed by a centred :data:`SPEED_SMOOTH` = 5-frame moving average (edges shortened), m/s;
* **displacement** = mean root xz of the window's last 3 frames − that of its first 3, in the facing
  frame (``x`` = left, ``z`` = forward); **yaw** ψ from hips and shoulders
  (:func:`~worlds.motion.skeleton.yaw_of`, unwrapped), **yaw change** = mean of the last 3 − mean of the
  first 3, degrees, positive = counter-clockwise seen from above (left);
* **airborne**: both ankles at least :data:`FLIGHT_HEIGHT` = 0.10 m above the floor (heights smoothed by a
  3-frame moving average first); single-frame gaps are bridged; a **flight phase** is a run of at least
  :data:`FLIGHT_MIN_FRAMES` = 3 airborne frames;
* **hand up**: that wrist above the head joint; **sideways** wrist motion = ``(wrist − neck) · a`` with
  ``a`` the horizontal unit vector along L-shoulder − R-shoulder (9-frame moving average), so walking,
  turning and body sway cancel; smoothed over 3 frames;
  a **reversal** is a change of direction after a travel of at least :data:`REVERSAL_TRAVEL` = 0.08 m
  (hysteresis: noise does not count), counted only while that hand is up (so raising and lowering the
  arm sideways does not count).

Checks per action (each one line of ``checks``):

=================  =====================================================================================
action             checks (all over the action's window)
=================  =====================================================================================
walk {dir}         displacement along dir >= 1 m and larger than across it; walking pace: speed < 1.8
                   m/s; keeps facing: ``|Δψ| < 45°``; no jumps: no flight phase
run forward        displacement forward >= 1 m and larger than sideways; running pace: speed >= 2.0 m/s;
                   keeps facing
turn left/right    ``Δψ ∈ [45°, 135°)`` / ``(−135°, −45°]``; stays in place: ``|displacement| < 1 m``;
/ around           no jumps. Around: ``|Δψ| ∈ [135°, 225°]`` (either way)
jump N             exactly N flight phases; stays in place
wave {hand}        that hand up in >= 30 % of the frames and >= 2 reversals (both hands: each)
raise {hand}       that hand up in >= 50 % of the frames; held still: < 2 reversals (each raised hand)
=================  =====================================================================================

Negative constraints, so that wrong prompts fail (ShapesWorld's "nothing else"):

* a single-hand arm action adds "other hand down": the other wrist up in < 20 % of the frames;
* a leg action without an arm action in its clause adds "hands down": each wrist up in < 20 %;
* an arm action without a leg action in its clause adds "stands": stays in place, keeps facing,
  no jumps.

Composition: a single action is checked over the whole clip; **"A while B"** (leg A, arm B): A's checks
over the whole clip, B's checks in *each* half (both must hold — simultaneity, so that "A then B" does
not pass as "A while B"); **"A then B"**: A's clause over the first half, B's over the second.
``strict`` = 1 iff every check holds; ``partial`` = the fraction that hold; ``soft`` = the mean over checks of
a graded score — 1 for a check that holds, else ``clip(1 − miss / scale, 0, 0.999)`` with the miss measured
from the threshold: displacement in :data:`SOFT_DISPLACEMENT_M`, speed in :data:`SOFT_SPEED`, yaw in
:data:`SOFT_YAW_DEG`, hand-up fractions in units of their threshold (down: of ``1 − DOWN_MAX_FRAC``),
counts (flights, reversals) in units of the target count (at least 1); a check of several parts (a move's
distance and its direction, both hands) scores its weakest part. ``soft`` is a training reward (it tells a
near miss from a far one, so a group whose samples all fail still ranks them); ``strict`` stays the measure.

Wrong prompts (single edits that contradict a clip's prompt) are :func:`~worlds.motion.grammar.mismatches`;
how well the judge agrees with the generator's labels on clean, noisy and smoothed motions, and how often it
rejects wrong prompts, is measured by :mod:`worlds.motion.agreement` (``python -m worlds.motion judge-agreement``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from .grammar import ACTIONS, ARM_ACTIONS, LEG_ACTIONS, MotionSpec, action_kind, mismatches, spec_of
from .skeleton import FPS, HEAD, L_ANKLE, L_SHOULDER, L_WRIST, N_JOINTS, NECK, R_ANKLE, R_SHOULDER, R_WRIST, yaw_of

#: minimum displacement (m) of walking / running in the named direction
MIN_DISPLACEMENT = 1.0
#: walking pace: mean speed below this (m/s)
WALK_MAX_SPEED = 1.8
#: running pace: mean speed at least this (m/s)
RUN_MIN_SPEED = 2.0
#: "stays in place": displacement below this (m)
STAY_MAX_DISPLACEMENT = 1.0
#: "keeps facing": |yaw change| below this (degrees)
KEEP_FACING_DEG = 45.0
#: turn targets (degrees) and tolerance
TURN_DEG = {"left": 90.0, "right": -90.0, "around": 180.0}
TURN_TOL_DEG = 45.0
#: ankle height (m) above which a foot is off the floor, and the frames a flight phase needs
FLIGHT_HEIGHT = 0.10
FLIGHT_MIN_FRAMES = 3
#: fractions of frames with the hand above the head
WAVE_UP_FRAC = 0.30
RAISE_UP_FRAC = 0.50
DOWN_MAX_FRAC = 0.20
#: reversals of the sideways wrist motion: a wave needs at least this many, a raise fewer
WAVE_REVERSALS = 2
#: travel (m) before a change of direction counts as a reversal
REVERSAL_TRAVEL = 0.08
#: frames averaged at each end of a window for displacement and yaw change
END_FRAMES = 3
#: moving-average window (frames) of the root path before speeds
SPEED_SMOOTH = 5
#: moving-average windows (frames) of the ankle heights and of the shoulder axis
HEIGHT_SMOOTH = 3
AXIS_SMOOTH = 9
#: the ``soft`` score's scales: a failed check scores 1 − (its measurement's miss / scale), clipped to [0, 1)
SOFT_DISPLACEMENT_M = 1.0
SOFT_SPEED = 1.0
SOFT_YAW_DEG = 45.0
#: shortest clip the judge accepts (frames)
MIN_FRAMES = 8

_HAND_JOINTS = {"left": L_WRIST, "right": R_WRIST}


# --------------------------------------------------------------------------------------------
# signals
# --------------------------------------------------------------------------------------------


def _moving_average(x: np.ndarray, k: int) -> np.ndarray:
    """Centred moving average over ``k`` frames along axis 0 (the window shrinks at the edges)."""
    if k <= 1:
        return x
    c = np.cumsum(np.concatenate([np.zeros((1,) + x.shape[1:]), x], axis=0), axis=0)
    n = len(x)
    half = k // 2
    lo = np.clip(np.arange(n) - half, 0, n)
    hi = np.clip(np.arange(n) + half + 1, 0, n)
    return (c[hi] - c[lo]) / (hi - lo).reshape((-1,) + (1,) * (x.ndim - 1))


def to_joints(joints: Any) -> np.ndarray:
    """float64 ``[T, 22, 3]`` from a numpy array or torch tensor (one clip), checked."""
    if hasattr(joints, "detach"):
        joints = joints.detach().cpu().double().numpy()
    arr = np.asarray(joints, dtype=np.float64)
    if arr.ndim != 3 or arr.shape[1:] != (N_JOINTS, 3):
        raise ValueError(f"joints must have shape [frames, 22, 3] (one clip, metres), got {tuple(arr.shape)}")
    if len(arr) < MIN_FRAMES:
        raise ValueError(f"joints has {len(arr)} frames; the judge needs at least {MIN_FRAMES}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("joints contains NaN or infinite values; pass finite joint positions")
    return arr


def signals(joints: Any) -> dict[str, np.ndarray]:
    """Per-frame signals of a clip (see the module docstring)."""
    j = to_joints(joints)
    yaw = np.unwrap(yaw_of(j))
    lateral_axis = _moving_average(j[:, L_SHOULDER] - j[:, R_SHOULDER], AXIS_SMOOTH) * np.array([1.0, 0.0, 1.0])
    lateral_axis /= np.maximum(np.linalg.norm(lateral_axis, axis=-1, keepdims=True), 1e-9)
    ankles = _moving_average(j[:, [L_ANKLE, R_ANKLE], 1], HEIGHT_SMOOTH)  # [T, 2]
    sig = {
        "root": j[:, 0, [0, 2]],
        "root_smooth": _moving_average(j[:, 0, [0, 2]], SPEED_SMOOTH),
        "yaw": yaw,
        "airborne": ankles.min(-1) >= FLIGHT_HEIGHT,
    }
    for hand, w in _HAND_JOINTS.items():
        sig[f"up_{hand}"] = j[:, w, 1] > j[:, HEAD, 1]
        sig[f"side_{hand}"] = _moving_average(((j[:, w] - j[:, NECK]) * lateral_axis).sum(-1), 3)
    return sig


def count_reversals(x: np.ndarray, travel: float = REVERSAL_TRAVEL) -> int:
    """Direction changes of ``x`` with hysteresis: a new direction counts after a travel >= ``travel``."""
    count, direction = 0, 0
    lo = hi = ext = float(x[0]) if len(x) else 0.0
    for v in map(float, x[1:]):
        if direction == 0:
            lo, hi = min(lo, v), max(hi, v)
            if v - lo >= travel:
                direction, ext = 1, v
            elif hi - v >= travel:
                direction, ext = -1, v
        elif direction == 1:
            if v > ext:
                ext = v
            elif ext - v >= travel:
                count, direction, ext = count + 1, -1, v
        else:
            if v < ext:
                ext = v
            elif v - ext >= travel:
                count, direction, ext = count + 1, 1, v
    return count


def count_flights(airborne: np.ndarray) -> int:
    """Flight phases: runs of >= :data:`FLIGHT_MIN_FRAMES` airborne frames, single-frame gaps bridged."""
    a = np.asarray(airborne, dtype=bool).copy()
    gap = ~a[1:-1] & a[:-2] & a[2:]
    a[1:-1] |= gap
    count, run = 0, 0
    for v in np.append(a, False):
        if v:
            run += 1
        else:
            count += run >= FLIGHT_MIN_FRAMES
            run = 0
    return int(count)


def window_stats(sig: dict[str, np.ndarray], start: int, stop: int) -> dict[str, float]:
    """Measurements over frames ``[start, stop)``.

    Displacement (``left``, ``forward``, ``distance``) in the facing frame of ``start``, ``speed``,
    ``yaw_deg``, ``flights``, and per hand ``up_<hand>`` (fraction) and ``reversals_<hand>``.
    """
    k = max(1, min(END_FRAMES, (stop - start) // 2))
    psi0 = float(sig["yaw"][start : start + k].mean())
    d = sig["root"][stop - k : stop].mean(0) - sig["root"][start : start + k].mean(0)  # world (x, z)
    c, s = np.cos(psi0), np.sin(psi0)
    left, forward = c * d[0] - s * d[1], s * d[0] + c * d[1]
    path = sig["root_smooth"][start:stop]
    speed = float(np.linalg.norm(np.diff(path, axis=0), axis=-1).mean() * FPS) if stop - start > 1 else 0.0
    out = {
        "left": float(left),
        "forward": float(forward),
        "distance": float(np.hypot(left, forward)),
        "speed": speed,
        "yaw_deg": float(np.degrees(sig["yaw"][stop - k : stop].mean() - sig["yaw"][start : start + k].mean())),
        "flights": count_flights(sig["airborne"][start:stop]),
    }
    for hand in _HAND_JOINTS:
        up = sig[f"up_{hand}"][start:stop]
        out[f"up_{hand}"] = float(up.mean())
        out[f"reversals_{hand}"] = _reversals_while_up(sig[f"side_{hand}"][start:stop], up)
    return out


def _reversals_while_up(side: np.ndarray, up: np.ndarray) -> int:
    """Reversals of the sideways wrist motion summed over the runs of frames with the hand up."""
    total, run_start = 0, None
    for i, u in enumerate(np.append(up, False)):
        if u and run_start is None:
            run_start = i
        elif not u and run_start is not None:
            total += count_reversals(side[run_start:i])
            run_start = None
    return total


# --------------------------------------------------------------------------------------------
# checks
# --------------------------------------------------------------------------------------------

_AXES = {
    "forward": ("forward", 1.0, "left"),
    "backward": ("forward", -1.0, "left"),
    "left": ("left", 1.0, "forward"),
    "right": ("left", -1.0, "forward"),
}


def _hands(which: str) -> tuple[str, ...]:
    return ("left", "right") if which == "both" else (which,)


class Check(NamedTuple):
    """One constraint of a prompt: ``ok`` (it holds) and ``soft`` in [0, 1] (1 iff ``ok``, else how close)."""

    description: str
    ok: bool
    soft: float


def _graded(description: str, ok: bool, shortfall: float) -> Check:
    """A check missing by ``shortfall`` scales: soft = 1 if ok, else clip(1 − shortfall, 0, 0.999)."""
    return Check(description, bool(ok), 1.0 if ok else float(np.clip(1.0 - shortfall, 0.0, 0.999)))


def _at_least(description: str, x: float, lo: float, scale: float) -> Check:
    return _graded(description, x >= lo, (lo - x) / scale)


def _below(description: str, x: float, hi: float, scale: float) -> Check:
    return _graded(description, x < hi, (x - hi) / scale)


def _count(description: str, n: int, target: int) -> Check:
    """``n == target``; each count off costs 1 / max(target, 1)."""
    return _graded(description, n == target, abs(n - target) / max(target, 1))


def _still(reversals: int) -> Check:
    """Fewer than :data:`WAVE_REVERSALS` reversals; each one over the limit costs 1 / WAVE_REVERSALS."""
    return _graded("", reversals < WAVE_REVERSALS, (reversals - WAVE_REVERSALS + 1) / WAVE_REVERSALS)


def _all(description: str, parts: Sequence[Check]) -> Check:
    """Every part holds; soft = the weakest part's."""
    return Check(description, all(c.ok for c in parts), min(c.soft for c in parts))


def _hand_down(description: str, up_frac: float) -> Check:
    """That wrist above the head for fewer than :data:`DOWN_MAX_FRAC` of the frames."""
    return _below(description, up_frac, DOWN_MAX_FRAC, 1.0 - DOWN_MAX_FRAC)


def _standing(w: dict[str, float]) -> tuple[Check, Check, Check]:
    """Stays in place, keeps facing, no jumps: what a turn, a jump or an arms-only clip must also do."""
    return (
        _below("stays in place", w["distance"], STAY_MAX_DISPLACEMENT, SOFT_DISPLACEMENT_M),
        _below("keeps facing", abs(w["yaw_deg"]), KEEP_FACING_DEG, SOFT_YAW_DEG),
        _count("no jumps", w["flights"], 0),
    )


def action_checks(action: str, w: dict[str, float]) -> list[Check]:
    """The checks of one action over a window's measurements ``w`` (see the module docstring)."""
    kind, arg = action_kind(action)
    stay, facing, no_jump = _standing(w)
    if kind in ("walk", "run"):
        axis, sign, other = _AXES[arg]
        along = sign * w[axis]
        moves = _all(
            f"moves {arg} >= {MIN_DISPLACEMENT:g} m",
            [
                _at_least("", along, MIN_DISPLACEMENT, SOFT_DISPLACEMENT_M),
                _graded("", along > abs(w[other]), (abs(w[other]) - along) / SOFT_DISPLACEMENT_M),
            ],
        )
        if kind == "walk":
            pace = _below("walking pace", w["speed"], WALK_MAX_SPEED, SOFT_SPEED)
            return [moves, pace, facing, no_jump]
        return [moves, _at_least("running pace", w["speed"], RUN_MIN_SPEED, SOFT_SPEED), facing]
    if kind == "turn":
        dy = w["yaw_deg"]
        if arg == "around":
            off = abs(abs(dy) - TURN_DEG["around"]) - TURN_TOL_DEG
            turn = _graded("turns around", off <= 0, off / SOFT_YAW_DEG)
        else:
            lo, hi = TURN_DEG[arg] - TURN_TOL_DEG, TURN_DEG[arg] + TURN_TOL_DEG
            ok = lo <= dy < hi if arg == "left" else lo < dy <= hi
            turn = _graded(f"turns {arg}", ok, max(lo - dy, dy - hi) / SOFT_YAW_DEG)
        return [turn, stay, no_jump]
    if kind == "jump":
        return [_count(f"jumps {arg} time(s)", w["flights"], int(arg)), stay]
    hands = _hands(arg)
    if kind == "wave":
        parts = [_at_least("", w[f"up_{h}"], WAVE_UP_FRAC, WAVE_UP_FRAC) for h in hands]
        parts += [_at_least("", w[f"reversals_{h}"], WAVE_REVERSALS, WAVE_REVERSALS) for h in hands]
        checks = [_all(f"waves {arg}", parts)]
    else:
        checks = [
            _all(f"raises {arg}", [_at_least("", w[f"up_{h}"], RAISE_UP_FRAC, RAISE_UP_FRAC) for h in hands]),
            _all("held still", [_still(w[f"reversals_{h}"]) for h in hands]),
        ]
    if arg != "both":
        other = "right" if arg == "left" else "left"
        checks.append(_hand_down(f"{other} hand down", w[f"up_{other}"]))
    return checks


def _clause(actions: Sequence[str], w: dict[str, float]) -> list[Check]:
    """Checks of a clause (one or two actions over one window) with its negative constraints."""
    checks = []
    for a in actions:
        checks += action_checks(a, w)
    legs = [a for a in actions if a in LEG_ACTIONS]
    arms = [a for a in actions if a in ARM_ACTIONS]
    if legs and not arms:
        checks.append(_all("hands down", [_hand_down("", w[f"up_{h}"]) for h in _HAND_JOINTS]))
    if arms and not legs:
        checks += _prefixed("stands: ", _standing(w))
    return checks


def _prefixed(prefix: str, checks: Sequence[Check]) -> list[Check]:
    return [c._replace(description=prefix + c.description) for c in checks]


def check_spec(sig: dict[str, np.ndarray], spec: MotionSpec) -> list[Check]:
    """The constraint list of ``spec`` on a clip's signals: :class:`Check` ``(description, ok, soft)``."""
    n = len(sig["yaw"])
    h = n // 2
    if spec.compose == "single":
        return _clause(spec.actions, window_stats(sig, 0, n))
    if spec.compose == "then":
        first = _prefixed("first half: ", _clause(spec.actions[:1], window_stats(sig, 0, h)))
        return first + _prefixed("second half: ", _clause(spec.actions[1:], window_stats(sig, h, n)))
    leg, arm = spec.actions
    whole, halves = window_stats(sig, 0, n), (window_stats(sig, 0, h), window_stats(sig, h, n))
    checks = action_checks(leg, whole)
    arm_halves = [action_checks(arm, w) for w in halves]
    for first, second in zip(*arm_halves, strict=True):
        checks.append(_all(f"{first.description} (in both halves)", [first, second]))
    return checks


def judge(joints: Any, prompt) -> dict:
    """Score a clip ``[T, 22, 3]`` against ``prompt`` (a prompt string, a split row or a MotionSpec).

    Returns ``{"strict": 0 | 1, "partial": float in [0, 1], "soft": float in [0, 1], "task": str,
    "checks": [[description, bool]], "measurements": {"whole": {...}, "first": {...}, "second": {...}}}``.
    """
    spec = spec_of(prompt)
    sig = signals(joints)
    checks = check_spec(sig, spec)
    n = len(sig["yaw"])
    return {
        "strict": int(all(c.ok for c in checks)),
        "partial": sum(c.ok for c in checks) / len(checks),
        "soft": float(np.mean([c.soft for c in checks])),
        "task": spec.task,
        "checks": [[c.description, c.ok] for c in checks],
        "measurements": {
            "whole": window_stats(sig, 0, n),
            "first": window_stats(sig, 0, n // 2),
            "second": window_stats(sig, n // 2, n),
        },
    }


__all__ = [
    "ACTIONS",
    "DOWN_MAX_FRAC",
    "END_FRAMES",
    "FLIGHT_HEIGHT",
    "FLIGHT_MIN_FRAMES",
    "KEEP_FACING_DEG",
    "MIN_DISPLACEMENT",
    "RAISE_UP_FRAC",
    "REVERSAL_TRAVEL",
    "RUN_MIN_SPEED",
    "SPEED_SMOOTH",
    "STAY_MAX_DISPLACEMENT",
    "TURN_DEG",
    "TURN_TOL_DEG",
    "WALK_MAX_SPEED",
    "WAVE_REVERSALS",
    "WAVE_UP_FRAC",
    "Check",
    "SOFT_DISPLACEMENT_M",
    "SOFT_SPEED",
    "SOFT_YAW_DEG",
    "action_checks",
    "check_spec",
    "count_flights",
    "count_reversals",
    "judge",
    "mismatches",
    "signals",
    "window_stats",
]
