"""Moved to :mod:`ddpo_grpo.denoiser_pipeline` (docs/migration.md)."""

from foundation.moved import alias

alias(__name__, "ddpo_grpo.denoiser_pipeline")
