"""Moved to :mod:`foundation.plugins` (docs/migration.md)."""

from foundation.moved import alias

alias(__name__, "foundation.plugins")
