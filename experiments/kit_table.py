"""The adapter test kit's figures for every registered family, in both modes, as a markdown table (docs/models.md).

    OMP_NUM_THREADS=1 python experiments/kit_table.py [--only flux,wan] [--tiny-only]

Rows: each family's tiny pipeline (float32) and each of its checkpoints' real-config builds (in float32, and in the
recipe's dtype, cast and autocast as a run does). Columns, measured by the kit's own functions (tests/adapter_kit.py)
at 32 px, 3 steps, 5 frames for video:

    rollout vs pipeline   noise level 0, the worst over CFG off and on (3.0): max |Δ| of the decoded samples in float32;
                          max |Δ| / max |pipeline| of the final latents in bf16 / fp16 (``adapter_kit.gap``)
    logp mismatch         max |recomputed − stored| log-prob in another minibatch, the worst over CFG off and on
    LoRA Δ / reload       how far a random LoRA moves the policy, and how far its export reloaded in plain diffusers is
                          from the policy (the same measure as the rollout column)
    σ grid                real configs: the rollout's σ grid against the one the plain pipeline sets on the shipped
                          scheduler at the recipe's training steps, relative (the kit's check 10)

Bounds the kit asserts: 1e-5 (float32 rollout), 1e-4 (logp, float32 reload), 8·2⁻⁸ in bf16 (``adapter_kit.TOLERANCE``).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
from pathlib import Path

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ddpo_grpo.policies import build_policy, families, load_pipeline  # noqa: E402
from tests import adapter_kit as kit  # noqa: E402

LABELS = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def tiny_policy(root: Path, family: str, **overrides):
    return build_policy(load_pipeline(kit.family_dir(root, family)), **kit.settings(family, **overrides))


def _rows_for(family: str) -> int:
    return 1 if families()[family].image_conditioned else 2


def measure(make, n: int, root: Path, tag: str, grid_steps: int | None = None) -> dict:
    """The table's figures for the policies ``make()`` returns (a fresh one each call). The editing families compare with
    CFG on, their sources sized by the pipeline's rule at the kit's small area (``adapter_kit.pipeline_sources_as``)."""
    policy = make()
    if type(policy.pipeline).__name__ in kit.EDIT_FAMILIES:  # (their pipelines take one prompt per call)
        rollout = kit.rollout_gap(policy, n, 3.0)
    else:
        rollout = max(kit.rollout_gap(policy, n, g) for g in (1.0, 3.0))
    logp = max(kit.logp_mismatch(policy, n + 1, g) for g in (1.0, 3.0))
    scale = 0.1 if kit.policy_dtype(policy) == torch.float32 else 0.5
    change, reload = kit.lora_reload(make(), make, root / f"lora_{tag}", n, scale=scale)
    grid = kit.grid_gap(policy, kit.rows(n), grid_steps) if grid_steps else None
    return dict(rollout=rollout, logp=logp, change=change, reload=reload, grid=grid)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default="", help="comma list of family names (pretrained.tiny names)")
    parser.add_argument("--tiny-only", action="store_true", help="skip the real-config rows")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    only = {n for n in args.only.split(",") if n}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for pipeline, spec in families().items():
            if only and spec.name not in only:
                continue
            n = _rows_for(pipeline)
            tiny = functools.partial(tiny_policy, root, pipeline)
            rows.append((spec.name, "tiny", "fp32", measure(tiny, n, root, f"{spec.name}_tiny")))
            print(rows[-1], flush=True)
            for checkpoint in () if args.tiny_only else spec.checkpoints:
                steps = int(checkpoint.recipe_config().sample.num_steps)
                for dtype in dict.fromkeys((torch.float32, kit.recipe_dtype(pipeline, checkpoint.directory))):
                    make = functools.partial(kit.real_policy, root, pipeline, checkpoint.directory, dtype)
                    tag = f"{checkpoint.directory}_{LABELS[dtype]}"
                    figures = measure(make, n, root, tag, steps if dtype == torch.float32 else None)
                    rows.append((spec.name, checkpoint.directory, LABELS[dtype], figures))
                    print(rows[-1], flush=True)
    print("\n| family | build | dtype | rollout vs pipeline | logp mismatch | LoRA Δ | LoRA reload | σ grid |")
    print("|---|---|---|---|---|---|---|---|")
    for name, build, dtype, f in rows:
        grid = "–" if f["grid"] is None else f"{f['grid']:.1e}"
        print(
            f"| {name} | {build} | {dtype} | {f['rollout']:.1e} | {f['logp']:.1e} | {f['change']:.1e} | "
            f"{f['reload']:.1e} | {grid} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
