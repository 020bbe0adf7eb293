"""Metrics/sample logging: ``metrics.jsonl`` + sample grids on disk, plus an optional tracker.

``MetricsLogger`` always writes ``<run_dir>/metrics.jsonl`` (one JSON object per
``log`` call, appended across resumes) and ``<run_dir>/samples/epoch_XXXXX.png``;
a resumed run first moves the rows it will replay (epochs logged after its checkpoint) to
``metrics.superseded.jsonl``, so that ``metrics.jsonl`` keeps one row per epoch;
it also forwards everything to the tracker chosen by name from :data:`TRACKERS`
("none", "wandb", "tensorboard"). Non-main processes pass ``enabled=False`` and
every method becomes a no-op.
"""

from __future__ import annotations

import json
import math
import netrc
import os
import warnings
from collections.abc import Callable
from typing import Any
from urllib.parse import urlparse

import numpy as np

from ddpo_grpo.image_grids import make_grid_uint8, save_grid
from foundation.atomic_io import atomic_write
from foundation.errors import ConfigError
from foundation.images import to_uint8


def _to_json_value(key: str, value: Any) -> Any:
    """Convert a metric value to a JSON-safe Python scalar (non-finite -> None)."""
    if hasattr(value, "detach"):  # torch tensor
        value = value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise ValueError(f"metric {key!r} has shape {value.shape}; log a scalar (e.g. its mean) instead")
        value = value.reshape(()).item()
    elif isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    raise ValueError(f"metric {key!r} has unsupported type {type(value).__name__}; log a number or a string")


def supersede_rows(metrics_path: str, first_epoch: int) -> int:
    """Move the rows of ``metrics_path`` with ``epoch >= first_epoch``, and any torn or unreadable
    line, to ``metrics.superseded.jsonl`` beside it; return how many moved.

    A run resumed from the checkpoint of epoch ``first_epoch - 1`` replays the later epochs (their
    log lines were written before a crash or a stop that came before their checkpoint), so without
    this they would appear twice. The moved rows are appended to the superseded file and fsynced
    before ``metrics.jsonl`` is replaced atomically (temp file + ``os.replace``): a crash at any
    point leaves every row in at least one of the two files.
    """
    if not os.path.isfile(metrics_path):
        return 0
    keep, moved = [], []
    with open(metrics_path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
                current = line.endswith("\n") and int(row["epoch"]) < first_epoch
            except (ValueError, KeyError, TypeError):
                current = False
            (keep if current else moved).append(line if line.endswith("\n") else line + "\n")
    if not moved:
        return 0
    superseded = os.path.join(os.path.dirname(metrics_path), "metrics.superseded.jsonl")
    with open(superseded, "a", encoding="utf-8") as f:
        f.writelines(moved)
        f.flush()
        os.fsync(f.fileno())
    atomic_write(metrics_path, "".join(keep).encode("utf-8"))
    return len(moved)


# ---------------------------------------------------------------------------
# trackers
# ---------------------------------------------------------------------------


class _NoTracker:
    """Tracker that does nothing (files on disk only)."""

    def log(self, metrics: dict[str, Any], step: int) -> None:
        pass

    def log_images(self, images: np.ndarray, grid: np.ndarray, captions: list[str], step: int) -> None:
        pass

    def close(self) -> None:
        pass


def _wandb_api_key_available() -> bool:
    """True if ``WANDB_API_KEY`` is set or a netrc file has an entry for the wandb host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    path = os.environ.get("NETRC") or os.path.expanduser("~/.netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _new_run_id() -> str:
    """8-char lowercase alphanumeric id (uses ``secrets``, so training RNG streams are untouched)."""
    import secrets
    import string

    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


class _WandbTracker:
    """Weights & Biases: offline unless an API key is found (``WANDB_MODE`` overrides).

    The run id is stored in ``<run_dir>/wandb_run_id`` so a resumed run continues it.
    If an online init fails (no network), it falls back to offline mode.
    """

    def __init__(self, run_dir: str, project: str, run_name: str, config: dict | None):
        try:
            import wandb
        except ImportError as exc:
            raise ValueError("logging.tracker='wandb' but wandb is not installed; `pip install wandb`") from exc
        self._wandb = wandb
        mode = os.environ.get("WANDB_MODE") or ("online" if _wandb_api_key_available() else "offline")
        id_file = os.path.join(run_dir, "wandb_run_id")
        run_id = open(id_file).read().strip() if os.path.isfile(id_file) else _new_run_id()
        kwargs = dict(
            project=project,
            name=run_name,
            id=run_id,
            resume="allow",
            dir=run_dir,
            config=config or {},
            allow_val_change=True,
        )
        try:
            self.run = wandb.init(mode=mode, settings=wandb.Settings(init_timeout=60), **kwargs)
        except Exception as exc:  # network trouble: never block training on the tracker
            if mode == "offline":
                raise
            warnings.warn(f"wandb online init failed ({exc}); logging offline to {run_dir}/wandb", stacklevel=2)
            self.run = wandb.init(mode="offline", **kwargs)
        with open(id_file, "w") as f:
            f.write(run_id)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        self.run.log({k: (float("nan") if v is None else v) for k, v in metrics.items()}, step=step)

    def log_images(self, images: np.ndarray, grid: np.ndarray, captions: list[str], step: int) -> None:
        imgs = [self._wandb.Image(img, caption=cap) for img, cap in zip(images, captions)]
        self.run.log({"samples": imgs}, step=step)

    def close(self) -> None:
        self.run.finish()


class _TensorboardTracker:
    """TensorBoard ``SummaryWriter`` writing to ``<run_dir>/tensorboard``."""

    def __init__(self, run_dir: str, project: str, run_name: str, config: dict | None):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError as exc:
            raise ValueError(
                "logging.tracker='tensorboard' but tensorboard is not installed; "
                "`pip install tensorboard` or set logging.tracker to 'none' or 'wandb'"
            ) from exc
        self.writer = SummaryWriter(log_dir=os.path.join(run_dir, "tensorboard"))
        if config:
            self.writer.add_text("config", "```\n" + json.dumps(config, indent=2, default=str) + "\n```", 0)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        for k, v in metrics.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self.writer.add_scalar(k, v, step)

    def log_images(self, images: np.ndarray, grid: np.ndarray, captions: list[str], step: int) -> None:
        self.writer.add_image("samples", grid, step, dataformats="HWC")
        self.writer.add_text("samples/captions", "\n\n".join(f"{i}: {c}" for i, c in enumerate(captions)), step)

    def close(self) -> None:
        self.writer.close()


#: logging.tracker name -> the package it needs (checked before the run directory is made: tracker_problem)
TRACKER_PACKAGES = {"wandb": "wandb", "tensorboard": "tensorboard"}


def tracker_problem(tracker: str) -> str | None:
    """Why ``logging.tracker`` cannot be used (not a tracker, or its package not installed), or None. Cheap: the
    package is looked up, not imported."""
    import importlib.util

    if tracker not in TRACKERS:
        return f"logging.tracker={tracker!r} is not valid; choose one of {sorted(TRACKERS)}"
    package = TRACKER_PACKAGES.get(tracker)
    try:
        found = package is None or importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        found = False
    if found:
        return None
    return (
        f"logging.tracker={tracker!r} but {package} is not installed: `pip install {package}`, or "
        "--config.logging.tracker=none (metrics.jsonl is written either way)"
    )


#: logging.tracker name -> tracker class(run_dir, project, run_name, config)
TRACKERS: dict[str, Callable[..., Any]] = {
    "none": lambda run_dir, project, run_name, config: _NoTracker(),
    "wandb": _WandbTracker,
    "tensorboard": _TensorboardTracker,
}


# ---------------------------------------------------------------------------
# logger
# ---------------------------------------------------------------------------


class MetricsLogger:
    """Append-only metrics log + sample grids, forwarded to a tracker.

    Args:
        run_dir: output directory (created if needed).
        tracker: one of :data:`TRACKERS` (``logging.tracker`` in the config).
        project, run_name, config: passed to the tracker.
        enabled: ``False`` on non-main processes: every method is a no-op.
        resume_epoch: the first epoch a resumed run will log; earlier-logged rows of this and later
            epochs move to ``metrics.superseded.jsonl`` (:func:`supersede_rows`). None: a fresh run.
    """

    def __init__(
        self,
        run_dir: str,
        *,
        tracker: str = "none",
        project: str = "ddpo_grpo",
        run_name: str = "run",
        config: dict | None = None,
        enabled: bool = True,
        resume_epoch: int | None = None,
    ):
        problem = tracker_problem(tracker)
        if problem:  # before anything is written
            raise ConfigError(problem)
        self.run_dir = str(run_dir)
        self.enabled = enabled
        self._file = None
        self._tracker = None
        self.superseded = 0  # rows moved aside on resume (see resume_epoch)
        if not enabled:
            return
        os.makedirs(self.run_dir, exist_ok=True)
        self.metrics_path = os.path.join(self.run_dir, "metrics.jsonl")
        self.samples_dir = os.path.join(self.run_dir, "samples")
        self._tracker = TRACKERS[tracker](self.run_dir, project, run_name, config)
        if resume_epoch is not None:
            self.superseded = supersede_rows(self.metrics_path, resume_epoch)
        self._file = open(self.metrics_path, "a", encoding="utf-8")

    def log(self, metrics: dict[str, Any], *, epoch: int, global_step: int) -> None:
        """Append ``{"epoch", "global_step", **metrics}`` as one JSON line and send to the tracker."""
        if not self.enabled:
            return
        self._check_open()
        values = {k: _to_json_value(k, v) for k, v in metrics.items() if k not in ("epoch", "global_step")}
        row = {"epoch": int(epoch), "global_step": int(global_step), **values}
        self._file.write(json.dumps(row, allow_nan=False) + "\n")
        self._file.flush()
        self._tracker.log({"epoch": row["epoch"], **values}, step=row["global_step"])

    def log_images(
        self,
        images: Any,
        captions: list[str],
        *,
        epoch: int,
        global_step: int,
        nrow: int | None = None,
    ) -> str | None:
        """Save a grid PNG to ``samples/epoch_{epoch:05d}.png`` and send images to the tracker.

        Returns the PNG path (``None`` when disabled).
        """
        if not self.enabled:
            return None
        self._check_open()
        arr = to_uint8(images)
        if len(captions) != len(arr):
            raise ValueError(f"log_images got {len(arr)} images but {len(captions)} captions")
        path = os.path.join(self.samples_dir, f"epoch_{int(epoch):05d}.png")
        save_grid(images, captions, path, nrow=nrow)
        self._tracker.log_images(arr, make_grid_uint8(arr, nrow=nrow), list(captions), step=int(global_step))
        return path

    def _check_open(self) -> None:
        if self._file is None:
            raise RuntimeError(f"MetricsLogger for {self.run_dir!r} is closed; create a new one to log again")

    def close(self) -> None:
        """Flush and close the metrics file and the tracker (idempotent)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._tracker is not None:
            self._tracker.close()
            self._tracker = None

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
