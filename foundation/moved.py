"""Old import paths kept for one release after a module moves (each listed in docs/migration.md).

A module that moved leaves a two-line file at its old path calling :func:`alias`: importing the old name warns
(``DeprecationWarning``, naming the new path) and gives the very module object at the new path, so its functions,
classes and module-level state are shared, not copied.
"""

from __future__ import annotations

import importlib
import sys
import warnings


def alias(old: str, new: str) -> None:
    """Make module ``old`` (being imported) the module ``new``, with a deprecation warning."""
    warnings.warn(
        f"{old} moved to {new}; the old name is kept for one release (docs/migration.md)",
        DeprecationWarning,
        stacklevel=3,
    )
    sys.modules[old] = importlib.import_module(new)
