"""The (λ_sup, λ_pg) schedule that mixes a supervised loss into policy-gradient training, per epoch.

The trainer's loss at epoch e is ``λ_sup(e) · L_sup + λ_pg(e) · L_pg`` (plus ``train.consistency_weight ·
L_consistency`` where rows have a degradation). :func:`loss_weights` is a pure function of the epoch and
the config's ``train`` fields:

==========  ===========================================================================================
field       meaning
==========  ===========================================================================================
sup_weight        w ≥ 0: the supervised weight at the start (0 = no supervised term: pure GRPO, λ_pg = 1)
sup_schedule      "constant" | "linear" | "staged" (below)
sup_warmup_epochs N ≥ 0: "staged" only, epochs of supervised training alone (λ_pg = 0)
sup_ramp_epochs   M ≥ 0: "linear": epochs over which λ_sup decays to the floor (≥ 1);
                  "staged": epochs of the hand-over after the N supervised ones
sup_floor         f ∈ [0, w]: λ_sup never drops below it ("linear", "staged"; ignored by "constant")
==========  ===========================================================================================

Shapes (e counts from 0):

* ``constant``: ``(w, 1)`` every epoch.
* ``linear``:   ``(w + (f − w)·p, 1)`` with ``p = min(1, e / M)``: w at epoch 0, f from epoch M on; λ_pg = 1.
* ``staged``:   ``(w, 0)`` for ``e < N`` (supervised only); then ``p = min(1, (e − N + 1) / (M + 1))`` and
  ``(w + (f − w)·p, p)``: during the M hand-over epochs λ_sup falls and λ_pg rises strictly between their
  end values, and from epoch ``N + M`` on it is GRPO with the floor, ``(f, 1)``. M = 0 switches at once.

Example, w = 1, f = 0.1, N = 2, M = 3: (1, 0), (1, 0), (0.775, 0.25), (0.55, 0.5), (0.325, 0.75), (0.1, 1), …

:func:`check` returns the problems of a config's fields as messages naming them (for config validation);
:func:`loss_weights` raises ``ValueError`` with the same messages.
"""

from __future__ import annotations

SCHEDULES = ("constant", "linear", "staged")
#: the train fields read here and their defaults (a config that predates them behaves as pure GRPO)
DEFAULTS = {
    "sup_weight": 0.0,
    "sup_schedule": "constant",
    "sup_warmup_epochs": 0,
    "sup_ramp_epochs": 0,
    "sup_floor": 0.0,
}


def _fields(config) -> dict:
    """The schedule's fields of a root config (read from its ``train``) or of a ``train`` section / mapping."""
    try:
        section = config["train"] if "train" in config else config
    except TypeError:
        raise ValueError(f"expected a config or its train section, got {type(config).__name__}") from None
    return {k: section.get(k, d) for k, d in DEFAULTS.items()}


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check(config) -> list[str]:
    """Every problem with the schedule fields of ``config`` (root or ``train``), as messages naming the field."""
    f, p = _fields(config), []
    if f["sup_schedule"] not in SCHEDULES:
        p.append(f"train.sup_schedule={f['sup_schedule']!r} is not one of {list(SCHEDULES)}")
    if not _is_number(f["sup_weight"]) or f["sup_weight"] < 0:
        p.append(f"train.sup_weight={f['sup_weight']!r} must be a number ≥ 0 (0 = no supervised term)")
    for name in ("sup_warmup_epochs", "sup_ramp_epochs"):
        if not isinstance(f[name], int) or isinstance(f[name], bool) or f[name] < 0:
            p.append(f"train.{name}={f[name]!r} must be an integer ≥ 0")
    if not _is_number(f["sup_floor"]) or f["sup_floor"] < 0:
        p.append(f"train.sup_floor={f['sup_floor']!r} must be a number ≥ 0")
    elif _is_number(f["sup_weight"]) and f["sup_floor"] > f["sup_weight"] and f["sup_schedule"] != "constant":
        p.append(
            f"train.sup_floor={f['sup_floor']} must be ≤ train.sup_weight={f['sup_weight']} "
            "(λ_sup decays from sup_weight down to the floor)"
        )
    if f["sup_schedule"] == "linear" and isinstance(f["sup_ramp_epochs"], int) and f["sup_ramp_epochs"] < 1:
        p.append(
            "train.sup_schedule='linear' needs train.sup_ramp_epochs ≥ 1 (the epochs of the decay); "
            "use 'constant' for a fixed weight"
        )
    if f["sup_schedule"] != "staged" and f["sup_warmup_epochs"] not in (0, None):
        p.append(
            f"train.sup_warmup_epochs={f['sup_warmup_epochs']} only applies to train.sup_schedule='staged'; "
            "set it to 0 or use 'staged'"
        )
    return p


def loss_weights(epoch: int, config) -> tuple[float, float]:
    """``(λ_sup, λ_pg)`` at ``epoch`` (0-based) for ``config`` (root or ``train``); see the module docstring."""
    problems = check(config)
    if problems:
        raise ValueError("; ".join(problems))
    if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 0:
        raise ValueError(f"loss_weights: epoch must be an integer ≥ 0, got {epoch!r}")
    f = _fields(config)
    w, floor, kind = float(f["sup_weight"]), float(f["sup_floor"]), f["sup_schedule"]
    if kind == "constant" or w == 0.0:
        return w, 1.0
    if kind == "linear":
        p = min(1.0, epoch / f["sup_ramp_epochs"])
        return _between(w, floor, p), 1.0
    n, m = f["sup_warmup_epochs"], f["sup_ramp_epochs"]
    if epoch < n:
        return w, 0.0
    p = min(1.0, (epoch - n + 1) / (m + 1))
    return _between(w, floor, p), p


def _between(start: float, end: float, p: float) -> float:
    """``start + (end − start)·p``, exactly ``end`` at ``p = 1``."""
    return end if p >= 1.0 else start + (end - start) * p


__all__ = ["DEFAULTS", "SCHEDULES", "check", "loss_weights"]
