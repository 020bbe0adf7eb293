"""Moved to :mod:`ddpo_grpo.wiring` (docs/migration.md)."""

from foundation.moved import alias

alias(__name__, "ddpo_grpo.wiring")
