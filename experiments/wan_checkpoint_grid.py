"""Wan's σ grid: the deterministic rollout against the plain UniPC pipeline the checkpoints ship.

    python experiments/wan_checkpoint_grid.py                # 4, 10 and 20 steps
    python experiments/wan_checkpoint_grid.py --steps 20

On the tiny Wan (``ddpo_grpo.tiny.build_tiny_wan``) with the Wan 2.1 checkpoint's scheduler as shipped (UniPC,
flow sigmas, flow_shift 3), two prompts, CFG 4.5, noise level 0, per step count:
* the policy's σ grid against UniPC's ``set_timesteps`` (equal?, last nonzero σ, largest gap);
* the final latent against the plain UniPC pipeline's from the same noise (max |Δ|, ‖Δ‖ / ‖latent‖) and the decoded
  video's max |Δ|, for the policy (UniPC's grid) and for FlowMatchEuler with shift = flow_shift (the same weights
  built with ``scheduler="euler"``: what the adapter sampled before);
* what the gap is made of: FlowMatchEuler on UniPC's grid with t = 1000·σ (the policy's sampler, = the kit's
  reference) and with UniPC's int(1000·σ) timesteps, each against UniPC.

Result: docs/experiments/2026-11-27-wan-grid-guidance-experts.md §1.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

ROWS = [{"prompt": "a red circle"}, {"prompt": "two blue squares"}]
SETTINGS = dict(resolution=32, num_frames=5, max_sequence_length=64)


def _gap(a: torch.Tensor, b: torch.Tensor) -> str:
    return f"max |Δ| {float((a - b).abs().max()):.2e}, rel {float((a - b).norm() / b.norm()):.2e}"


def main() -> None:
    from diffusers import FlowMatchEulerDiscreteScheduler

    from ddpo_grpo.policies import build_policy, load_pipeline
    from ddpo_grpo.rollout import sample_rollout
    from ddpo_grpo.tiny import build_tiny_wan

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", default="4,10,20")
    args = parser.parse_args()
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="wan_grid_"))
    build_tiny_wan(root / "unipc")
    build_tiny_wan(root / "euler", scheduler="euler")
    policies = {k: build_policy(load_pipeline(str(root / k)), **SETTINGS) for k in ("unipc", "euler")}
    pipe = policies["unipc"].pipeline
    for steps in (int(s) for s in args.steps.split(",")):
        runs = {
            k: sample_rollout(p, p.denoiser, ROWS, seeds=[0, 1], num_steps=steps, guidance_scale=4.5, noise_level=0)
            for k, p in policies.items()
        }
        kwargs = policies["unipc"].pipeline_kwargs(ROWS, runs["unipc"].latents[:, 0].clone(), 4.5, "")
        latent = pipe(num_inference_steps=steps, output_type="latent", return_dict=False, **kwargs)[0].float()
        video = pipe(num_inference_steps=steps, output_type="pt", return_dict=False, **kwargs)[0].float()
        unipc = pipe.scheduler.sigmas.float()  # [T + 1], after the call's set_timesteps
        for kind, r in runs.items():
            sigmas = torch.cat([r.kernel_args["sigma"][0], r.kernel_args["sigma_next"][0, -1:]])
            print(
                f"T={steps:2d} {kind:5s} grid: equal {torch.equal(sigmas, unipc)}, last nonzero σ "
                f"{float(sigmas[-2]):.4f} (UniPC {float(unipc[-2]):.4f}), largest gap {float((sigmas - unipc).abs().max()):.3f}; "
                f"final latent {_gap(r.latents[:, -1], latent)}; video max |Δ| {float((r.samples - video).abs().max()):.2e}"
            )
        grid = policies["unipc"].sampling_sigmas
        euler_t = {}
        for name, as_int in (("t = 1000·σ", False), ("t = int(1000·σ)", True)):
            sched = FlowMatchEulerDiscreteScheduler(shift=1.0)
            sigmas = grid(steps)[:-1]
            t = (sigmas.double() * 1000).long().float() if as_int else sigmas * 1000
            sched.set_timesteps(steps, sigmas=sigmas.numpy(), timesteps=t.numpy())
            sched.set_timesteps = lambda *a, _s=sched, **k: None  # keep this grid through the call
            shipped, pipe.scheduler = pipe.scheduler, sched
            try:
                euler_t[name] = pipe(num_inference_steps=steps, output_type="latent", return_dict=False, **kwargs)[0]
            finally:
                pipe.scheduler = shipped
            print(f"T={steps:2d} Euler on UniPC's grid, {name}: against UniPC {_gap(euler_t[name].float(), latent)}")
        print(
            f"T={steps:2d} rollout against Euler on UniPC's grid (t = 1000·σ): {_gap(runs['unipc'].latents[:, -1], euler_t['t = 1000·σ'].float())}"
        )


if __name__ == "__main__":
    main()
