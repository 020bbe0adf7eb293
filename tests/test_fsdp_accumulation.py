"""Gradient accumulation under FSDP2 holds 1/P of the gradients (sharding.no_sync), and trains what one process would.

Two CPU processes, a model of four sharded blocks and a root head, K = 4 backward passes per optimizer step with
``no_sync`` around all but the last (as the updaters and the supervised term do). After each backward pass every
process counts the gradient bytes it holds: its shards' ``.grad`` and FSDP2's unsharded gradients (the unsharded
parameters' ``.grad`` and its accumulated-gradient buffers). With a reduce-scatter per backward that is 1/P of the
trainable weights' bytes; FSDP2's ``set_requires_gradient_sync(False)`` (the old ``no_sync``) held all of them.
"""

from __future__ import annotations

import contextlib
import copy
import json
from pathlib import Path

import torch

from tests.processes import spawn

WIDTH, BLOCKS, K, P = 128, 4, 4, 2


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return x + torch.tanh(self.linear(x))


def build() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[Block() for _ in range(BLOCKS)], torch.nn.Linear(WIDTH, 8))


def batch(rank: int, k: int) -> torch.Tensor:
    return torch.randn(16, WIDTH, generator=torch.Generator().manual_seed(100 * rank + k))


def loss_of(model, x) -> torch.Tensor:
    return model(x).pow(2).mean()


def gradient_bytes(model) -> int:
    """Gradient bytes this process holds: its shards' ``.grad`` and FSDP2's unsharded gradients."""
    from torch.distributed.fsdp import FSDPModule

    from ddpo_grpo.sharding import local

    held = [local(p.grad) for p in model.parameters() if p.grad is not None]
    for module in model.modules():
        group = module._get_fsdp_state()._fsdp_param_group if isinstance(module, FSDPModule) else None
        for fsdp_param in group.fsdp_params if group is not None else ():
            unsharded = getattr(fsdp_param, "_unsharded_param", None)
            held += [
                g for g in (getattr(unsharded, "grad", None), fsdp_param.unsharded_accumulated_grad) if g is not None
            ]
    return sum(g.numel() * g.element_size() for g in held)


def _accumulate(rank: int, out: str) -> None:
    from ddpo_grpo.sharding import full, no_sync, shard

    model = build()
    reference = copy.deepcopy(model)  # one process, every process's batches
    shard(model, ["Block"])
    trainable = sum(p.numel() * 4 for p in reference.parameters())
    held = []
    for k in range(K):
        with contextlib.nullcontext() if k == K - 1 else no_sync(model, None):
            loss_of(model, batch(rank, k)).backward()
        held.append(gradient_bytes(model))
    for r in range(P):  # FSDP averages the processes' gradients: the reference is the sum over batches / P
        for k in range(K):
            (loss_of(reference, batch(r, k)) / P).backward()
    grads = {n: full(p.grad) for n, p in model.named_parameters()}
    for name, p in reference.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, rtol=1e-5, atol=1e-7)
    for m in (model, reference):
        torch.optim.SGD(m.parameters(), lr=0.5).step()
    after = {n: full(p.detach()) for n, p in model.named_parameters()}
    moved = max(
        float((p.detach() - q.detach()).abs().max()) for p, q in zip(reference.parameters(), build().parameters())
    )
    gap = max(float((after[n] - p.detach()).abs().max()) for n, p in reference.named_parameters())
    Path(out, f"rank{rank}.json").write_text(
        json.dumps({"trainable": trainable, "held": held, "moved": moved, "gap": gap})
    )


def test_fsdp_accumulation_holds_a_shard_of_the_gradients_and_trains_the_unsharded_update(tmp_path):
    """Fails on the old no_sync (set_requires_gradient_sync(False)): the whole gradient between backward passes."""
    spawn(_accumulate, str(tmp_path), nprocs=P)
    for rank in range(P):
        m = json.loads((tmp_path / f"rank{rank}.json").read_text())
        share = [h / m["trainable"] for h in m["held"]]
        print(f"rank {rank}: of {m['trainable']} trainable gradient bytes, held after each backward: {m['held']}")
        assert all(s <= 1 / P * 1.05 for s in share), share  # 1/P (+5 %: no padding at these sizes)
        assert m["moved"] > 1e-3 and m["gap"] <= 1e-6 * max(1.0, m["moved"])  # the unsharded update
