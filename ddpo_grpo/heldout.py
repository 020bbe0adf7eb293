"""Held-out evaluation during a run: several scorers on the same images, paired with the untrained model, and the
reward-hacking warning.

Every ``eval.freq`` epochs (and before the first update) the run draws deterministic samples of ``eval.prompts``
(``evaluation.evaluate``: fixed seeds, noise level 0) and scores the same images with

* each scorer of ``eval.reward`` (a comma list; the first is the headline: its metrics are ``eval/<m>``,
  ``eval/<group_by>_mean/<m>``, ``eval/<m>/<group>``; scorer ``s`` after it logs the same keys under
  ``eval.<s>/``), and
* the training reward (``reward.fns``' weighted sum) as ``eval.train/score``: what the policy is optimised for, on
  images it was not trained on.

**Paired with the untrained model.** The untrained model's per-sample values are kept (``report/eval_before.json``,
so a resumed run keeps them); every later evaluation draws sample i from the same prompt and noise, so
``paired.paired_by_group`` gives each metric's difference with its standard error and 95 % interval, per group
and for the mean over groups: ``paired/<scorer>/<m>/{diff,se,low,high}`` (``paired/<scorer>/<m>/<group>/{diff,se}``
per group), ``<scorer>`` being ``eval`` for the headline scorer.

**The hacking warning.** With z = diff / SE of each scorer's first metric (the mean over groups), the run warns in
one line — and logs ``paired/hacking_warning`` = 1 — when the training reward rose clearly on the held-out images
(z_train >= ``eval.hacking_rise_z``, default 3) while a held-out scorer (one that is not a training reward) did not
(z_s < ``eval.hacking_hold_z``, default 1): the policy is learning what the training reward pays for and the
scorer does not see, the signature of reward hacking (docs/reward_hacking.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

from ddpo_grpo.cadence import every
from ddpo_grpo.evaluation import Scorers
from ddpo_grpo.paired import MEAN, format_paired, paired_tables
from foundation.atomic_io import atomic_write_text

BEFORE_FILE = "eval_before.json"
TRAIN = "train"


def scorer_names(spec: str) -> list[str]:
    """The names of ``eval.reward`` ("a" or "a,b,c"), in order, without blanks."""
    return [n.strip() for n in str(spec).split(",") if n.strip()]


def scorer_kwargs(names: list[str], kwargs: dict) -> dict[str, dict]:
    """name -> factory kwargs: ``eval.reward_kwargs`` is one scorer's kwargs, or (several scorers) a dict keyed by
    the scorers' names; ValueError naming the field otherwise. Nested ``ml_collections.ConfigDict`` values (what a
    config's ``{'a': {...}, 'b': {...}}`` becomes) count as dicts."""
    kwargs = {k: v.to_dict() if hasattr(v, "to_dict") else v for k, v in dict(kwargs).items()}
    if len(names) == 1 and not (set(kwargs) <= set(names) and kwargs):
        return {names[0]: kwargs}
    if not set(kwargs) <= set(names) or not all(isinstance(v, dict) for v in kwargs.values()):
        raise ValueError(
            f"eval.reward_kwargs={kwargs!r}: with several scorers ({', '.join(names)}) give each its own kwargs, "
            f"keyed by name, e.g. {{'{names[0]}': {{...}}}}"
        )
    return {n: dict(kwargs.get(n, {})) for n in names}


def prefix(name: str, headline: str) -> str:
    return "eval" if name == headline else f"eval.{name}"


class HeldOut:
    """The run's held-out evaluation (module docstring). ``scorers``: name -> reward fn (the headline first);
    ``training``: the training reward as a reward fn; ``trained_names``: the names of the training rewards (they
    are not held-out scorers for the warning); ``run_dir``: where the untrained model's values are kept."""

    def __init__(self, config, scorers: dict, training: Callable, trained_names, run_dir, write: bool = True):
        from ddpo_grpo.prompts import load_prompts

        e = config.eval
        rows = load_prompts(e.prompts or config.prompts.source)
        self.rows = rows[: e.limit] if e.limit else rows
        self.scorers, self.training, self.trained = dict(scorers), training, set(trained_names)
        self.headline = next(iter(self.scorers))
        self.freq, self.group_by = e.freq, e.group_by
        self.rise_z, self.hold_z = e.hacking_rise_z, e.hacking_hold_z
        self.kwargs = dict(per_prompt=e.per_prompt, per_group=e.per_group, group_by=e.group_by)
        self.path, self.write = Path(run_dir) / "report" / BEFORE_FILE, write
        self.before = json.loads(self.path.read_text()) if self.path.is_file() else None
        self.tables: dict = {}
        self.warning: str | None = None

    def due(self, epoch: int, last: bool) -> bool:
        """After every ``freq`` epochs of training and after the last (never when freq is 0)."""
        return every(epoch, self.freq, last)

    def __call__(self, sample: Callable) -> dict:
        """Sample and score (``sample``: the run's deterministic sampler, ``evaluation.evaluate`` bound); metrics."""
        scorers = Scorers({**self.scorers, TRAIN: self.training}, self.group_by)
        metrics, _, _ = sample(self.rows, scorers, max_samples=0, **self.kwargs)
        out = dict(metrics)
        for name, m in scorers.metrics().items():
            if name != self.headline:
                out.update({k.replace("eval/", f"{prefix(name, self.headline)}/", 1): v for k, v in m.items()})
        values = {n: scorers.values(n) for n in scorers.scored}
        groups = scorers.scored[self.headline].groups
        if self.before is None:
            self.before = {"values": values, "groups": groups}
            if self.write:
                atomic_write_text(self.path, json.dumps(self.before))
            return out
        self.tables = {n: paired_tables(self.before["values"][n], values[n], groups) for n in values}
        out.update(self._paired_metrics())
        out["paired/hacking_warning"] = int(self._warn())
        return out

    def _paired_metrics(self) -> dict:
        out = {}
        for name, by_metric in self.tables.items():
            for metric, table in by_metric.items():
                key = f"paired/{prefix(name, self.headline)}/{metric}"
                overall = table[MEAN] if self.group_by else table[""]
                out.update({f"{key}/{s}": getattr(overall, s) for s in ("diff", "se", "low", "high")})
                for group, p in table.items():
                    if group not in ("", MEAN):
                        out.update({f"{key}/{group}/diff": p.diff, f"{key}/{group}/se": p.se})
        return out

    def z(self, name: str) -> tuple[float, float, float]:
        """(diff, se, z) of scorer ``name``'s first metric (the mean over groups)."""
        table = next(iter(self.tables[name].values()))
        p = table[MEAN] if self.group_by else table[""]
        return p.diff, p.se, (p.diff / p.se if p.se > 0 else math.copysign(math.inf, p.diff) if p.diff else 0.0)

    def _warn(self) -> bool:
        """Set ``self.warning`` (module docstring) and return whether it fired."""
        self.warning = None
        if TRAIN not in self.tables:
            return False
        d, se, z = self.z(TRAIN)
        if not z >= self.rise_z:
            return False
        quiet = [n for n in self.tables if n != TRAIN and n not in self.trained and self.z(n)[2] < self.hold_z]
        if quiet:
            dq, seq, zq = self.z(quiet[0])
            self.warning = (
                f"warning: the training reward rose on held-out prompts ({d:+.3g} ± {se:.2g}, z = {z:.1f}) while "
                f"the held-out scorer {quiet[0]!r} did not ({dq:+.3g} ± {seq:.2g}, z = {zq:.1f}): the policy may be "
                "exploiting the training reward (docs/reward_hacking.md)"
            )
        return self.warning is not None

    def report(self) -> str:
        """The paired before → after tables of every scorer (empty before any comparison): pass rates in points
        (×100), other scores in their own units (``paired.format_paired``)."""
        return "\n".join(
            format_paired(t, f"{name} {metric}") for name, by_m in self.tables.items() for metric, t in by_m.items()
        )
