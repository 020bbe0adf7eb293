"""Several CPU processes joined by a process group, for tests of the distributed code paths without a launcher.

``spawn(worker, *args, nprocs=2, backend="gloo")`` runs ``worker(rank, *args)`` in ``nprocs`` processes, each with the launcher's environment (``RANK``,
``WORLD_SIZE``, …) set and the default process group initialised with ``backend``; an exception in any process
fails the call. One intra-op thread each (the test machine's cores are shared). The processes are forked, so they
reuse the test process's imports (torch's import alone takes 10–20 s on the loaded test machine); the test process
itself must hold no process group and no CUDA context (none of the CPU tests makes either).
"""

from __future__ import annotations

import os
import socket

import torch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(worker, *args, nprocs: int = 2, backend: str = "gloo") -> None:
    import torch.multiprocessing as mp

    mp.start_processes(
        _joined, args=(worker, nprocs, backend, free_port(), args), nprocs=nprocs, join=True, start_method="fork"
    )


def _joined(rank, worker, nprocs, backend, port, args):
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(nprocs))
    os.environ.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(nprocs), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group(backend=backend, rank=rank, world_size=nprocs)
    try:
        worker(rank, *args)
    finally:
        dist.destroy_process_group()
