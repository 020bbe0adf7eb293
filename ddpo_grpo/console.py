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
    """``35 s``, ``2 min 20 s``, ``1 h 05 min``."""
    seconds = round(seconds)
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def summary(epoch: int, metrics: dict) -> str:
    """``epoch 3: mean=0.41 std=0.12 …`` (NaN values left out)."""
    parts = [
        f"{k.split('/', 1)[1]}={metrics[k]:.4g}" for k in SUMMARY_KEYS if k in metrics and metrics[k] == metrics[k]
    ]
    return f"epoch {epoch}: " + " ".join(parts)


class Clock:
    """The time a run takes, measured: after its first epoch, that epoch's time × the epochs to run; then the time
    left, epochs to go × the median epoch so far (robust to the slow first epoch)."""

    def __init__(self, num_epochs: int):
        self.num_epochs, self.times = num_epochs, []

    def tick(self, epoch: int, seconds: float) -> str:
        self.times.append(seconds)
        left = (self.num_epochs - epoch - 1) * float(np.median(self.times))
        if len(self.times) == 1:
            todo = self.num_epochs - epoch  # this epoch and the rest (a resumed run starts past epoch 0)
            return (
                f"epoch {epoch} took {duration(seconds)}; at this pace about {duration(todo * seconds)} for "
                f"{todo} epoch{'s' * (todo != 1)}, {duration(left)} to go"
            )
        return f"about {duration(left)} to go"


def sampling_line(policy, sample) -> str:
    """The sampling settings the run uses, resolved (the policy's resolution, kernel and noise level, not the
    config's "" / 0 / None meaning "the default")."""

    def shown(value) -> str:
        return f"{value:g}" if isinstance(value, float) else str(value)

    if hasattr(policy, "sampling_settings"):  # a family with settings of its own (causal language models)
        return "sampling settings: " + ", ".join(policy.sampling_settings())
    parts = [
        f"resolution={policy.resolution}",
        f"kernel={policy.kernel}",
        f"noise_level={shown(policy.noise_level)}",
        f"steps={sample.num_steps} (evaluation {sample.eval_num_steps})",
        f"guidance={shown(sample.guidance_scale)}",
    ]
    return "sampling settings: " + ", ".join(parts)


def startup_lines(run_dir, model_path, policy, totals: dict, num_params: int, config) -> list[str]:
    lines = [f"run directory: {run_dir}", f"model: {model_path} ({type(policy).__name__})"]
    lines.append(sampling_line(policy, config.sample))
    lines += [f"{k}: {v}" for k, v in totals.items()]
    lines.append(f"trainable parameters: {num_params:,}")
    lines.append(
        f"expected duration: measured after the first epoch ({config.num_epochs} epochs of "
        f"{totals.get('images_per_epoch', '?')} images); --config.num_epochs trades time for gain"
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
