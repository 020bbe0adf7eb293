"""Base numbers of an image-to-image model: PSNR / SSIM per degradation level, edit accuracy per edit type.

    python -m worlds.shapes_i2i measure [--model DIR | --run PRETRAIN_OUT] [--per_group 48] [--steps 20]
                                        [--text 4.5] [--image 2.5] [--json OUT]

Deterministic samples (DDIM η = 0, ``--steps`` steps, seeds of :func:`ddpo_grpo.evaluation.image_seed`) of the
shipped *test* rows, scored by the ``shapes_i2i`` reward: restoration rows grouped by ``degradation_name``
(``--per_group`` each, the held-out level included), editing rows by edit type. The copy-the-input baseline
(the source image itself as the output) is printed beside them. ``--run`` evaluates the EMA weights of the
newest checkpoint of a pretraining run in progress (:mod:`.pretrain`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

EDIT_COLUMNS = ("strict", "partial", "preservation", "success")


def pipeline_of_run(out_dir: str):
    """The EMA pipeline of the newest checkpoint of a pretraining run in ``out_dir``."""
    from ddpo_grpo.checkpoint import load_checkpoint

    from .pretrain import IP2PConfig, IP2PRecipe

    ck = load_checkpoint(out_dir)
    cfg = IP2PConfig.from_dict(IP2PConfig.filled(ck["state"]["config"]))
    recipe = IP2PRecipe(cfg)
    for name, module in recipe.models.items():
        module.load_state_dict(ck["tensors"][name])
        ema = ck["tensors"].get(f"ema_{name}")
        if ema is not None:
            params = dict(module.named_parameters())
            with torch.no_grad():
                for key, value in ema.items():  # the EMA of the trained parameters, by parameter name
                    params[key].copy_(value)
    print(f"evaluating {ck['path']} (EMA weights)")
    return recipe.pipeline()


def measure(pipe, *, per_group: int = 48, steps: int = 20, text: float = 4.5, image: float = 2.5) -> dict:
    """``{"restore": {degradation: {psnr, ssim, copy_psnr, copy_ssim}}, "edit": {type: {metric: mean}}}``."""
    from ddpo_grpo.evaluation import eval_items, evaluate, score
    from ddpo_grpo.policies import build_policy

    from .data import edit_test, restore_test
    from .reward import shapes_i2i

    policy = build_policy(pipe, resolution=64, image_guidance_scale=image)
    reward = shapes_i2i()
    out: dict = {"settings": {"per_group": per_group, "steps": steps, "text": text, "image": image}}
    for world, rows, group_by, names in (
        ("restore", restore_test(), "degradation_name", ("psnr", "ssim")),
        ("edit", edit_test(), "group", EDIT_COLUMNS),
    ):
        metrics, _, _ = evaluate(
            policy, rows, reward, num_steps=steps, guidance_scale=text, per_group=per_group, group_by=group_by, seed=0
        )
        items = eval_items(rows, per_group=per_group, group_by=group_by)
        chosen = [rows[i] for i, _ in items]
        copies = torch.from_numpy(np.stack([r["source_image"] for r in chosen])).float() / 255
        copy = score(copies, chosen, reward, group_by)
        table = {}
        for group in dict.fromkeys(r[group_by] for r in chosen):
            table[group] = {n: metrics.get(f"eval/{n}/{group}", math.nan) for n in names}
            table[group].update({f"copy_{n}": copy.get(f"eval/{n}/{group}", math.nan) for n in names})
        out[world] = table
    return out


def format_tables(result: dict) -> str:
    lines = ["| degradation | PSNR (dB) | SSIM | copy PSNR | copy SSIM |", "|---|---|---|---|---|"]
    for g, v in result["restore"].items():
        lines.append(f"| {g} | {v['psnr']:.2f} | {v['ssim']:.3f} | {v['copy_psnr']:.2f} | {v['copy_ssim']:.3f} |")
    lines += ["", "| edit | strict | partial | preservation | success | copy success |", "|---|---|---|---|---|---|"]
    for g, v in result["edit"].items():
        lines.append(
            f"| {g} | {v['strict']:.2f} | {v['partial']:.2f} | {v['preservation']:.2f} | {v['success']:.2f} "
            f"| {v['copy_success']:.2f} |"
        )
    return "\n".join(lines)
