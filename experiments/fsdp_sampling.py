"""Sampling time of DDP and FSDP side by side in the same two processes (docs/scaling.md, "Sampling under FSDP").

    python -m torch.distributed.run --standalone --nproc_per_node 2 experiments/fsdp_sampling.py --epochs 8

Three trainers of ``config/quickstart.py:tiny`` (LoRA on the tiny SD3, or ``--model flux``) live in the same two CPU
processes: ``distributed.strategy`` "ddp", "fsdp" (``distributed.gather_for_sampling``: one all-gather per unit per
sampling phase, the units run as plain modules) and "fsdp" gathering per block per step (False). Their epochs are
interleaved — epoch e of each, then e + 1 — so every trainer samples under the same machine load, which
experiments/scaling.py's separate launches cannot promise on a shared machine. Printed per process: the median
``perf/sample_s`` over the epochs after the first, and each one's ratio to DDP's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: name -> (distributed.strategy, distributed.gather_for_sampling)
TRAINERS = {"ddp": ("ddp", True), "fsdp": ("fsdp", True), "fsdp, per step": ("fsdp", False)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--model", default="sd3", help="a ddpo_grpo.tiny builder")
    ap.add_argument("--logdir", default=os.path.join(tempfile.gettempdir(), "fsdp_sampling"), help="shared by both")
    args = ap.parse_args()
    import torch

    from config.quickstart import tiny
    from ddpo_grpo import console
    from ddpo_grpo.trainer import Trainer

    trainers = {}
    for i, (name, (strategy, gather)) in enumerate(TRAINERS.items()):
        c = tiny()
        c.pretrained.tiny, c.logdir, c.run_name = args.model, args.logdir, f"{args.model}-trainer{i}"
        c.num_epochs, c.save_freq, c.logging.progress, c.logging.image_freq = args.epochs, 0, False, 0
        c.distributed.strategy, c.distributed.gather_for_sampling = strategy, gather
        trainers[name] = Trainer(c)
    times = {name: [] for name in trainers}
    for epoch in range(args.epochs):
        for name, trainer in trainers.items():
            times[name].append(trainer.run_epoch(epoch, console.Clock(args.epochs))["perf/sample_s"])
    median = {name: statistics.median(t[1:]) for name, t in times.items()}
    rank = torch.distributed.get_rank()
    cells = ", ".join(f"{n} {s:.3f} s (× {s / median['ddp']:.2f})" for n, s in median.items())
    print(f"process {rank}: perf/sample_s median over epochs 1–{args.epochs - 1}: {cells}", flush=True)


if __name__ == "__main__":
    main()
