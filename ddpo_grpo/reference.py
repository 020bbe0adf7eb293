"""The reference policy π_ref of the KL term β·KL(π_θ ‖ π_ref).

Where it lives, without a second model in memory when possible:
- LoRA, update "fixed": the base model itself — the policy's denoiser with its adapters disabled.
- otherwise: a float32 copy of the trainable weights only (the LoRA factors, or the whole denoiser
  for full fine-tuning), swapped into the denoiser for the reference forward.

Update strategies, applied after epoch e when (e + 1) % freq == 0:
- "fixed": never (the initial model);
- "hard":  ref ← policy;
- "soft":  ref ← α·ref + (1 − α)·policy. With LoRA the factors A and B are mixed separately, which
  mixes the weight updates B·A only approximately (the product of mixes is not the mix of products).

Call ``predict`` BEFORE the policy's own forward of the same step: switching adapters toggles
requires_grad flags, which must not happen while a policy graph is waiting for its backward.
"""

from __future__ import annotations

import contextlib

import torch

from ddpo_grpo.weights import mix_, snapshot, swapped, trainable_parameters


class Reference:
    def __init__(
        self, policy, model: torch.nn.Module, *, lora: bool, update: str = "fixed", freq: int = 1, alpha: float = 0.0
    ):
        self.policy = policy
        self.model = model  # the unwrapped denoiser
        self.update = update
        self.freq = max(int(freq), 1)
        self.alpha = float(alpha)
        self.params = trainable_parameters(model)
        self.weights = None if (lora and update == "fixed") else snapshot(self.params)

    @contextlib.contextmanager
    def active(self):
        """Context in which ``self.model`` computes the reference policy."""
        if self.weights is None:
            switch = getattr(self.policy, "set_adapters", None)  # a family that toggles its LoRA layers itself
            switch(False) if switch else self.model.disable_adapters()
            try:
                yield
            finally:
                switch(True) if switch else self.model.enable_adapters()
        else:
            with swapped(self.params, self.weights):
                yield

    @torch.no_grad()
    def predict(self, latents, timesteps, cond, guidance_scale: float, autocast=contextlib.nullcontext):
        with self.active(), autocast():
            return self.policy.predict(self.model, latents, timesteps, cond, guidance_scale)

    def after_epoch(self, epoch: int) -> bool:
        """Apply the update strategy; return True when the reference changed."""
        if self.update == "fixed" or (epoch + 1) % self.freq:
            return False
        mix_(self.weights, self.params, self.alpha if self.update == "soft" else 0.0)
        return True

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {} if self.weights is None or self.update == "fixed" else self.weights

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        if self.weights is not None and self.update != "fixed":
            self.weights = {k: state[k].clone().float() for k in self.weights}
