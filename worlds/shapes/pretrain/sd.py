"""Recipe: the ShapesWorld model in the SD (1.x/2.x) architecture, a UNet on the SD3 model's VAE and text encoder.

The result is a plain diffusers ``StableDiffusionPipeline`` directory (``UNet2DConditionModel`` +
``DDIMScheduler``, one ``CLIPTextModel``, no safety checker) for the DDPO path
(:mod:`ddpo_grpo.policies.sd`). It starts from a ShapesWorld SD3 pipeline (``cfg.base``, by default
the shipped :data:`worlds.shapes.SHAPES_SD3`, trained by :mod:`.sd3`):

* ``vae`` — copied and **frozen**, weights bit-identical (both models decode with the same VAE);
* ``tokenizer`` — copied (word-level CLIP BPE: one token per grammar word, ``model_max_length = 16``);
* ``text_encoder`` — a ``CLIPTextModel`` initialised from the *first* ``text_layers`` (= 2) layers of
  the SD3 model's ``text_encoder`` (its ``text_model.*`` weights; ``text_projection`` and the later
  layers dropped), then trained jointly with the UNet at ``text_lr_ratio · lr`` (0 freezes it).
  ``StableDiffusionPipeline.encode_prompt`` (``clip_skip=None``) conditions on ``last_hidden_state``
  = ``final_layer_norm(h_L)`` of the last layer, while the SD3 transformer was trained on the
  *penultimate* states ``h_2`` of its 3-layer encoders. Keeping 2 layers therefore hands the UNet
  exactly the features SD3 learned to read, up to the final LayerNorm (a per-token normalisation
  and a per-channel affine map); the third layer had only been trained through the pooled EOS
  output, which SD does not use. The lower learning rate keeps those pretrained bindings while
  letting the encoder adapt to the new reader;
* ``unet`` — a small ``UNet2DConditionModel`` trained from scratch (below).

Latent space: scale, and no shift
---------------------------------
The SD3 pipeline decodes ``x = D(z / s + shift)`` (``shift_factor`` −0.666, ``scaling_factor`` 0.490
for the shipped VAE: its raw latents have mean −0.666 and std 2.04). ``StableDiffusionPipeline``
decodes with ``vae.decode(latents / scaling_factor)`` and **ignores** ``shift_factor`` (so does
``SDPolicy.decode``), so an SD model's latent space must be ``z = s · E(x)`` with no shift at all.
We therefore keep the VAE weights unchanged, save its config with ``shift_factor = None`` (so code
following SD3's ``z / s + (shift or 0)`` convention decodes these latents correctly too) and
re-measure the scale on ``latent_stats_images`` fresh renders (posterior samples ``E(x)``)::

    s = 1 / sqrt(mean(E(x)²))                              # RMS, not std: the mean stays in z

so that ``E[z₀²] = 1``. The second moment, not the variance, is what the forward process mixes with
the noise: ``E‖√ᾱ z₀‖² / E‖√(1−ᾱ) ε‖² = ᾱ E[z₀²] / (1−ᾱ)``, so with ``E[z₀²] = 1`` the schedule's
nominal SNR ``ᾱ/(1−ᾱ)`` is the actual one and ``z_t`` has unit RMS at every ``t``. The non-zero
mean (≈ −0.3 in these units) is part of the data the UNet learns; at ``t = T`` the schedule keeps
only ``√ᾱ_T ≈ 0.07`` of it (≈ 0.02 against unit noise), so starting DDIM from ``N(0, I)`` is
consistent. (Folding the shift into the VAE's ``quant_conv`` / ``post_quant_conv`` biases would
also work, but would make it a different VAE file than the SD3 model's for no gain.)

Objective (DDPM, Ho et al. 2020, eqs. 4 and 14), VAE frozen: the one stage, ``ddpm``
-----------------------------------------------------------------------------------
::

    z₀  = s · E(x)                                 # [B, 4, 16, 16], posterior sample
    t   ~ U{0, …, T−1},  ε ~ N(0, I)               # T = 1000
    ᾱ_t = Π_{i≤t} (1 − β_i)
    z_t = √ᾱ_t · z₀ + √(1 − ᾱ_t) · ε                # q(z_t | z₀), eq. 4
    c   = text_encoder(tokens(prompt)).last_hidden_state   # [B, 16, 64]; prompt → "" w.p. cond_dropout
    L   = ‖ ε_θ(z_t, t, c) − ε ‖²  (mean)          # L_simple, eq. 14

``prediction_type = "v_prediction"`` instead regresses ``v = √ᾱ_t ε − √(1−ᾱ_t) z₀`` (Salimans & Ho
2022, §4); both are what ``DDIMScheduler`` and :func:`ddpo_grpo.kernels.ddim_step` invert (epsilon is
the default and the one trained here). The 10 % empty prompts ``""`` are the pipeline's negative
prompt, so classifier-free guidance ``ε_u + w (ε_c − ε_u)`` works.

Noise schedule: SD's ``scaled_linear`` betas, ``β_t = (√β₀ + t/(T−1) (√β₁ − √β₀))²`` with
``β₀ = 0.00085``, ``β₁ = 0.012``, ``T = 1000``: ``ᾱ`` runs from 0.99915 (log-SNR +7.1) to 0.0047
(log-SNR −5.4). Why keep it for a 16×16×4 latent: resolution-dependent shifts (SD3 §5.3.2, Hoogeboom
et al. 2023) make schedules *noisier* for *more* latent pixels, because a larger latent lets more
signal survive a given SNR; our latent (1024 numbers) is 16× smaller than SD 1.5's, so SD's
schedule is, if anything, already on the noisy side at the top and gives the fine, low-noise steps
that decide hard shape edges plenty of training weight. Its known flaw, a non-zero terminal SNR
(Lin et al. 2024) that leaks the image's mean brightness, does not matter here: every ShapesWorld
image is at least two-thirds white background (at most four objects of ≤ 18×18 px on 64×64). It is
also the schedule the DDPO configs and :func:`ddpo_grpo.tiny.build_tiny_sd` use, with epsilon
prediction, so nothing in the SD policy changes.

Saved scheduler: ``DDIMScheduler`` with that schedule, ``clip_sample=False`` (latents are not
bounded by ±1: clipping x̂₀ would distort them), ``set_alpha_to_one=False`` and ``steps_offset=1``
(SD 1.x's settings: the last DDIM step lands on ᾱ₀ = 0.99915), ``timestep_spacing="leading"``.
``SDPolicy`` rebuilds exactly this scheduler from the config and reads ``prediction_type`` from it.

UNet (``unet_*`` fields): ``block_out_channels = (32, 64, 64)``, one ResNet layer per block, a plain
``DownBlock2D`` at 16×16 and cross-attention blocks (self- and cross-attention to the prompt) at 8×8
and 4×4 plus the cross-attention mid block; 8 heads (diffusers' ``attention_head_dim``, which
``UNet2DConditionModel`` uses as the head *count*). 1.69 M parameters (6.8 MB float32). Attention at
16×16 (256 tokens) tripled the step time on one CPU thread (0.74 s vs 0.23 s for a batch of 32) for
little gain: at 8×8 self-attention already spans the whole canvas, which the position task needs.
Load the result with ``StableDiffusionPipeline.from_pretrained(dir)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F

from ddpo_grpo.pretraining import denoiser_stage
from worlds.shapes import SHAPES_SD3
from worlds.shapes.pretrain.base import ShapesRecipe
from worlds.shapes.pretrain.config import ShapesConfig
from worlds.shapes.pretrain.data import TrainingData
from worlds.shapes.world import CANVAS

PREDICTION_TYPES = ("epsilon", "v_prediction")


@dataclass
class SDConfig(ShapesConfig):
    """Every setting of an SD-architecture pretraining run (saved in each checkpoint; ``--resume`` reuses it)."""

    base: str = SHAPES_SD3  # StableDiffusion3Pipeline dir whose vae/, tokenizer/ and text_encoder/ are reused
    # ---- text encoder (CLIPTextModel from the base's text_encoder) ----
    text_layers: int = 2  # first layers kept: last_hidden_state = final_layer_norm(SD3's penultimate states)
    text_lr_ratio: float = 0.25  # text-encoder lr = text_lr_ratio * lr; 0 freezes it
    # ---- UNet2DConditionModel ----
    unet_channels: tuple[int, ...] = (32, 64, 64)  # block_out_channels; len-1 downsamples (16 -> 8 -> 4)
    unet_attention: tuple[int, ...] = (0, 1, 1)  # per level: 1 = CrossAttn block (self+cross attention), 0 = ResNet
    unet_layers_per_block: int = 1
    unet_heads: int = 8  # heads per attention layer (diffusers' attention_head_dim, a head *count* in this class)
    unet_norm_groups: int = 8
    # ---- noise schedule (DDIMScheduler) ----
    num_train_timesteps: int = 1000
    beta_schedule: str = "scaled_linear"
    beta_start: float = 0.00085
    beta_end: float = 0.012
    prediction_type: str = "epsilon"  # or "v_prediction"
    # ---- training (batch_size, lr, ... above) ----
    steps: int = 7000  # ≈ 40 min on one CPU thread (3.15 steps/s with another job on the second core)
    eval_every: int = 1000

    RESUME_MUTABLE: ClassVar[tuple[str, ...]] = ("steps", *ShapesConfig.RESUME_MUTABLE)
    TINY: ClassVar[dict] = dict(
        ShapesConfig.TINY, unet_channels=(8, 16), unet_attention=(0, 1), unet_heads=2, unet_norm_groups=4, steps=3
    )

    def validate(self) -> None:
        super().validate()
        if len(self.unet_attention) != len(self.unet_channels) or set(self.unet_attention) - {0, 1}:
            raise ValueError(
                f"unet_attention needs one 0/1 flag per level of unet_channels {self.unet_channels}; "
                f"got {self.unet_attention}"
            )
        for c, a in zip(self.unet_channels, self.unet_attention):
            if c % self.unet_norm_groups or (a and c % self.unet_heads):
                raise ValueError(
                    f"unet_channels {self.unet_channels} must be multiples of unet_norm_groups="
                    f"{self.unet_norm_groups} (and of unet_heads={self.unet_heads} where attention is on)"
                )
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1; got {self.steps}")
        if self.prediction_type not in PREDICTION_TYPES:
            raise ValueError(f"prediction_type {self.prediction_type!r} not in {PREDICTION_TYPES}")
        if self.text_layers < 1:
            raise ValueError(f"text_layers must be >= 1; got {self.text_layers}")
        if self.text_lr_ratio < 0:
            raise ValueError(f"text_lr_ratio must be >= 0 (0 freezes the text encoder); got {self.text_lr_ratio}")


def make_scheduler(cfg: SDConfig):
    """The ``DDIMScheduler`` that is trained against and saved with the pipeline (see the module docstring)."""
    from diffusers import DDIMScheduler

    return DDIMScheduler(
        num_train_timesteps=cfg.num_train_timesteps,
        beta_schedule=cfg.beta_schedule,
        beta_start=cfg.beta_start,
        beta_end=cfg.beta_end,
        prediction_type=cfg.prediction_type,
        clip_sample=False,
        set_alpha_to_one=False,
        steps_offset=1,
        timestep_spacing="leading",
    )


def text_encoder_from_base(base: str, layers: int):
    """``CLIPTextModel`` with the first ``layers`` layers of ``<base>/text_encoder`` (projection dropped)."""
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    src = CLIPTextModelWithProjection.from_pretrained(base, subfolder="text_encoder")
    if layers > src.config.num_hidden_layers:
        raise ValueError(f"text_layers={layers} but {base}/text_encoder has only {src.config.num_hidden_layers} layers")
    conf = CLIPTextConfig(**{**src.config.to_dict(), "num_hidden_layers": layers, "architectures": ["CLIPTextModel"]})
    enc = CLIPTextModel(conf)
    prefixed = any(k.startswith("text_model.") for k in enc.state_dict())  # transformers < 5 nests a .text_model
    dropped = tuple(f"text_model.encoder.layers.{i}." for i in range(layers, src.config.num_hidden_layers))
    kept = {
        (k if prefixed else k[len("text_model.") :]): v
        for k, v in src.state_dict().items()
        if k.startswith("text_model.") and not k.startswith(dropped)
    }
    enc.load_state_dict(kept, strict=True)  # every CLIPTextModel weight comes from the base
    return enc


def encode_prompts(prompts: Sequence[str], tokenizer, text_encoder) -> torch.Tensor:
    """``StableDiffusionPipeline.encode_prompt`` with ``clip_skip=None``: ``last_hidden_state`` ``[B, L, H]``."""
    ids = tokenizer(
        list(prompts), padding="max_length", max_length=tokenizer.model_max_length, truncation=True, return_tensors="pt"
    ).input_ids  # [B, L]
    return text_encoder(ids)[0]  # [B, L, H]


class SDRecipe(ShapesRecipe):
    """UNet (+ text encoder) by DDPM on the base's frozen VAE (module docstring)."""

    config_class = SDConfig

    def __init__(self, cfg: SDConfig):
        from diffusers import AutoencoderKL, UNet2DConditionModel
        from transformers import CLIPTokenizer

        cfg.validate()
        self.cfg = cfg
        vae = AutoencoderKL.from_pretrained(cfg.base, subfolder="vae").requires_grad_(False).eval()
        self.tokenizer = CLIPTokenizer.from_pretrained(cfg.base, subfolder="tokenizer")
        text_encoder = text_encoder_from_base(cfg.base, cfg.text_layers).requires_grad_(cfg.text_lr_ratio > 0)
        side = CANVAS // 2 ** (len(vae.config.block_out_channels) - 1)
        if side % 2 ** (len(cfg.unet_channels) - 1):
            raise ValueError(
                f"unet_channels: latent side {side} is not divisible by 2**(len(unet_channels)-1) "
                f"= {2 ** (len(cfg.unet_channels) - 1)}; use fewer UNet levels"
            )
        torch.manual_seed(cfg.seed)
        unet = UNet2DConditionModel(
            sample_size=side,
            in_channels=vae.config.latent_channels,
            out_channels=vae.config.latent_channels,
            block_out_channels=list(cfg.unet_channels),
            layers_per_block=cfg.unet_layers_per_block,
            down_block_types=["CrossAttnDownBlock2D" if a else "DownBlock2D" for a in cfg.unet_attention],
            up_block_types=["CrossAttnUpBlock2D" if a else "UpBlock2D" for a in reversed(cfg.unet_attention)],
            cross_attention_dim=text_encoder.config.hidden_size,
            attention_head_dim=cfg.unet_heads,
            norm_num_groups=cfg.unet_norm_groups,
        )
        self.models = {"vae": vae, "text_encoder": text_encoder, "unet": unet}
        self.stages = [denoiser_stage("ddpm", cfg, "unet", needs_latents=True)]
        self.ema_modules = self.stages[0].modules
        self.alphas_cumprod = make_scheduler(cfg).alphas_cumprod.float()  # [T]

    def loss(self, stage: str, data: TrainingData) -> dict[str, torch.Tensor]:
        """L_simple (or the v-prediction loss) of the module docstring."""
        cfg, m, g = self.cfg, self.models, data.gen
        z0, prompts = data.latents(m["vae"], cfg)  # [B, 4, h, w]
        b = len(prompts)
        t = torch.randint(0, cfg.num_train_timesteps, (b,), generator=g)  # [B]
        eps = torch.randn(z0.shape, generator=g)  # [B, 4, h, w]
        ab = self.alphas_cumprod[t].view(b, 1, 1, 1)  # ᾱ_t
        zt = ab.sqrt() * z0 + (1 - ab).sqrt() * eps  # q(z_t | z_0)
        target = eps if cfg.prediction_type == "epsilon" else ab.sqrt() * eps - (1 - ab).sqrt() * z0
        cond = encode_prompts(prompts, self.tokenizer, m["text_encoder"])  # [B, L, H]
        pred = m["unet"](zt, t, encoder_hidden_states=cond, return_dict=False)[0]  # [B, 4, h, w]
        return {"loss": F.mse_loss(pred, target)}

    @torch.no_grad()
    def measure_latents(self, data: TrainingData) -> dict:
        """``scaling_factor = 1 / sqrt(mean(E(x)²))`` over posterior samples of fresh renders, no shift."""
        z = torch.cat([z for _, _, z in data.fresh_posteriors(self.models["vae"], self.cfg.latent_stats_images)])
        rms = float(z.pow(2).mean().sqrt())
        stats = {
            "scaling_factor": 1.0 / rms,
            "raw_mean": float(z.mean()),
            "raw_std": float(z.std()),
            "raw_rms": rms,
            "scaled_mean": float(z.mean()) / rms,
        }
        self.set_latent_stats(stats)
        return stats

    def set_latent_stats(self, stats: dict) -> None:
        self.latent_stats = stats
        self.models["vae"].register_to_config(scaling_factor=stats["scaling_factor"], shift_factor=None)

    def pipeline(self):
        from diffusers import StableDiffusionPipeline

        m = self.models
        pipe = StableDiffusionPipeline(
            vae=m["vae"],
            text_encoder=m["text_encoder"],
            tokenizer=self.tokenizer,
            unet=m["unet"],
            scheduler=make_scheduler(self.cfg),
            safety_checker=None,
            feature_extractor=None,
            requires_safety_checker=False,
        )
        pipe.set_progress_bar_config(disable=True)
        return pipe


RECIPE = SDRecipe
