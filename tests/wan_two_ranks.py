"""Two processes calling Wan 2.2's ``WanExperts`` with samples that route differently, under DDP and under FSDP2
(launched by tests/test_wan.py: ``torchrun --nproc_per_node 2 tests/wan_two_ranks.py``).

Per strategy, on fresh tiny experts with LoRA: two forward + backward passes in which one process's samples all sit
on one side of the boundary while the other's straddle it (the roles swap in the second pass), then a no-grad call in
which each process needs another expert. Prints one "OK <strategy>" line per strategy when every LoRA gradient is the
same on both processes, and nonzero for both experts; a collective mismatch fails or times out instead.
"""

from __future__ import annotations

import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def experts_with_lora():
    from peft import LoraConfig

    from ddpo_grpo.policies.wan import WanExperts
    from ddpo_grpo.tiny.wan import LATENT_CHANNELS, _transformer

    torch.manual_seed(0)
    experts = WanExperts(_transformer(LATENT_CHANNELS), _transformer(LATENT_CHANNELS), 900.0)
    experts.requires_grad_(False)
    for expert in (experts.transformer, experts.transformer_2):
        expert.add_adapter(LoraConfig(r=2, lora_alpha=2, target_modules=["to_q", "to_k", "to_v", "to_out.0"]))
    return experts


def run(strategy: str, rank: int) -> None:
    from ddpo_grpo.sharding import full, shard
    from ddpo_grpo.tiny.common import TEXT_HIDDEN

    experts = experts_with_lora()
    if strategy == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(experts)
    else:
        shard(experts, ("WanTransformerBlock",))
        model = experts
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(2, 4, 2, 4, 4, generator=gen)  # [B, C, F', h, w]
    text = torch.randn(2, 8, TEXT_HIDDEN, generator=gen)
    routes = (torch.tensor([950.0, 920.0]), torch.tensor([950.0, 400.0]))  # one expert / both
    for step in range(2):
        t = routes[(rank + step) % 2]
        out = model(hidden_states=x, timestep=t, encoder_hidden_states=text, return_dict=False)[0]
        out.square().mean().backward()
    with torch.no_grad():
        t = torch.full((2,), 950.0 if rank == 0 else 400.0)
        model(hidden_states=x, timestep=t, encoder_hidden_states=text, return_dict=False)
    moved = set()
    for name, p in experts.named_parameters():
        if not p.requires_grad:
            continue
        grad = full(p.grad).flatten()
        both = [torch.empty_like(grad) for _ in range(2)]
        dist.all_gather(both, grad)
        assert torch.allclose(both[0], both[1], rtol=1e-5, atol=1e-7), f"{strategy}: {name} differs between processes"
        if grad.abs().max() > 0:
            moved.add(name.split(".")[0])
    assert moved == {"transformer", "transformer_2"}, moved
    print(f"OK {strategy}", flush=True)


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    for strategy in sys.argv[1:] or ["ddp", "fsdp"]:
        run(strategy, rank)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
