r"""Recipe: the ShapesWorld InstructPix2Pix model, fine-tuned from the shipped SD model on the core pretraining loop.

The result is a plain diffusers ``StableDiffusionInstructPix2PixPipeline`` directory (:mod:`ddpo_grpo.policies.ip2p`),
shipped as ``worlds/shapes_i2i/models/ip2p``. It starts from the shipped ShapesWorld SD pipeline (``cfg.base``):

* ``vae`` — copied and frozen (scaling factor and weights unchanged);
* ``tokenizer`` — the base's word tokenizer plus the instruction words, old ids unchanged (:mod:`.tokenizer`);
* ``text_encoder`` — the base's, its embedding table grown by the new tokens (mean + small noise), trained at
  ``text_lr_ratio · lr``;
* ``unet`` — the base UNet with ``in_channels`` doubled: every weight loaded from the base
  (:func:`ddpo_grpo.checkpoint.load_state_dict_checked` with ``strict=False`` reports ``conv_in.weight`` as the
  one shape mismatch), ``conv_in`` keeping the base's kernels for the noisy latent and zeros for the source
  latent, so training starts from the text-to-image model (Brooks et al. 2023, §3.2).

Objective (one stage, ``ip2p``; the base's DDPM schedule, ε-prediction), per example (source s, target x,
instruction c):

    z₀ = scale · E(2x − 1) (posterior sample)     s_lat = E(2s − 1).mode()  (unscaled, as the pipeline)
    t ~ U{0, …, 999}, ε ~ N(0, I),  z_t = √ᾱ_t z₀ + √(1 − ᾱ_t) ε
    condition dropout (p = cond_dropout, Brooks et al.'s 5 %): r ~ U(0, 1); r < p: c = ""; p ≤ r < 2p: c = ""
    and s_lat = 0; 2p ≤ r < 3p: s_lat = 0 — so both guidance branches (image only, none) are trained
    L = ‖ε_θ([z_t, s_lat], t, c) − ε‖²

Data: :class:`.stream.I2IStream` (restorations and edits by the *train* rules only), ``batch_size /
noise_per_example`` examples per step, each with ``noise_per_example`` independent (t, ε) draws. Evaluation (the core
loop's): deterministic DDIM on the shipped *test* rows of both worlds, scored by the ``shapes_i2i`` reward,
grouped by degradation kind / edit type (``quality`` = SSIM / edit success).

    nohup nice env OMP_NUM_THREADS=1 .venv/bin/python -m worlds.shapes_i2i pretrain --out /tmp/i2i --threads 1 \
        > /tmp/i2i.log 2>&1 &
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from ddpo_grpo.pretraining import PretrainConfig, Recipe, denoiser_stage
from worlds.shapes import SHAPES_SD
from worlds.shapes.world import CANVAS

from .stream import I2IStream


@dataclass
class IP2PConfig(PretrainConfig):
    """Every setting of the image-to-image pretraining run (saved in each checkpoint; ``--resume`` reuses it)."""

    base: str = SHAPES_SD  # StableDiffusionPipeline dir: its vae, tokenizer, text encoder and UNet are the start
    restore_fraction: float = 0.5  # share of restoration examples (the rest are edits)
    noise_per_example: int = 2  # latents per example in a batch (VAE encoding is half a step's cost)
    text_lr_ratio: float = 0.25  # text-encoder lr = text_lr_ratio * lr (the new instruction tokens must be learned)
    eval_image_guidance: float = 1.5  # s_I of the evaluations (s_T is eval_guidance)
    steps: int = 3000
    lr: float = 4e-4
    cond_dropout: float = 0.05  # each of: instruction dropped, both dropped, image dropped
    eval_every: int = 0
    final_eval_per_task: int = 24  # samples per group (4 degradation kinds + 4 edit types)

    RESUME_MUTABLE: ClassVar[tuple[str, ...]] = ("steps", *PretrainConfig.RESUME_MUTABLE)
    TINY: ClassVar[dict] = dict(PretrainConfig.TINY, steps=2, final_eval_per_task=1, noise_per_example=2)

    def validate(self) -> None:
        super().validate()
        if not 0.0 <= self.restore_fraction <= 1.0:
            raise ValueError(f"restore_fraction must be in [0, 1]; got {self.restore_fraction}")
        if self.cond_dropout * 3 > 1.0:
            raise ValueError(f"cond_dropout={self.cond_dropout}: three dropout cases of this probability need ≤ 1/3")
        if self.text_lr_ratio < 0:
            raise ValueError(f"text_lr_ratio must be >= 0 (0 freezes the text encoder); got {self.text_lr_ratio}")
        if self.noise_per_example < 1 or self.batch_size % self.noise_per_example:
            raise ValueError(
                f"batch_size={self.batch_size} must be a multiple of noise_per_example={self.noise_per_example} >= 1"
            )
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1; got {self.steps}")
        if self.eval_image_guidance < 1:
            raise ValueError(f"eval_image_guidance must be >= 1; got {self.eval_image_guidance}")


def widen_unet(base_unet, in_channels: int):
    """A copy of ``base_unet`` taking ``in_channels`` inputs: the base's weights, ``conv_in`` zero on new channels."""
    from diffusers import UNet2DConditionModel

    from ddpo_grpo.checkpoint import load_state_dict_checked

    unet = UNet2DConditionModel.from_config({**base_unet.config, "in_channels": in_channels})
    report = load_state_dict_checked(unet, base_unet.state_dict(), strict=False, source="the base UNet")
    if report["missing"] or report["unexpected"] or [k for k, _, _ in report["mismatched"]] != ["conv_in.weight"]:
        raise ValueError(f"widen_unet: the base UNet differs beyond conv_in: {report}")
    old = base_unet.conv_in.weight.detach()  # [O, C, k, k]
    with torch.no_grad():
        unet.conv_in.weight.zero_()
        unet.conv_in.weight[:, : old.shape[1]].copy_(old)
    return unet


class IP2PRecipe(Recipe):
    """The module docstring's recipe."""

    config_class = IP2PConfig
    eval_group_by = "group"
    eval_metric = "quality"

    def __init__(self, cfg: IP2PConfig):
        from diffusers import StableDiffusionPipeline

        from .tokenizer import extend_text_encoder, extended_tokenizer

        cfg.validate()
        self.cfg = cfg
        base = StableDiffusionPipeline.from_pretrained(cfg.base, safety_checker=None, requires_safety_checker=False)
        self.scheduler_config = dict(base.scheduler.config)
        self.tokenizer = extended_tokenizer(base.tokenizer)
        torch.manual_seed(cfg.seed)
        text_encoder = extend_text_encoder(base.text_encoder, len(self.tokenizer), seed=cfg.seed)
        text_encoder.requires_grad_(cfg.text_lr_ratio > 0)
        vae = base.vae.requires_grad_(False).eval()
        unet = widen_unet(base.unet, 2 * vae.config.latent_channels)
        self.models = {"vae": vae, "text_encoder": text_encoder, "unet": unet}
        self.stages = [denoiser_stage("ip2p", cfg, "unet")]
        self.ema_modules = self.stages[0].modules
        self.alphas_cumprod = base.scheduler.alphas_cumprod.float()  # [T]
        self.num_train_timesteps = len(self.alphas_cumprod)

    def make_data(self) -> I2IStream:
        return I2IStream(self.cfg.seed, self.cfg.restore_fraction)

    def loss(self, stage: str, data: I2IStream) -> dict[str, torch.Tensor]:
        """The module docstring's objective on one batch; also the loss of each task."""
        cfg, m, g = self.cfg, self.models, data.gen
        k = cfg.noise_per_example
        src, tgt, prompts, tasks = data.batch(cfg.batch_size // k)  # [B / k, 3, 64, 64] twice
        vae = m["vae"]
        with torch.no_grad():
            z0 = vae.encode(2 * tgt - 1).latent_dist.sample(generator=g) * vae.config.scaling_factor  # [B/k, 4, h, w]
            s_lat = vae.encode(2 * src - 1).latent_dist.mode()  # [B/k, 4, h, w], unscaled
        z0, s_lat = z0.repeat_interleave(k, 0), s_lat.repeat_interleave(k, 0)  # [B, 4, h, w]: k noises per example
        prompts, tasks = [p for p in prompts for _ in range(k)], [x for x in tasks for _ in range(k)]
        b = len(prompts)
        r, p = torch.rand(b, generator=g), cfg.cond_dropout
        drop_text, drop_image = r < 2 * p, (r >= p) & (r < 3 * p)
        prompts = ["" if d else c for c, d in zip(prompts, drop_text.tolist())]
        s_lat = s_lat * (~drop_image).float().view(b, 1, 1, 1)
        t = torch.randint(0, self.num_train_timesteps, (b,), generator=g)
        eps = torch.randn(z0.shape, generator=g)
        ab = self.alphas_cumprod[t].view(b, 1, 1, 1)
        zt = ab.sqrt() * z0 + (1 - ab).sqrt() * eps
        ids = self.tokenizer(
            prompts,
            padding="max_length",
            max_length=self.tokenizer.model_max_length,
            truncation=True,
            return_tensors="pt",
        ).input_ids
        cond = m["text_encoder"](ids)[0]  # [B, L, H]
        pred = m["unet"](torch.cat([zt, s_lat], dim=1), t, encoder_hidden_states=cond, return_dict=False)[0]
        per = F.mse_loss(pred, eps, reduction="none").flatten(1).mean(1)  # [B]
        restore = torch.as_tensor([x == "restore" for x in tasks])
        out = {"loss": per.mean()}
        for name, mask in (("loss_restore", restore), ("loss_edit", ~restore)):
            out[name] = per[mask].mean().detach() if mask.any() else per.new_zeros(())
        return out

    def pipeline(self):
        from diffusers import DDIMScheduler, StableDiffusionInstructPix2PixPipeline

        m = self.models
        pipe = StableDiffusionInstructPix2PixPipeline(
            vae=m["vae"],
            text_encoder=m["text_encoder"],
            tokenizer=self.tokenizer,
            unet=m["unet"],
            scheduler=DDIMScheduler.from_config(self.scheduler_config),
            safety_checker=None,
            feature_extractor=None,
            requires_safety_checker=False,
        )
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def eval_rows(self) -> list[dict]:
        from .data import i2i_test

        return i2i_test()

    def eval_reward(self):
        from .reward import shapes_i2i

        return shapes_i2i()

    def policy_options(self) -> dict:
        return {"resolution": CANVAS, "image_guidance_scale": self.cfg.eval_image_guidance}


RECIPE = IP2PRecipe
