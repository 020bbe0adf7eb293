"""Collectives on the run's device (ddpo_grpo/distributed.py): what NCCL needs, checked on CPU processes.

NCCL, accelerate's process group on GPUs, maps only ``cuda``: a CPU tensor handed to it fails with "No backend type
associated with device type cpu". Two CPU processes whose default group is built with ``backend="cuda:gloo"`` (a
backend that maps only a non-CPU device type, as NCCL does) reproduce that on a machine without a GPU; the guard,
the metric reductions and the sharded checkpoint must all run under it. A source check keeps distributed.py the
one place where the library calls the process group.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.conftest import REPO
from tests.processes import spawn


def _under_a_device_only_backend(rank: int, root: str) -> None:
    import torch.distributed as dist

    from ddpo_grpo import distributed
    from ddpo_grpo.checkpoint import NonFiniteError
    from ddpo_grpo.checkpoint.sharded import load_sharded, save_sharded
    from ddpo_grpo.guard import FiniteGuard, TrainingStopped

    assert dist.get_backend_config() == "cuda:gloo"  # the default group maps no CPU backend

    # the guard: the weight check after every optimizer step, and the step decision itself
    params = {"a": torch.nn.Parameter(torch.ones(3)), "b": torch.nn.Parameter(torch.zeros(2))}
    FiniteGuard.check_weights(params, epoch=0)
    guard = FiniteGuard(max_consecutive_skips=2)
    assert guard.allow(1.0, epoch=0) and not guard.allow(float("nan"), epoch=0)
    if rank == 1:
        params["b"].data[1] = float("inf")
    where = "'b'" if rank == 1 else "its shard on another process"
    with pytest.raises(TrainingStopped, match=f"epoch 3: .*{where}.* became non-finite"):
        FiniteGuard.check_weights(params, epoch=3)

    # the metric reductions, gather, broadcast and the barrier
    assert distributed.host_group() is not dist.group.WORLD  # host values go through the gloo group beside it
    acc = SimpleNamespace(device=torch.device("cpu"), num_processes=2)
    assert distributed.reduce(acc, rank + 1.0) == 1.5
    assert distributed.reduce(acc, float("nan") if rank else 4.0) == 4.0  # the mean skips NaN
    assert distributed.reduce(acc, rank + 1.0, "sum") == 3.0 and distributed.reduce(acc, rank + 1.0, "max") == 2.0
    np.testing.assert_array_equal(distributed.gather(acc, [rank, rank + 10]), [0, 10, 1, 11])
    assert distributed.broadcast(acc, {"from": rank}) == {"from": 0}
    assert distributed.all_processes(True) and not distributed.all_processes(rank == 0)
    assert not distributed.all_processes(torch.tensor(rank == 1))
    distributed.barrier()

    # the sharded checkpoint: save, load into fresh tensors, refuse non-finite shards on every process together
    tensors = {"model": {"w": torch.arange(6.0).reshape(2, 3)}, "optimizer": {"step": torch.tensor(7.0)}}
    saved_rng = torch.get_rng_state()
    path = save_sharded(root, 4, tensors, {"note": "kept"}, rank=rank, world=2)
    torch.manual_seed(123)  # the checkpoint's RNG state is restored on load
    into = {"model": {"w": torch.zeros(2, 3)}, "optimizer": {"step": torch.tensor(0.0)}}
    state = load_sharded(path, into, rank=rank, world=2)
    assert state["note"] == "kept" and state["epoch"] == 4 and state["world_size"] == 2
    assert torch.equal(torch.get_rng_state(), saved_rng)
    assert torch.equal(into["model"]["w"], tensors["model"]["w"]) and float(into["optimizer"]["step"]) == 7.0
    if rank == 0:
        tensors["model"]["w"][0, 0] = float("nan")
    with pytest.raises(NonFiniteError, match="checkpoint of epoch 5"):
        save_sharded(root, 5, tensors, {}, rank=rank, world=2)
    distributed.barrier()
    assert sorted(p.name for p in (Path(root) / "checkpoints").iterdir()) == ["epoch_000004"]


def test_collectives_run_under_a_process_group_without_a_cpu_backend(tmp_path):
    """Fails on the CPU all-reduce of the old guard / checkpoint ("No backend type associated with device type
    cpu"), as every multi-GPU run under NCCL did at its first optimizer step."""
    spawn(_under_a_device_only_backend, str(tmp_path), backend="cuda:gloo")


def test_one_process_needs_no_process_group():
    from ddpo_grpo import distributed

    acc = SimpleNamespace(device=torch.device("cpu"), num_processes=1)
    assert distributed.reduce(acc, 2.5) == 2.5 and distributed.broadcast(acc, "x") == "x"
    assert distributed.all_processes(torch.tensor(True)) and distributed.host_group() is None
    np.testing.assert_array_equal(distributed.gather(acc, [1.0, 2.0]), [1.0, 2.0])
    distributed.barrier()


# ---- the source check -------------------------------------------------------------------------------------------

#: torch.distributed submodules whose collectives are their own (FSDP2, DTensor, DCP, device meshes)
SUBSYSTEMS = {"fsdp", "tensor", "checkpoint", "device_mesh"}
#: accelerate's collective helpers (the Accelerator's methods of these names are checked too)
ACCELERATE_COLLECTIVES = {
    "gather",
    "reduce",
    "broadcast",
    "broadcast_object_list",
    "gather_object",
    "gather_for_metrics",
}


def _violations(path: Path) -> list[str]:
    """Lines of ``path`` that reach the process group other than through ddpo_grpo.distributed."""
    tree, found = ast.parse(path.read_text(encoding="utf-8")), []
    aliases = {}  # local name -> "torch.distributed" or "torch.distributed.checkpoint"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("torch.distributed"):
                    aliases[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                if node.module == "torch" and a.name == "distributed":
                    aliases[a.asname or a.name] = "torch.distributed"
                elif node.module == "torch.distributed" and a.name not in SUBSYSTEMS:
                    found.append(f"{node.lineno}: from torch.distributed import {a.name}")
                elif node.module == "torch.distributed.checkpoint":
                    aliases[a.asname or a.name] = f"torch.distributed.checkpoint.{a.name}"
                elif node.module.startswith("accelerate") and a.name in ACCELERATE_COLLECTIVES:
                    found.append(f"{node.lineno}: from {node.module} import {a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            text = ast.unparse(node)
            base = ast.unparse(node.value)
            module = aliases.get(base, base)
            if module == "torch.distributed" and node.attr not in SUBSYSTEMS:
                found.append(f"{node.lineno}: {text}")  # the c10d API: collectives, ranks, groups
        if isinstance(node, ast.Call):
            func = ast.unparse(node.func)
            head, _, attr = func.rpartition(".")
            target = aliases.get(head, aliases.get(func, ""))
            if (
                target == "torch.distributed.checkpoint"
                and attr in {"save", "load"}
                or target.endswith(("checkpoint.save", "checkpoint.load"))
            ):
                if not any(k.arg == "process_group" for k in node.keywords):
                    found.append(f"{node.lineno}: {func}(…) without process_group= (its planning runs on the host)")
            if attr in ACCELERATE_COLLECTIVES and head.split(".")[-1] in {"acc", "accelerator"}:
                found.append(f"{node.lineno}: {func}(…)")
    return found


def test_only_distributed_py_talks_to_the_process_group():
    """Fails on the old sharded checkpoint (dist.barrier, dcp.save on the default group) and run state
    (dist.get_rank); FSDP2's and DCP's own collectives run inside them and are theirs."""
    offenders = {}
    for package in ("ddpo_grpo", "reward_models"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path == REPO / "ddpo_grpo" / "distributed.py":
                continue
            found = _violations(path)
            if found:
                offenders[str(path.relative_to(REPO))] = found
    assert not offenders, offenders


def test_the_source_check_finds_what_it_looks_for(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "import torch.distributed as dist\nimport torch.distributed.checkpoint as dcp\n"
        "from torch.distributed.fsdp import fully_shard\nfrom accelerate.utils import broadcast_object_list\n"
        "def f(acc, t):\n    dist.all_reduce(t)\n    dcp.save({}, checkpoint_id='x')\n"
        "    dcp.load({}, checkpoint_id='x', process_group=None)\n    torch.distributed.barrier()\n"
        "    return acc.gather(t), fully_shard\n"
    )
    lines = sorted(int(v.split(":")[0]) for v in _violations(source))
    assert lines == [4, 6, 7, 9, 10]
