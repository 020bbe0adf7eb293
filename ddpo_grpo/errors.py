"""Moved to :mod:`foundation.errors` (docs/migration.md)."""

from foundation.moved import alias

alias(__name__, "foundation.errors")
