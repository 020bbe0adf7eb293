"""Moved to :mod:`ddpo_grpo.degradations` (docs/migration.md)."""

from foundation.moved import alias

alias(__name__, "ddpo_grpo.degradations")
