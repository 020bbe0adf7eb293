"""Moved to :mod:`foundation.images` (docs/migration.md)."""

from foundation.moved import alias

alias(__name__, "foundation.images")
