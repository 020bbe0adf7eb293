"""The transition kernels under their contract name: ``ddpo_grpo.sde`` is :mod:`ddpo_grpo.kernels` (DESIGN.md,
"Contracts": ``ddpo_grpo.sde.flow_sde_step``, ``ddim_step``, ``Step``), the same module object, kept stable."""

import sys

from ddpo_grpo import kernels

sys.modules[__name__] = kernels
