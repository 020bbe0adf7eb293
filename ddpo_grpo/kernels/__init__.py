"""The transition kernels with exact Gaussian log-densities; their public face is ``ddpo_grpo.sde``."""
