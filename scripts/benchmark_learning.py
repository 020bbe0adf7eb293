"""The learning benchmark: objectives side by side on the same ShapesWorld work, the same image budget, several seeds.

    python scripts/benchmark_learning.py --out logs/bench                      # every variant, 3 seeds, 40 epochs
    python scripts/benchmark_learning.py --variants grpo,nft --seeds 0,1 --epochs 16 --jobs 2 --out logs/b
    python scripts/benchmark_learning.py --reward jpeg --out logs/bench_jpeg   # the dense control
    python scripts/benchmark_learning.py --summarize logs/bench                # the table of finished runs
    python scripts/benchmark_learning.py --signal logs/bench/nft_s0            # one run's signal per epoch
    python scripts/benchmark_learning.py --curve logs/q/s0 logs/q/s1 logs/q/s2   # held-out gain vs images, seeds

Every run is ``scripts/train.py --config config/shapes.py:sd3_quick`` (the shipped ShapesWorld SD3 model, 256
images per epoch in groups of 8, task-balanced train prompts) with a variant's overrides, the paired probe
every epoch (probe.freq 1: 16 prompts × 4, the untrained model's samples as the baseline) and the held-out
evaluation before and after (48 images per task). ``--reward jpeg`` swaps the judge for JPEG compressibility
(a dense, prompt-independent control). The variants (``VARIANTS``):

    grpo           GRPO on the SD3 model (config/shapes.py:sd3_quick): SGD, one 256-image step per epoch, SDE window on steps 0–3
    grpo_flowgrpo  Flow-GRPO's recipe in our config: AdamW 3e-4, clip 1e-4 per latent dimension, β 0.04
                   (flow_grpo KL), every SDE step but the last, two optimizer steps per epoch
    grpo_ppo       GRPO with PPO's sample reuse: AdamW, 4 steps per epoch × 2 inner epochs, clip 0.2 per sample
    awm, nft, rwr  the forward-process objectives on deterministic (ODE) rollouts, AdamW, one step per epoch
    nft_multi, awm_multi  the same with 8 updates per epoch (4 steps × 2 inner epochs); nft_multi is the quickstart
                   (config/shapes.py:sd3_nft)

Printed side by side: the probe's paired reward difference to the untrained model per ``--every`` epochs
(mean over seeds ± a 95 % interval over seeds), held-out strict and partial before → after (mean ± SE over
seeds), wall time per run, and the images drawn until the probe difference first reached each threshold.
Runs already finished in --out are reused (delete a run's directory to redo it).

``--curve RUN ...`` reads any runs of one recipe (its seeds, trained with ``eval.freq`` > 0, any world) and prints
per held-out scorer the gain over the base by images drawn, with its 95 % interval over the runs, and the images
until held-out strict first reached the base + ``--threshold`` (ddpo_grpo/learning_curves.py); ``--plot PNG`` also
draws it (a panel per scorer: each run, their mean and its interval).
"""

from __future__ import annotations

import ast
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ddpo_grpo.cli import UsageError
from ddpo_grpo.learning_curves import curve_figure, curve_table, mean_interval
from ddpo_grpo.script_args import run_script, script_parser
from ddpo_grpo.signal_table import read_metrics, signal_table

REPO = Path(__file__).resolve().parents[1]
BASE = f"{REPO / 'config' / 'shapes.py'}:sd3_quick"
IMAGES_PER_EPOCH = 256
THRESHOLDS = (0.02, 0.05, 0.10)

# deterministic (ODE) rollouts, so a group's members must start from different noises (share_group_noise off)
_FORWARD = {
    "sample.noise_level": 0.0,
    "sample.share_group_noise": False,
    "sample.sde_window_size": 0,
    "train.optimizer": "adamw",
    "train.learning_rate": 1e-3,
    "train.adam_weight_decay": 0.0,
    "train.forward_timesteps": 4,
}
#: variant -> config overrides on top of config/shapes.py:sd3_quick
VARIANTS: dict[str, dict] = {
    "grpo": {},
    "grpo_flowgrpo": {
        "train.optimizer": "adamw",
        "train.learning_rate": 3e-4,
        "train.clip_range": 1e-4 * 1024,
        "train.beta": 0.04,
        "train.kl_estimator": "flow_grpo",
        "sample.sde_window_size": 0,
        "train.timestep_fraction": 0.9,
        "train.gradient_accumulation_steps": 8,
        "train.adv_mode": "global_std",
    },
    # PPO's sample reuse, measured: 4 AdamW steps per epoch over 2 inner epochs, the per-sample trust region 0.2
    "grpo_ppo": {
        "train.optimizer": "adamw",
        "train.learning_rate": 1e-3,
        "train.adam_weight_decay": 0.0,
        "train.clip_range": 0.2,
        "train.num_inner_epochs": 2,
        "train.gradient_accumulation_steps": 4,
    },
    "awm": {**_FORWARD, "train.objective": "awm"},
    "nft": {**_FORWARD, "train.objective": "nft"},
    "rwr": {**_FORWARD, "train.objective": "rwr", "train.rwr_temperature": 0.5},
    # the same with 8 updates per epoch (4 steps of 64 images, 2 inner epochs): dense gradients reuse samples
    "nft_multi": {
        **_FORWARD,
        "train.objective": "nft",
        "train.gradient_accumulation_steps": 4,
        "train.num_inner_epochs": 2,
    },
    "awm_multi": {
        **_FORWARD,
        "train.objective": "awm",
        "train.gradient_accumulation_steps": 4,
        "train.num_inner_epochs": 2,
    },
}
REWARDS = {"shapes": {}, "jpeg": {"reward.fns": {"jpeg_compressibility": 1.0}, "reward.kwargs": {}}}


def _arg(key: str, value) -> str:
    """A --config override: containers as Python literals, strings and numbers as they are."""
    return f"--config.{key}={value!r}" if isinstance(value, (dict, list, tuple)) else f"--config.{key}={value}"


def run_one(out: Path, variant: str, seed: int, epochs: int, reward: str, extra: dict) -> dict:
    """Train one (variant, seed) unless its metrics are complete; returns its summary."""
    name = f"{variant}_s{seed}"
    run = out / name
    if not _complete(run, epochs):
        if run.exists():
            raise SystemExit(f"{run} holds an unfinished run; delete it to redo it")
        overrides = {
            **VARIANTS[variant],
            **REWARDS[reward],
            **extra,
            "seed": seed,
            "num_epochs": epochs,
            "eval.freq": epochs,
            "probe.freq": 1,
            "logdir": str(out),
            "run_name": name,
            "logging.progress": False,
        }
        cmd = [
            sys.executable,
            str(REPO / "scripts" / "train.py"),
            f"--config={BASE}",
            *(_arg(k, v) for k, v in overrides.items()),
        ]
        start = time.perf_counter()
        with open(out / f"{name}.log", "w") as log:
            code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO).returncode
        (out / f"{name}.time").write_text(f"{time.perf_counter() - start:.1f}")
        if code:
            raise SystemExit(f"{name} failed (exit {code}); see {out / f'{name}.log'}")
    return summarize_run(run)


def _complete(run: Path, epochs: int) -> bool:
    path = run / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return bool(rows) and rows[-1]["epoch"] == epochs - 1 and (run / "final").is_dir()


def summarize_run(run: Path) -> dict:
    """The curves and before/after numbers of one run (of an unfinished one: what it logged so far)."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    before_file = run / "report" / "before.json"
    before = json.loads(before_file.read_text())["metrics"] if before_file.is_file() else {}
    wall = run.parent / f"{run.name}.time"
    return {
        "probe_diff": [r.get("probe/diff") for r in rows],
        "reward": [r.get("reward/mean") for r in rows],
        "before": {k: before.get(f"eval/task_mean/{k}") for k in ("strict", "partial")},
        "after": {k: rows[-1].get(f"eval/task_mean/{k}") for k in ("strict", "partial")},
        "wall_s": float(wall.read_text()) if wall.is_file() else sum(r.get("perf/epoch_s", 0) for r in rows),
    }


def _se(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "—"
    m = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return f"{m:.3f}±{se:.3f}"


def report(results: dict[str, list[dict]], every: int) -> str:
    lines = []
    epochs = max(len(r["probe_diff"]) for runs in results.values() for r in runs)
    lines.append("probe/diff (paired reward gain over the untrained model), mean ± 95% CI over seeds, by images drawn:")
    shown = [e for e in range(epochs) if (e + 1) % every == 0 or e == epochs - 1]
    lines.append("variant".ljust(15) + "".join(f"{(e + 1) * IMAGES_PER_EPOCH:>17,}" for e in shown))
    for variant, runs in results.items():
        cells = []
        for e in shown:
            diffs = [r["probe_diff"][e] for r in runs if e < len(r["probe_diff"])]
            m, ci = mean_interval([d for d in diffs if d is not None and not math.isnan(d)])
            cells.append(f"{m:+.3f}±{ci:.3f}".rjust(17))
        lines.append(variant.ljust(15) + "".join(cells))
    lines.append("")
    head = ["variant", "seeds", "held-out strict", "held-out partial", "wall s/run"]
    head += [f"images to +{t:g}" for t in THRESHOLDS]
    lines.append(" | ".join(head))
    for variant, runs in results.items():
        firsts = []
        for t in THRESHOLDS:
            reached = []
            for r in runs:
                hit = next((i for i, d in enumerate(r["probe_diff"]) if d is not None and d >= t), None)
                reached.append((hit + 1) * IMAGES_PER_EPOCH if hit is not None else None)
            got = [x for x in reached if x is not None]
            firsts.append(f"{statistics.median(got):,.0f} ({len(got)}/{len(runs)})" if got else f"— (0/{len(runs)})")
        strict = f"{_se([r['before']['strict'] for r in runs])} → {_se([r['after']['strict'] for r in runs])}"
        partial = f"{_se([r['before']['partial'] for r in runs])} → {_se([r['after']['partial'] for r in runs])}"
        wall = statistics.fmean(r["wall_s"] for r in runs)
        lines.append(" | ".join([variant, str(len(runs)), strict, partial, f"{wall:.0f}", *firsts]))
    return "\n".join(lines)


def build_parser():
    summary, details = __doc__.split("\n\n", 1)
    p = script_parser(__file__, summary, epilog=details)
    p.add_argument("--out", type=Path, default=None, help="directory of the runs (required unless --summarize)")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated training seeds")
    p.add_argument("--epochs", type=int, default=40, help="epochs of 256 images each")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (each uses OMP_NUM_THREADS threads)")
    p.add_argument(
        "--reward", choices=sorted(REWARDS), default="shapes", help="the training reward (jpeg: the dense control)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra config override for every run (repeatable), e.g. --set train.learning_rate=3e-3",
    )
    p.add_argument("--every", type=int, default=5, help="print the curve every N epochs")
    p.add_argument("--summarize", type=Path, default=None, help="only print the table of the runs in this directory")
    p.add_argument(
        "--signal",
        type=Path,
        default=None,
        help="only print one run's learning signal per epoch (flat groups, spread; ddpo_grpo/signal_table.py)",
    )
    p.add_argument(
        "--curve",
        type=Path,
        nargs="+",
        default=None,
        help="only print the held-out curve and images-to-threshold of these runs (one recipe's seeds)",
    )
    p.add_argument(
        "--threshold", type=float, default=0.05, help="--curve's held-out strict gain to reach (0.05 = 5 points)"
    )
    p.add_argument("--plot", type=Path, default=None, help="with --curve: also draw the curve into this PNG")
    p.add_argument("--title", default="", help="with --plot: the picture's title (the recipe and its command)")
    return p


def main(argv=None) -> int:
    """Run (or --summarize) the benchmark and print its table; the exit status (2 and one line for a bad flag)."""
    return run_script(build_parser(), run, argv)


def run(args) -> None:
    if args.plot is not None and args.curve is None:
        raise UsageError("--plot draws the held-out curve: give the runs with --curve RUN ...")
    if args.curve is not None:
        try:
            print(curve_table(args.curve, args.threshold), end="")
            if args.plot is not None:
                print(f"picture: {curve_figure(args.curve, args.plot, args.threshold, args.title)}")
        except ValueError as exc:
            raise UsageError(f"--curve: {exc}") from None
        return
    if args.signal is not None:
        table = signal_table(read_metrics(args.signal))
        if not table:
            raise UsageError(f"--signal {args.signal}: no epoch with advantage statistics in its metrics.jsonl")
        print(table, end="")
        return
    if args.summarize is not None:
        if not args.summarize.is_dir():
            raise UsageError(f"--summarize {args.summarize}: not a directory (give the --out of a benchmark run)")
        results: dict[str, list[dict]] = {}
        for folder in sorted(
            d
            for d in args.summarize.iterdir()
            if (d / "metrics.jsonl").is_file() and (d / "metrics.jsonl").stat().st_size
        ):
            results.setdefault(folder.name.rsplit("_s", 1)[0], []).append(summarize_run(folder))
        if not results:
            raise UsageError(
                f"--summarize {args.summarize}: no finished run there (a run directory with a metrics.jsonl); "
                "give the --out of a benchmark run"
            )
        print(report(results, args.every))
        return
    if args.out is None:
        raise UsageError("--out is required (or --summarize DIR)")
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise UsageError(f"--variants: unknown {unknown}; choose from {', '.join(VARIANTS)}")
    extra = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            extra[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            extra[key] = value  # a plain string
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        raise UsageError(f"--seeds {args.seeds!r}: give a comma list of integers, e.g. 0,1,2") from None
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    jobs = [(v, s) for v in variants for s in seeds]
    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        done = list(
            pool.map(lambda vs: (vs[0], run_one(args.out, vs[0], vs[1], args.epochs, args.reward, extra)), jobs)
        )
    results = {}
    for variant, summary in done:
        results.setdefault(variant, []).append(summary)
    print(report(results, args.every))


if __name__ == "__main__":
    sys.exit(main())
