"""Fingerprints of short training runs, to show a refactor changes no output.

Measures: for each recipe kind (a family's tiny pipeline, each objective, each kernel, image conditioning,
supervised mixing, the generic denoiser), a 2-epoch run at a fixed seed, hashed two ways: the metrics rows
(every key but timings and memory, values rounded to 8 significant digits; the rows differ when any reward,
advantage, loss or log-prob does) and the trained weights' names and values in ``final/``. Writes one JSON object
name -> {"metrics": sha, "weights": sha} to ``--out`` (default stdout) and, with ``--against FILE``, prints
which kinds differ from an earlier run. The result of each refactor lives in its lab-notebook entry.

    python experiments/fingerprints.py --out /tmp/before.json
    python experiments/fingerprints.py --against /tmp/before.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: keys whose values vary between identical runs (clocks, memory, throughput)
VOLATILE = ("perf/", "mem/", "time", "eta")


def _tiny(family: str, **kw):
    from config.tiny import tiny_family

    return tiny_family(family, **kw)


def _objective(objective: str):
    def build():
        config = _tiny("sd3")
        config.train.objective = objective
        return config

    return build


def _kernel(kernel: str, family: str):
    def build():
        config = _tiny(family)
        config.sample.kernel = kernel
        return config

    return build


def _family(family: str, **kw):
    return lambda: _tiny(family, **kw)


def _supervised():
    config = _tiny("ip2p", image_conditioned=True)
    config.prompts.source = "shapes_restore_train"
    config.train.sup_weight, config.train.consistency_weight, config.train.degradation = 0.5, 0.1, "row"
    return config


def _staged():
    """One supervised-only epoch, one hand-over epoch, then GRPO (the staged schedule)."""
    config = _supervised()
    config.num_epochs = 3
    t = config.train
    t.sup_weight, t.sup_schedule, t.sup_warmup_epochs, t.sup_ramp_epochs, t.sup_floor = 1.0, "staged", 1, 1, 0.25
    return config


def _inner_epochs():
    """Three inner epochs stopped early by the KL threshold, a KL term, EMA, buffer advantages, sum_norm."""
    config = _tiny("sd3")
    t = config.train
    t.num_inner_epochs, t.kl_threshold, t.beta, t.ema = 3, 1e-9, 0.01, True
    t.adv_mode, t.adv_min_count, t.loss_aggregation = "buffer", 1, "sum_norm"
    return config


def _lagging():
    """DiffusionNFT with a lagging sampler and two inner epochs."""
    config = _objective("nft")()
    config.train.sampler_decay_rate, config.train.num_inner_epochs = 0.5, 2
    return config


def _denoiser():
    from config.motion import motion_tiny

    config = motion_tiny()
    config.num_epochs = 2
    return config


KINDS = {
    "sd_ddim": _family("sd"),
    "sd_ddpm": _kernel("ddpm", "sd"),
    "sdxl": _family("sdxl"),
    "sd3_grpo": _family("sd3"),
    "sd3_dance": _kernel("dance", "sd3"),
    "sd3_cps": _kernel("cps", "sd3"),
    "sd3_awm": _objective("awm"),
    "sd3_nft": _objective("nft"),
    "sd3_rwr": _objective("rwr"),
    "flux": _family("flux"),
    "kontext": _family("kontext", image_conditioned=True),
    "qwen_image": _family("qwen_image"),
    "qwen_image_edit": _family("qwen_image_edit", image_conditioned=True),
    "zimage": _family("zimage"),
    "wan": _family("wan", video=True),
    "wan_i2v": _family("wan_i2v", image_conditioned=True, video=True),
    "ip2p_edit": _family("ip2p", image_conditioned=True),
    "ip2p_supervised": _supervised,
    "qwen_image_edit_plus": _family("qwen_image_edit_plus", image_conditioned=True),
    "motion_denoiser": _denoiser,
    "staged_schedule": _staged,
    "inner_epochs_kl_stop": _inner_epochs,
    "nft_lagging_sampler": _lagging,
}


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def _rounded(value):
    return float(f"{value:.8g}") if isinstance(value, float) else value


def fingerprint(name: str, root: Path) -> dict:
    from safetensors.torch import load_file

    from ddpo_grpo.trainer import Trainer

    config = KINDS[name]()
    config.logdir, config.run_name, config.seed = str(root), name, 0
    config.logging.progress, config.logging.tracker, config.logging.image_freq = False, "none", 0
    Trainer(config).run()
    run = root / name
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows = [{k: _rounded(v) for k, v in r.items() if not any(t in k for t in VOLATILE)} for r in rows]
    weights = hashlib.sha256()  # tensor names and values; the files' metadata (paths, dates) is left out
    for path in sorted((run / "final").rglob("*.safetensors")):
        tensors = load_file(path)
        for key in sorted(tensors):
            weights.update(key.encode() + tensors[key].float().contiguous().numpy().tobytes())
    return {"metrics": _digest(rows), "weights": weights.hexdigest()[:16]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="", help="write the fingerprints here (JSON); default stdout")
    parser.add_argument("--against", default="", help="an earlier --out file to compare with")
    parser.add_argument("--only", default="", help="comma-separated kinds (default: all): " + ",".join(KINDS))
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(KINDS)
    unknown = sorted(set(names) - set(KINDS))
    if unknown:
        parser.error(f"--only: unknown kinds {unknown}; kinds: {', '.join(KINDS)}")
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            try:
                result[name] = fingerprint(name, Path(tmp))
            except Exception as exc:  # a kind that fails is reported, not hidden
                result[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            print(name, result[name], file=sys.stderr, flush=True)
    text = json.dumps(result, indent=1, sort_keys=True)
    if args.out:
        Path(args.out).write_text(text + "\n")
    else:
        print(text)
    if args.against:
        before = json.loads(Path(args.against).read_text())
        differ = [n for n in names if before.get(n) != result[n]]
        print("identical:" if not differ else "differ:", ", ".join(differ or names))
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
