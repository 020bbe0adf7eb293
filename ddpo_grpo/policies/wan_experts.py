"""Wan 2.2 A14B's two experts as one trainable module (``WanExperts``): each sample is routed to the high-noise expert
(``transformer``, t ≥ boundary) or the low-noise one (``transformer_2``), the way ``WanPipeline`` switches them; with
several processes every process takes the same collective path (``WanExperts.calls``). Used by
``ddpo_grpo.policies.wan.WanPolicy`` (which re-exports it).
"""

from __future__ import annotations

import torch

from ddpo_grpo import distributed


class _Attach(torch.autograd.Function):
    """``out`` unchanged, with ``extra`` joined to its graph at a zero gradient: the parameters that made ``extra``
    take part in the backward pass (their gradients 0)."""

    @staticmethod
    def forward(ctx, out, extra):
        ctx.shape, ctx.dtype = extra.shape, extra.dtype
        return out.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, grad.new_zeros(ctx.shape, dtype=ctx.dtype)


class WanExperts(torch.nn.Module):
    """Two experts as one module: ``transformer`` for timesteps ≥ ``boundary`` (high noise), ``transformer_2`` below.

    ``forward`` takes the transformers' keyword arguments with per-sample tensors batch-first and returns
    ``(output,)`` (``return_dict`` is ignored); a batch whose timesteps straddle the boundary is split, each part run by its expert, and
    reassembled in order (a training minibatch holds different steps of different samples).
    """

    def __init__(self, transformer: torch.nn.Module, transformer_2: torch.nn.Module, boundary: float):
        super().__init__()
        self.transformer = transformer
        self.transformer_2 = transformer_2
        self.boundary = float(boundary)

    @property
    def config(self):
        return self.transformer.config

    def experts_with_adapters(self) -> list[torch.nn.Module]:
        return [m for m in (self.transformer, self.transformer_2) if getattr(m, "peft_config", None)]

    def disable_adapters(self) -> None:
        for expert in self.experts_with_adapters():
            expert.disable_adapters()

    def enable_adapters(self) -> None:
        for expert in self.experts_with_adapters():
            expert.enable_adapters()

    def calls(self, high: torch.Tensor) -> tuple[str, str]:
        """How a call whose samples are ``high`` [B] (t ≥ boundary) uses ``transformer`` and ``transformer_2``: "run"
        (on the samples that need it), "idle" (on one token of one sample), "touch" (its trainable parameters joined to
        the output at a zero gradient, without running it) or "" (not at all).

        One process: "run" the experts its samples need. Several processes must take the same collective path whatever
        their own samples need, or their collectives part (each process shuffles its own steps, so its minibatch
        routes to other experts than another's):
        * sharded (FSDP, which all-gathers an expert's blocks when it runs and reduce-scatters their gradients in its
          backward): every expert any process needs is called, agreed by an all-reduce of two flags on the run's
          device, "idle" where this process has no sample for it (the sampler's calls are in lockstep: the step's
          one expert, no idle call);
        * replicated (DDP, which reduces every trained parameter's gradient at a synchronised backward and fails when
          one got none): with gradients an expert without samples is "touch"ed; without gradients nothing (no
          collective in the forward).
        """
        need = torch.stack([high.any(), (~high).any()])  # [2] bool
        own = (bool(need[0]), bool(need[1]))
        if distributed.group_size() == 1:
            return tuple("run" if n else "" for n in own)
        from torch.distributed.fsdp import FSDPModule

        if isinstance(self, FSDPModule):
            need = distributed.any_process(need)
            return tuple("run" if n else ("idle" if bool(m) else "") for n, m in zip(own, need))
        spare = "touch" if torch.is_grad_enabled() else ""
        return tuple("run" if n else spare for n in own)

    def forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor, return_dict: bool = False, **kwargs):
        high = timestep >= self.boundary  # [B]
        out, extras = None, []
        for expert, rows, how in zip((self.transformer, self.transformer_2), (high, ~high), self.calls(high)):
            if how == "idle":
                extras.append(self._idle_call(expert, hidden_states, timestep, kwargs))
            elif how == "touch":
                extras.append(sum(p.sum() for p in expert.parameters() if p.requires_grad))
            elif how == "run" and bool(rows.all()):
                out = expert(hidden_states, timestep, return_dict=False, **kwargs)[0]
            elif how == "run":
                part = {k: v[rows] if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
                y = expert(hidden_states[rows], timestep[rows], return_dict=False, **part)[0]
                out = y.new_empty((hidden_states.shape[0], *y.shape[1:])) if out is None else out
                out[rows] = y
        for extra in extras if torch.is_grad_enabled() else ():
            if isinstance(extra, torch.Tensor):  # (a touch of an expert without trainable parameters: 0)
                out = _Attach.apply(out, extra)
        return (out,)

    @staticmethod
    def _idle_call(expert, hidden_states, timestep, kwargs) -> torch.Tensor:
        """``expert`` on one patch (one token) of the first sample: its collectives and its parameters in the graph at
        the least cost."""
        p_t, p_h, p_w = expert.config.patch_size
        one = {k: v[:1] if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
        return expert(hidden_states[:1, :, :p_t, :p_h, :p_w], timestep[:1], return_dict=False, **one)[0]
