"""Throughput of 1 vs 2 CPU processes with DDP and FSDP (docs/scaling.md, "Measured scaling").

For each tiny model and each launch — 1 process, 2 processes with distributed.strategy "ddp", 2 with "fsdp" — it
runs scripts/train.py (config/quickstart.py:tiny, the per-process batch fixed, so 2 processes draw twice the images
per epoch; FSDP also with distributed.gather_for_sampling=False, every block gathered at every sampling step) and reads perf/sample_s and perf/train_s of metrics.jsonl. Sampling throughput = images per epoch /
perf/sample_s, training throughput = images per epoch / perf/train_s, medians over the epochs after the first;
efficiency = 2-process throughput / (2 × 1-process throughput). The launches are interleaved and repeated, so a
busy machine slows them alike, and each process runs one thread (OMP_NUM_THREADS=1).

    python experiments/scaling.py --models sd3 --epochs 4 --repeats 2

A measurement, not a check: tests/test_scale.py checks that the same launches train the same weights and never
times them; this script times them and prints the throughputs and efficiencies. Result: docs/scaling.md,
"Measured scaling: 1 vs 2 CPU processes" (FSDP's sampling side by side in one launch: experiments/fsdp_sampling.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: label -> (processes, distributed.strategy, more overrides); "per step": FSDP's sampling as before
#: distributed.gather_for_sampling (every block all-gathered at every denoising step)
LAUNCHES = {
    "1 process": (1, "ddp", []),
    "2 processes, ddp": (2, "ddp", []),
    "2 processes, fsdp": (2, "fsdp", []),
    "2, fsdp, per step": (2, "fsdp", ["--config.distributed.gather_for_sampling=False"]),
}


def run(model: str, procs: int, strategy: str, epochs: int, logdir: Path, name: str, extra: list[str]) -> dict:
    args = [
        str(REPO / "scripts" / "train.py"),
        f"--config={REPO / 'config' / 'quickstart.py'}:tiny",
        f"--config.pretrained.model={model}",
        f"--config.logdir={logdir}",
        f"--config.run_name={name}",
        f"--config.num_epochs={epochs}",
        f"--config.distributed.strategy={strategy}",
        "--config.logging.progress=False",
        "--config.logging.image_freq=0",
        "--config.save_freq=0",
        *extra,
    ]
    launch = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(procs)] if procs > 1 else []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, *launch, *args], capture_output=True, text=True, env=env)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-2000:])
    rows = [json.loads(line) for line in (logdir / name / "metrics.jsonl").read_text().splitlines()][1:]
    images = rows[0]["progress/images_seen"] / (rows[0]["epoch"] + 1)
    return {
        "sample": [images / r["perf/sample_s"] for r in rows],
        "train": [images / r["perf/train_s"] for r in rows],
    }


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--models", default="sd3", help="comma list of ddpo_grpo.tiny builders")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--extra", default="", help="more --config overrides, space separated")
    args = p.parse_args(argv)
    from ddpo_grpo import tiny

    work = Path(tempfile.mkdtemp(prefix="scaling-"))
    for name in args.models.split(","):
        model = work / "models" / name
        tiny.BUILDERS[name](model)
        results = {label: {"sample": [], "train": []} for label in LAUNCHES}
        for r in range(args.repeats):
            order = list(LAUNCHES) if r % 2 == 0 else list(reversed(LAUNCHES))
            for label in order:
                procs, strategy, more = LAUNCHES[label]
                got = run(
                    str(model),
                    procs,
                    strategy,
                    args.epochs,
                    work / "logs",
                    f"{name}-{r}-{list(LAUNCHES).index(label)}",
                    [*args.extra.split(), *more],
                )
                for key in got:
                    results[label][key] += got[key]
        one = {k: statistics.median(results["1 process"][k]) for k in ("sample", "train")}
        print(
            f"\n{name}: images/s (median over {args.repeats} × {args.epochs - 1} epochs), efficiency vs 2 × 1 process"
        )
        print(f"{'launch':<20} {'sampling':>9} {'eff.':>6} {'training':>9} {'eff.':>6}")
        for label, res in results.items():
            s, t = statistics.median(res["sample"]), statistics.median(res["train"])
            procs = LAUNCHES[label][0]
            print(f"{label:<20} {s:9.1f} {s / (procs * one['sample']):6.2f} {t:9.1f} {t / (procs * one['train']):6.2f}")


if __name__ == "__main__":
    main()
