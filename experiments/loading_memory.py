"""Host memory of setting a run up (and of exporting its final/) on two CPU processes, today's code beside another.

    python experiments/loading_memory.py --model /tmp/flux277 --write                # write the model once (1.1 GB)
    python experiments/loading_memory.py --model /tmp/flux277 --code /tmp/base,.     # each code tree, side by side

The model is experiments/planner_validation.py's FLUX.1-architecture transformer (277 M random parameters, d = 1024,
4 double- and 8 single-stream blocks; the tiny CLIP / T5 / VAE) saved as a pipeline directory in float32, so that
loading reads safetensors files as a real checkpoint does. Each code tree (a directory holding ``ddpo_grpo``; "."
is this one) runs ``Trainer(config)`` — everything a run builds before its first epoch — under ``torchrun
--nproc_per_node 2`` (gloo) with ``config/flux.py:tiny``'s settings at 128 px, ``distributed.strategy`` "fsdp",
``mixed_precision`` "bf16" and LoRA (``--full`` for full fine-tuning, ``--strategy ddp`` for DDP); every process
reports its peak resident-memory growth during set-up: /proc/self/status VmHWM after ``Trainer(config)`` minus VmRSS
before it (the high-water mark reset there through /proc/self/clear_refs, after the imports). With ``--export`` it
then writes ``final/`` (``Trainer.export_final``) and reports the growth of that step alone. glibc is told to map
every block ≥ 64 KiB (MALLOC_MMAP_THRESHOLD_) so freed tensors leave the resident set, as in planner_validation.py.

The bound of issue 36 item 2: growth ≤ (model bytes in the weight dtype) / 2 + one block + 15 %, printed beside the
figures (the model's bytes and its largest block's, in the weight dtype, from the safetensors headers).

Result: docs/scaling.md, "Loading, sampling and export without whole copies" (the table of growth per process).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DTYPE_BYTES = {"no": 4, "bf16": 2, "fp16": 2}


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def config_for(model: str, logdir: str, strategy: str, mixed_precision: str, full: bool):
    from config.flux import tiny

    c = tiny()
    c.pretrained.model, c.logdir, c.run_name = model, logdir, f"{strategy}-{'full' if full else 'lora'}"
    c.num_epochs, c.save_freq, c.mixed_precision = 1, 0, mixed_precision
    s = c.sample
    s.resolution, s.max_sequence_length, s.num_steps = 128, 128, 2
    c.train.use_lora = not full
    c.train.optimizer = "adamw" if not full else "sgd"
    c.distributed.strategy = strategy
    c.logging.progress = False
    return c


def worker(args) -> None:
    """One process (under torchrun): set-up growth, then (--export) the growth of writing final/."""
    import diffusers  # noqa: F401
    import torch  # noqa: F401  (the imports come before the baseline)
    import transformers  # noqa: F401

    from ddpo_grpo.trainer import Trainer

    Path("/proc/self/clear_refs").write_text("5")
    base = _status("VmRSS")
    trainer = Trainer(config_for(args.model, args.logdir, args.strategy, args.mixed_precision, args.full))
    row = {"setup": _status("VmHWM") - base}
    if args.export:
        Path("/proc/self/clear_refs").write_text("5")
        base = _status("VmRSS")
        trainer.export_final()
        row["export"] = _status("VmHWM") - base
    rank = int(os.environ.get("RANK", "0"))
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(row))


def model_bytes(model: str, mixed_precision: str, full: bool) -> tuple[int, int]:
    """(the transformer's bytes, its largest block's bytes) in the weight dtype (float32 for a full fine-tune)."""
    from safetensors import safe_open

    size = 4 if full else DTYPE_BYTES[mixed_precision]
    blocks, total = {}, 0
    for file in sorted((Path(model) / "transformer").glob("*.safetensors")):
        with safe_open(str(file), "pt") as f:
            for key in f.keys():
                n = 1
                for d in f.get_slice(key).get_shape():
                    n *= d
                total += n * size
                parts = key.split(".")
                if parts[0] in ("transformer_blocks", "single_transformer_blocks"):
                    blocks[parts[0], parts[1]] = blocks.get((parts[0], parts[1]), 0) + n * size
    return total, max(blocks.values())


def run(code: str, args) -> list[dict]:
    out = tempfile.mkdtemp(prefix="loading_")
    env = dict(os.environ, OMP_NUM_THREADS="1", MALLOC_MMAP_THRESHOLD_="65536", HF_HUB_OFFLINE="1")
    env["PYTHONPATH"] = str(Path(code).resolve())
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", __file__, "--worker"]
    cmd += ["--model", args.model, "--logdir", tempfile.mkdtemp(prefix="loading_logs_"), "--out", out]
    cmd += ["--strategy", args.strategy, "--mixed-precision", args.mixed_precision]
    cmd += ["--full"] * args.full + ["--export"] * args.export
    subprocess.run(cmd, check=True, env=env, cwd=str(Path(code).resolve()))
    return [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(2)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="the pipeline directory (written by --write)")
    ap.add_argument("--write", action="store_true", help="write planner_validation's model to --model and stop")
    ap.add_argument("--code", default=".", help="comma list of code trees to measure, one after the other")
    ap.add_argument("--strategy", default="fsdp")
    ap.add_argument("--mixed-precision", default="bf16")
    ap.add_argument("--full", action="store_true", help="full fine-tuning (default: LoRA)")
    ap.add_argument("--export", action="store_true", help="also measure writing final/")
    ap.add_argument("--worker", action="store_true")
    ap.add_argument("--logdir")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if args.write:
        sys.path.insert(0, str(ROOT / "experiments"))
        from planner_validation import build

        build().save_pretrained(args.model)
        return
    total, block = model_bytes(args.model, args.mixed_precision, args.full)
    bound = (total / 2 + block) * 1.15
    print(json.dumps({"model_mib": total / 2**20, "block_mib": block / 2**20, "bound_mib": bound / 2**20}))
    for code in args.code.split(","):
        rows = run(code, args)
        mib = {k: [round(r[k] / 2**20, 1) for r in rows] for k in rows[0]}
        print(json.dumps({"code": code, **{f"{k}_mib": v for k, v in mib.items()}}), flush=True)


if __name__ == "__main__":
    main()
