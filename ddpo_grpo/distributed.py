"""Process-group helpers: what every process of a run agrees on, through accelerate's collectives.

A run is P processes (``torchrun`` / ``accelerate launch``; GPUs with NCCL or CPU processes with gloo), each
holding an ``accelerate.Accelerator``. These helpers are the only cross-process arithmetic of the trainer:

    reduce(acc, value, "mean" | "sum" | "max")   a float, the same on every process (mean skips NaN)
    gather(acc, values)                          a numpy array [P·n], process-major (= the global sample order)
    broadcast(acc, obj)                          the main process's picklable object, on every process

With one process they return their input unchanged, without a collective.
"""

from __future__ import annotations

import os

import numpy as np
import torch

_REDUCTIONS = {"mean": torch.nanmean, "sum": torch.sum, "max": torch.max}


def world_size() -> int:
    """Processes of the launch (``WORLD_SIZE`` of torchrun / accelerate; 1 when launched plainly)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    """The global rank of this process (``RANK``; 0 when launched plainly), known before any process group exists."""
    return int(os.environ.get("RANK", "0"))


def reduce(acc, value: float, op: str = "mean") -> float:
    """``value`` of every process reduced by ``op`` ("mean" ignores NaN values, as a metric average should)."""
    if acc.num_processes == 1:
        return float(value)
    tensor = torch.tensor([value], dtype=torch.float32, device=acc.device)
    return float(_REDUCTIONS[op](acc.gather(tensor)))


def gather(acc, values) -> np.ndarray:
    """float32 ``values`` [n] of every process, concatenated in process order: [P·n]."""
    tensor = torch.as_tensor(values, dtype=torch.float32, device=acc.device)
    if acc.num_processes == 1:
        return tensor.cpu().numpy()
    return acc.gather(tensor).cpu().numpy()


def all_processes(flag: bool) -> bool:
    """True when ``flag`` holds on every process of the default process group (``flag`` itself without one)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return bool(flag)
    value = torch.tensor([1 if flag else 0], dtype=torch.int32)
    dist.all_reduce(value, op=dist.ReduceOp.MIN)
    return bool(value.item())


def broadcast(acc, obj):
    """The main process's ``obj`` on every process."""
    if acc.num_processes == 1:
        return obj
    from accelerate.utils import broadcast_object_list

    return broadcast_object_list([obj])[0]


__all__ = ["all_processes", "broadcast", "gather", "rank", "reduce", "world_size"]
