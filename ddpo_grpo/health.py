"""Health ranges of a language-model run: one warning line when an epoch's metrics leave them.

Each range (``RANGES``; the table and its sources in docs/metrics.md, "Health ranges of a language-model run") names
a metric of the epoch's row, the interval it should stay in, what leaving it means and what to do. ``HealthCheck``
reads every epoch's metrics (already reduced over the processes, so every process decides the same) and prints, on
the main process, one line per range the first time the run leaves it — warned once, not every epoch, as
``guard.DegenerateEpochs`` warns:

    warning: epoch 3: train/clipfrac=0.41 outside [-inf, 0.2]: the update moves the policy far past the clip range
    on many tokens; lower train.learning_rate or raise train.batch_size

A bound may be relative (``relative=True``: a multiple of the metric's value in the first epoch that reports it,
e.g. the entropy growing past 3× where it started) and may apply in full precision only (``fp32_only``: bf16 /
fp16 forwards differ by more than the bound). A metric the epoch does not report (no reference: no ``train/kl``) is
not checked. Only language-model runs are checked (``for_run``): no image, video or motion output changes.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class HealthRange:
    """``key`` of the metrics row should stay in [low, high] (None: unbounded on that side)."""

    key: str
    low: float | None
    high: float | None
    meaning: str  # what leaving the range means
    remedy: str  # what to do about it
    relative: bool = False  # low / high are multiples of the metric's first value
    fp32_only: bool = False  # checked only when mixed_precision = "no"


#: the documented ranges (docs/metrics.md); each number's reason is there
RANGES = (
    HealthRange(
        "train/kl",
        None,
        0.1,
        "the policy has drifted far from the reference (KL in nats per token)",
        "raise train.beta or lower train.learning_rate",
    ),
    HealthRange(
        "train/clipfrac",
        None,
        0.2,
        "the update moves the policy far past the clip range on many tokens",
        "lower train.learning_rate or raise train.batch_size",
    ),
    HealthRange(
        "train/entropy",
        1 / 3,
        None,
        "the policy's entropy has collapsed below a third of its first epoch's: the responses of a group become the same",
        "raise sample.temperature or train.clip_range_high, or lower train.learning_rate",
        relative=True,  # (a small model's answers start near-deterministic: ArithmeticWorld's base is at 0.04 nats)
    ),
    HealthRange(
        "train/entropy",
        None,
        3.0,
        "the policy's entropy has grown past 3x its first epoch's: responses turn into noise",
        "lower train.learning_rate or raise train.beta",
        relative=True,
    ),
    HealthRange(
        "response/truncated_frac",
        None,
        0.3,
        "many responses stop at sample.max_response_length without an EOS; they are scored unfinished",
        "raise sample.max_response_length or add stop strings (sample.stop)",
    ),
    HealthRange(
        "adv/frac_zero_std",
        None,
        0.9,
        "almost every prompt group's rewards are equal, so almost every advantage is 0 (no reward spread)",
        "raise sample.group_size, use harder prompts or a graded reward",
    ),
    HealthRange(
        "train/sampler_logp_gap_max",
        None,
        1e-3,
        "the KV-cached sampling forward and the trainer's forward disagree on a token's log-prob",
        "check the model's attention / cache implementation against its full forward (a bug, not a setting)",
        fp32_only=True,
    ),
)


def _bound(value: float | None) -> str:
    return "-inf" if value is None else f"{value:g}"


class HealthCheck:
    """Once per epoch, the ``RANGES`` against the epoch's metrics (module docstring)."""

    def __init__(self, ranges=RANGES, *, full_precision: bool = True, main: bool = True, out=None):
        self.ranges = [r for r in ranges if full_precision or not r.fp32_only]
        self.main, self.out = main, out
        self.first: dict[str, float] = {}
        self.warned: set[int] = set()

    def check(self, epoch: int, metrics: dict) -> list[str]:
        """The warning lines of this epoch (printed on the main process): the ranges left for the first time."""
        lines = []
        for i, r in enumerate(self.ranges):
            value = metrics.get(r.key)
            if value is None or not math.isfinite(float(value)):
                continue
            value = float(value)
            scale = self.first.setdefault(r.key, value) if r.relative else 1.0
            if scale <= 0:  # (a relative bound of a metric that started at 0 bounds nothing)
                continue
            low = None if r.low is None else r.low * scale
            high = None if r.high is None else r.high * scale
            if (low is None or value >= low) and (high is None or value <= high) or i in self.warned:
                continue
            self.warned.add(i)
            hi = "inf" if high is None else f"{high:g}"
            factor = r.high if r.high is not None else r.low
            where = f" ({factor:.3g}x its first value {scale:.4g})" if r.relative else ""
            lines.append(
                f"warning: epoch {epoch}: {r.key}={value:.4g} outside [{_bound(low)}, {hi}]{where}: {r.meaning}; "
                f"{r.remedy}"
            )
        if self.main:
            for line in lines:
                print(line, file=self.out or sys.stderr, flush=True)
        return lines


def for_run(config, policy, main: bool) -> HealthCheck | None:
    """The check of a language-model run (``policy.sample_kind == "text"``); None for every other family."""
    if getattr(policy, "sample_kind", None) != "text":
        return None
    return HealthCheck(full_precision=config.mixed_precision == "no", main=main)
