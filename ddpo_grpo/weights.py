"""Named sets of trainable weights: snapshots, in-place mixing, temporary swaps, EMA, the lagging sampler.

Both the reference policy (hard / soft updates) and the EMA of the trainable weights are "another
value of the same parameters". They are kept as plain dicts name -> tensor and swapped into the
model only for the forward passes that need them (``swapped``), which costs no copy: the parameters'
``.data`` pointers are exchanged and restored.
"""

from __future__ import annotations

import contextlib

import torch

from ddpo_grpo.sharding import is_sharded


def trainable_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """name -> parameter for every parameter that requires grad (LoRA factors, or the whole denoiser)."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def snapshot(params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached float32 copies (kept in float32 so that repeated mixing does not lose precision)."""
    return {name: p.detach().clone().float() for name, p in params.items()}


@torch.no_grad()
def mix_(target: dict[str, torch.Tensor], source: dict[str, torch.Tensor], alpha: float) -> None:
    """target ← α·target + (1 − α)·source, in place (α = 0 is a hard copy)."""
    for name, value in target.items():
        value.mul_(alpha).add_(source[name].detach().float(), alpha=1.0 - alpha)


@contextlib.contextmanager
def swapped(params: dict[str, torch.nn.Parameter], values: dict[str, torch.Tensor]):
    """Temporarily make each parameter hold ``values[name]`` (cast to its dtype); restore on exit.

    Only for forward passes without autograd graphs that outlive the context (run under no_grad). Plain
    parameters exchange their ``.data`` (no copy); FSDP2's sharded parameters are copied in place and back, since
    FSDP gathers from the shard's own storage.
    """
    if any(is_sharded(p) for p in params.values()):
        with torch.no_grad():
            saved = {name: p.detach().clone() for name, p in params.items()}
            for name, p in params.items():
                p.copy_(values[name].to(dtype=p.dtype))
        try:
            yield
        finally:
            with torch.no_grad():
                for name, p in params.items():
                    p.copy_(saved[name])
        return
    originals = {}
    try:
        for name, p in params.items():
            originals[name] = p.data
            p.data = values[name].to(device=p.device, dtype=p.dtype)
        yield
    finally:
        for name, data in originals.items():
            params[name].data = data


class ShadowWeights:
    """Another value of the trainable weights (float32, starting at their current value), swapped in on
    demand and checkpointed; subclasses say how it follows the weights (EMA, LaggingSampler)."""

    #: how a checkpoint missing some of these weights is named in the error
    label = "shadow"

    def __init__(self, params: dict[str, torch.nn.Parameter]):
        self.params = params
        self.shadow = snapshot(params)

    def applied(self):
        """Context in which the model holds the shadow weights."""
        return swapped(self.params, self.shadow)

    def state_dict(self) -> dict[str, torch.Tensor]:
        return self.shadow

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        missing = set(self.shadow) - set(state)
        if missing:
            raise ValueError(f"{self.label} checkpoint is missing {len(missing)} weights, e.g. {sorted(missing)[:3]}")
        self.shadow = {k: state[k].clone().float() for k in self.shadow}


class EMA(ShadowWeights):
    """Exponential moving average θ_ema ← d·θ_ema + (1 − d)·θ of the trainable weights.

    warmup=False (the RL trainer): a constant d = decay, applied as θ_ema·d + θ·(1 − d) (``mix_``).
    warmup=True: update(n), called after optimisation step n (0-based: n steps came before it), uses
    d_n = min(decay, (1 + n)/(10 + n)), so the average forgets the random initialisation quickly
    (d_0 = 0.1, d_90 = 0.91), applied as θ_ema.lerp_(θ, 1 − d_n) (the ShapesWorld pretraining's arithmetic).
    """

    label = "EMA"  # applied(): for evaluation and export

    def __init__(self, params: dict[str, torch.nn.Parameter], decay: float, warmup: bool = False):
        super().__init__(params)
        self.decay = float(decay)
        self.warmup = bool(warmup)

    def decay_at(self, n: int) -> float:
        """The decay of update n: min(decay, (1 + n)/(10 + n)) with warm-up, else decay."""
        return min(self.decay, (1 + n) / (10 + n)) if self.warmup else self.decay

    @torch.no_grad()
    def update(self, n: int | None = None) -> None:
        if not self.warmup:
            mix_(self.shadow, self.params, self.decay)
            return
        if n is None:
            raise ValueError("EMA(warmup=True).update(n) needs n, the number of optimisation steps before this one")
        weight = 1 - self.decay_at(n)
        for name, value in self.shadow.items():
            value.lerp_(self.params[name].detach().float(), weight)


class LaggingSampler(ShadowWeights):
    """The sampling policy θ_s of the forward-process objectives, soft-updated after every epoch.

    DiffusionNFT (Zheng et al. 2025, §3) samples with an "old" policy that trails the trained θ and
    uses it as v_old in the loss: after each epoch θ_s ← d_n·θ_s + (1 − d_n)·θ with
    d_n = min(d_max, rate·max(0, n − flat)), n the optimizer steps so far. d = 0 is a hard copy (θ_s = θ
    at every epoch start: the on-policy sampler); d near 1 holds θ_s nearly still, and because the NFT
    loss pulls f_θ towards v_old wherever the advantage is 0, θ then stays within a trust region of a
    slowly moving anchor instead of chasing its own latest samples.
    """

    label = "sampler"  # applied(): for sampling

    def __init__(self, params: dict[str, torch.nn.Parameter], *, rate: float, max_decay: float, flat: int):
        super().__init__(params)
        self.rate, self.max_decay, self.flat = float(rate), float(max_decay), int(flat)

    def decay_at(self, n: int) -> float:
        """d_n = min(d_max, rate·max(0, n − flat))."""
        return min(self.max_decay, self.rate * max(0, n - self.flat))

    @torch.no_grad()
    def update(self, n: int) -> float:
        """θ_s ← d_n·θ_s + (1 − d_n)·θ after an epoch that ended at optimizer step n; returns d_n."""
        d = self.decay_at(n)
        mix_(self.shadow, self.params, d)
        return d
