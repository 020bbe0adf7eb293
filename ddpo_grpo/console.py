"""What a run prints: the start-up lines, one summary line per epoch with the time left, progress bars, and what
the libraries under it are kept from printing (``quiet_library_logs``)."""

from __future__ import annotations

import contextlib
import logging
import re
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


#: library log messages that are noise for our runs, dropped inside ``quiet_library_logs``: logger name -> pattern of
#: the message. A pipeline saved without a component on purpose (the tiny SD3 without T5: ``text_encoder_3=None``)
#: is saved without it, as it should be; a LoRA export holds the denoiser's layers only, so loading it finds none for
#: the text encoders. The same loggers' other messages (a denoiser without LoRA keys, missing weights) still print.
NOISE = {
    "diffusers.pipelines.pipeline_utils": re.compile(r"self\.\w+=None of type <class 'NoneType'> cannot be saved\."),
    "diffusers.loaders.lora_base": re.compile(r"No LoRA keys associated to \w+ found with the prefix='text_encoder"),
}


class _DropNoise(logging.Filter):
    def __init__(self, pattern: re.Pattern):
        super().__init__()
        self.pattern = pattern

    def filter(self, record: logging.LogRecord) -> bool:
        return not self.pattern.match(record.getMessage())


@contextlib.contextmanager
def quiet_library_logs():
    """Around loading or saving a pipeline: diffusers' and transformers' progress bars (components loaded, weights
    loaded, shards written: under a second for our models, a screenful of bars per run) off, and the ``NOISE``
    messages dropped; both as they were afterwards. Warnings and errors of these libraries otherwise print."""
    from diffusers.utils import logging as diffusers_logging
    from transformers.utils import logging as transformers_logging

    bars = [m for m in (diffusers_logging, transformers_logging) if m.is_progress_bar_enabled()]
    filters = [(logging.getLogger(name), _DropNoise(pattern)) for name, pattern in NOISE.items()]
    for module in bars:
        module.disable_progress_bar()
    for logger, noise in filters:
        logger.addFilter(noise)
    try:
        yield
    finally:
        for logger, noise in filters:
            logger.removeFilter(noise)
        for module in bars:
            module.enable_progress_bar()
