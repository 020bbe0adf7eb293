"""What a run prints: the start-up lines, one summary line per epoch with the time left, progress bars."""

from __future__ import annotations

import contextlib
import time

import numpy as np

#: metrics of the per-epoch summary line, in order (those a run does not log are left out)
SUMMARY_KEYS = (
    "reward/mean",
    "reward/std",
    "probe/diff",
    "train/approx_kl",
    "train/clipfrac",
    "train/logp_mismatch",
    "perf/epoch_s",
)


def duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def summary(epoch: int, metrics: dict) -> str:
    """``epoch 3: mean=0.41 std=0.12 …`` (NaN values left out)."""
    parts = [
        f"{k.split('/', 1)[1]}={metrics[k]:.4g}" for k in SUMMARY_KEYS if k in metrics and metrics[k] == metrics[k]
    ]
    return f"epoch {epoch}: " + " ".join(parts)


class Clock:
    """The time left: epochs to go × the median epoch so far (robust to the slow first epoch)."""

    def __init__(self, num_epochs: int):
        self.num_epochs, self.times = num_epochs, []

    def tick(self, epoch: int, seconds: float) -> str:
        self.times.append(seconds)
        left = (self.num_epochs - epoch - 1) * float(np.median(self.times))
        return f"about {duration(left)} to go"


def startup_lines(run_dir, model_path, policy, totals: dict, num_params: int, expected_minutes: float) -> list[str]:
    lines = [f"run directory: {run_dir}", f"model: {model_path} ({type(policy).__name__}, kernel {policy.kernel})"]
    lines += [f"{k}: {v}" for k, v in totals.items()]
    lines.append(f"trainable parameters: {num_params:,}")
    if expected_minutes:
        lines.append(
            f"expected duration: about {expected_minutes:.0f} min on two free CPU cores (more on a busy or slower "
            "machine: OMP_NUM_THREADS=1 then); --config.num_epochs trades time for gain"
        )
    return lines


def progress(enabled: bool):
    """``progress(iterable, desc)``: a tqdm bar when enabled, else the iterable itself."""

    def wrap(iterable, desc: str):
        if not enabled:
            return iterable
        from tqdm.auto import tqdm

        return tqdm(iterable, desc=desc, leave=False)

    return wrap


@contextlib.contextmanager
def timed(timing: dict, key: str):
    """Add the block's wall time to ``timing[key]`` (seconds): the run's perf/<key>_s."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timing[key] = timing.get(key, 0.0) + time.perf_counter() - start
