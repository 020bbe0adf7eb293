"""Split (docs/migration.md): sample grids are in :mod:`ddpo_grpo.image_grids`, the metrics log and its trackers
in :mod:`ddpo_grpo.metrics_log`, ``atomic_write`` in :mod:`foundation.atomic_io`. Kept for one release."""

import warnings

from ddpo_grpo.image_grids import make_grid_uint8, save_grid
from ddpo_grpo.metrics_log import TRACKERS, MetricsLogger, supersede_rows
from foundation.atomic_io import atomic_write

warnings.warn(
    "ddpo_grpo.logging_utils was split into ddpo_grpo.image_grids, ddpo_grpo.metrics_log and foundation.atomic_io; "
    "the old name is kept for one release (docs/migration.md)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["TRACKERS", "MetricsLogger", "atomic_write", "make_grid_uint8", "save_grid", "supersede_rows"]
