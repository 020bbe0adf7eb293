"""Pretrain the ShapesWorld model in the SD (1.x/2.x) architecture: a small UNet on the SD3 model's VAE and text encoder.

The result is a plain diffusers ``StableDiffusionPipeline`` directory (``UNet2DConditionModel`` +
``DDIMScheduler``, one ``CLIPTextModel``, no safety checker) for the DDPO path
(:mod:`ddpo_grpo.policies.sd`). It starts from a ShapesWorld SD3 pipeline (``cfg.base``, by default
the shipped :data:`worlds.shapes.SHAPES_SD3`, trained by :mod:`worlds.shapes.pretrain_sd3`):

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

Objective (DDPM, Ho et al. 2020, eqs. 4 and 14), VAE frozen
-----------------------------------------------------------
::

    z₀  = s · E(x)                                 # [B, 4, 16, 16], posterior sample
    t   ~ U{0, …, T−1},  ε ~ N(0, I)               # T = 1000
    ᾱ_t = Π_{i≤t} (1 − β_i)
    z_t = √ᾱ_t · z₀ + √(1 − ᾱ_t) · ε                # q(z_t | z₀), eq. 4
    c   = text_encoder(tokens(prompt)).last_hidden_state   # [B, 16, 64]; prompt → "" w.p. cond_dropout
    L   = ‖ ε_θ(z_t, t, c) − ε ‖²  (mean)          # L_simple, eq. 14

``prediction_type = "v_prediction"`` instead regresses ``v = √ᾱ_t ε − √(1−ᾱ_t) z₀`` (Salimans & Ho
2022, §4); both are what ``DDIMScheduler`` and :func:`ddpo_grpo.sde.ddim_step` invert (epsilon is
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
image is at least two-thirds white background (at most four objects of ≤ 18×18 px on 64×64). It is also the schedule the DDPO configs and
:func:`ddpo_grpo.tiny.build_tiny_sd` use, with epsilon prediction, so nothing in the SD policy changes.

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

Data, checkpoints and evaluation are those of the SD3 pretrainer (shared code from
:mod:`worlds.shapes.pretrain_sd3`): task-balanced train-split prompts rendered on the fly
(``noise_per_image = K`` reuses each render K times with independent ``t``, ε), atomic
checkpoints every ``ckpt_every`` steps in ``<out>/checkpoints/`` (UNet, text encoder, their EMAs,
the VAE, the optimizer, the RNG states, the latent scale and the config) from which ``--resume``
continues bit-exactly (same thread count), EMA of the trained weights, periodic and final judge
evaluations (DDIM η = 0, ``eval_steps``, CFG ``eval_guidance``) on test-split prompts in
``<out>/pretrain_log.jsonl``. The EMA pipeline is saved to ``<out>/final``, reloaded from disk and
evaluated into ``<out>/final_eval.json``. Load it with ``StableDiffusionPipeline.from_pretrained(dir)``.
"""
from __future__ import annotations

import collections
import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from ddpo_grpo.checkpoint import load_checkpoint, save_checkpoint
from worlds.shapes.pretrain_sd3 import (
    CANVAS,
    ConfigDict,
    TaskBalancedSampler,
    _gen_state,
    _lr_at,
    _set_gen_state,
    append_log,
    count_params,
    ema_update,
    logged_eval,
    render_rows,
    save_final,
    scene_specs,
    start_or_resume,
    validate_data_fields,
)
from worlds.shapes.grammar import load_split
from worlds.shapes import SHAPES_SD3

PREDICTION_TYPES = ("epsilon", "v_prediction")


@dataclass
class PretrainSDConfig(ConfigDict):
    """Every setting of an SD-architecture pretraining run (saved in each checkpoint; ``--resume`` reuses it)."""

    seed: int = 0
    base: str = SHAPES_SD3  # StableDiffusion3Pipeline dir whose vae/, tokenizer/ and text_encoder/ are reused
    # ---- data ----
    task_weights: Tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)  # sampling weight of each task in TASKS order
    latent_stats_images: int = 512  # renders used to measure scaling_factor = 1 / RMS(E(x))
    # ---- text encoder (CLIPTextModel from the base's text_encoder) ----
    text_layers: int = 2  # first layers kept: last_hidden_state = final_layer_norm(SD3's penultimate states)
    text_lr_ratio: float = 0.25  # text-encoder lr = text_lr_ratio * lr; 0 freezes it
    # ---- UNet2DConditionModel ----
    unet_channels: Tuple[int, ...] = (32, 64, 64)  # block_out_channels; len-1 downsamples (16 -> 8 -> 4)
    unet_attention: Tuple[int, ...] = (0, 1, 1)  # per level: 1 = CrossAttn block (self+cross attention), 0 = ResNet only
    unet_layers_per_block: int = 1
    unet_heads: int = 8  # heads per attention layer (diffusers' attention_head_dim, a head *count* in this class)
    unet_norm_groups: int = 8
    # ---- noise schedule (DDIMScheduler) ----
    num_train_timesteps: int = 1000
    beta_schedule: str = "scaled_linear"
    beta_start: float = 0.00085
    beta_end: float = 0.012
    prediction_type: str = "epsilon"  # or "v_prediction"
    # ---- training ----
    steps: int = 7000  # ≈ 40 min on one CPU thread (3.15 steps/s with another job on the second core)
    batch_size: int = 32  # latents per step (= images per step * noise_per_image)
    noise_per_image: int = 1
    lr: float = 8e-4
    warmup_steps: int = 200
    min_lr_ratio: float = 0.1  # cosine decay from lr to min_lr_ratio*lr over the steps
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    ema_decay: float = 0.999
    cond_dropout: float = 0.1  # fraction of prompts replaced by "" (classifier-free guidance)
    caption_noise: float = 0.0  # fraction of images rendered for a near miss of their caption (pretrain.near_miss)
    # ---- evaluation (ShapesWorld judge on test-split prompts, DDIM eta=0 through the pipeline) ----
    eval_every: int = 1000  # steps; 0 = only at the end
    eval_per_task: int = 16
    final_eval_per_task: int = 100
    eval_steps: int = 20
    eval_guidance: float = 4.5
    # ---- bookkeeping ----
    ckpt_every: int = 250
    keep_last: int = 2
    log_every: int = 25

    @property
    def total_steps(self) -> int:
        return self.steps

    def validate(self) -> None:
        validate_data_fields(self)
        if len(self.unet_attention) != len(self.unet_channels) or set(self.unet_attention) - {0, 1}:
            raise ValueError(f"unet_attention needs one 0/1 flag per level of unet_channels {self.unet_channels}; "
                             f"got {self.unet_attention}")
        for c, a in zip(self.unet_channels, self.unet_attention):
            if c % self.unet_norm_groups or (a and c % self.unet_heads):
                raise ValueError(f"unet_channels {self.unet_channels} must be multiples of unet_norm_groups="
                                 f"{self.unet_norm_groups} (and of unet_heads={self.unet_heads} where attention is on)")
        if self.prediction_type not in PREDICTION_TYPES:
            raise ValueError(f"prediction_type {self.prediction_type!r} not in {PREDICTION_TYPES}")
        if self.text_layers < 1:
            raise ValueError("text_layers must be >= 1")
        if not 0.0 <= self.text_lr_ratio:
            raise ValueError(f"text_lr_ratio must be >= 0 (0 freezes the text encoder); got {self.text_lr_ratio}")


def tiny_config(**overrides) -> PretrainSDConfig:
    """A seconds-long configuration for tests (same code paths, toy UNet; the base's real VAE/text encoder)."""
    base = dict(
        latent_stats_images=4, unet_channels=(8, 16), unet_attention=(0, 1), unet_heads=2, unet_norm_groups=4,
        steps=3, batch_size=4, noise_per_image=2, warmup_steps=1, eval_every=0, eval_per_task=1,
        final_eval_per_task=1, eval_steps=2, ckpt_every=2, log_every=1,
    )
    base.update(overrides)
    return PretrainSDConfig(**base)


# ============================================================================================
# models
# ============================================================================================


def make_scheduler(cfg: PretrainSDConfig):
    """The ``DDIMScheduler`` that is trained against and saved with the pipeline (see the module docstring)."""
    from diffusers import DDIMScheduler

    return DDIMScheduler(
        num_train_timesteps=cfg.num_train_timesteps, beta_schedule=cfg.beta_schedule, beta_start=cfg.beta_start,
        beta_end=cfg.beta_end, prediction_type=cfg.prediction_type, clip_sample=False, set_alpha_to_one=False,
        steps_offset=1, timestep_spacing="leading",
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
    kept = {(k if prefixed else k[len("text_model."):]): v for k, v in src.state_dict().items()
            if k.startswith("text_model.") and not k.startswith(dropped)}
    enc.load_state_dict(kept, strict=True)  # every CLIPTextModel weight comes from the base
    return enc


def build_models(cfg: PretrainSDConfig) -> dict:
    """``vae`` (frozen, from base), ``tokenizer``, ``text_encoder`` (from base), ``unet`` (seeded random init)."""
    from diffusers import AutoencoderKL, UNet2DConditionModel
    from transformers import CLIPTokenizer

    vae = AutoencoderKL.from_pretrained(cfg.base, subfolder="vae").requires_grad_(False).eval()
    tokenizer = CLIPTokenizer.from_pretrained(cfg.base, subfolder="tokenizer")
    text_encoder = text_encoder_from_base(cfg.base, cfg.text_layers)
    side = CANVAS // 2 ** (len(vae.config.block_out_channels) - 1)
    if side % 2 ** (len(cfg.unet_channels) - 1):
        raise ValueError(f"latent side {side} is not divisible by 2**(len(unet_channels)-1) "
                         f"= {2 ** (len(cfg.unet_channels) - 1)}; use fewer UNet levels")
    down = ["CrossAttnDownBlock2D" if a else "DownBlock2D" for a in cfg.unet_attention]
    up = ["CrossAttnUpBlock2D" if a else "UpBlock2D" for a in reversed(cfg.unet_attention)]
    torch.manual_seed(cfg.seed)
    unet = UNet2DConditionModel(
        sample_size=side, in_channels=vae.config.latent_channels, out_channels=vae.config.latent_channels,
        block_out_channels=list(cfg.unet_channels), layers_per_block=cfg.unet_layers_per_block,
        down_block_types=down, up_block_types=up, cross_attention_dim=text_encoder.config.hidden_size,
        attention_head_dim=cfg.unet_heads, norm_num_groups=cfg.unet_norm_groups,
    )
    return {"vae": vae, "tokenizer": tokenizer, "text_encoder": text_encoder, "unet": unet}


def encode_prompts(prompts: Sequence[str], tokenizer, text_encoder) -> torch.Tensor:
    """``StableDiffusionPipeline.encode_prompt`` with ``clip_skip=None``: ``last_hidden_state`` ``[B, L, H]``."""
    ids = tokenizer(list(prompts), padding="max_length", max_length=tokenizer.model_max_length, truncation=True,
                    return_tensors="pt").input_ids  # [B, L]
    return text_encoder(ids)[0]  # [B, L, H]


def make_pipeline(models: dict, cfg: PretrainSDConfig, unet=None, text_encoder=None):
    """A ``StableDiffusionPipeline`` (no safety checker) around the given modules."""
    from diffusers import StableDiffusionPipeline

    pipe = StableDiffusionPipeline(
        vae=models["vae"], text_encoder=text_encoder if text_encoder is not None else models["text_encoder"],
        tokenizer=models["tokenizer"], unet=unet if unet is not None else models["unet"],
        scheduler=make_scheduler(cfg), safety_checker=None, feature_extractor=None, requires_safety_checker=False,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


# ============================================================================================
# the run
# ============================================================================================


class SDPretrainer:
    """UNet (+ text encoder) training with checkpoints every ``ckpt_every`` steps and exact resumption."""

    def __init__(self, cfg: PretrainSDConfig, out_dir, log=print):
        cfg.validate()
        self.cfg, self.out, self.log = cfg, Path(out_dir), log
        self.out.mkdir(parents=True, exist_ok=True)
        self.models = build_models(cfg)
        self.trained = ["unet"] + (["text_encoder"] if cfg.text_lr_ratio > 0 else [])
        self.models["text_encoder"].requires_grad_(cfg.text_lr_ratio > 0)
        self.ema = {k: copy.deepcopy(self.models[k]).requires_grad_(False).eval() for k in self.trained}
        self.alphas_cumprod = make_scheduler(cfg).alphas_cumprod.float()  # [T]
        self.sampler = TaskBalancedSampler(load_split("train"), cfg.task_weights)
        self.rng = np.random.default_rng(cfg.seed)  # prompts, scenes
        self.gen = torch.Generator().manual_seed(cfg.seed + 1)  # posterior samples, t, noise, dropout
        self.step = 0
        self.latent_stats: Optional[dict] = None
        self.opt = self._make_optimizer()

    def _make_optimizer(self) -> torch.optim.Optimizer:
        """AdamW; each group's ``lr_scale`` multiplies the scheduled lr (text encoder: ``text_lr_ratio``)."""
        scales = {"unet": 1.0, "text_encoder": self.cfg.text_lr_ratio}
        groups = [{"params": list(self.models[k].parameters()), "lr_scale": scales[k]} for k in self.trained]
        return torch.optim.AdamW(groups, lr=self.cfg.lr, betas=(0.9, 0.99), weight_decay=self.cfg.weight_decay)

    def _set_latent_stats(self, stats: dict) -> None:
        self.latent_stats = stats
        self.models["vae"].register_to_config(scaling_factor=stats["scaling_factor"], shift_factor=None)

    # ---- checkpoints -------------------------------------------------------------------------
    def save(self) -> Path:
        tensors = {k: self.models[k].state_dict() for k in ("vae", "text_encoder", "unet")}
        for k, mod in self.ema.items():
            tensors[f"ema_{k}"] = mod.state_dict()
        state = {"global_step": self.step, "config": self.cfg.to_dict(), "data_rng": self.rng.bit_generator.state,
                 "torch_gen": _gen_state(self.gen), "latent_stats": self.latent_stats}
        return save_checkpoint(self.out, self.step, tensors=tensors, optimizer_state=self.opt.state_dict(),
                               state=state, keep_last=self.cfg.keep_last)

    def restore(self, path=None) -> None:
        ck = load_checkpoint(path or self.out)
        st = ck["state"]
        for k in ("vae", "text_encoder", "unet"):
            self.models[k].load_state_dict(ck["tensors"][k])
        for k, mod in self.ema.items():
            mod.load_state_dict(ck["tensors"][f"ema_{k}"])
        self.step = int(st["global_step"])
        self.rng.bit_generator.state = st["data_rng"]
        _set_gen_state(self.gen, st["torch_gen"])
        if st.get("latent_stats"):
            self._set_latent_stats(st["latent_stats"])
        self.opt.load_state_dict(ck["optimizer_state"])
        self.log(f"resumed from {ck['path']} at step {self.step}")

    # ---- latent scale ------------------------------------------------------------------------
    @torch.no_grad()
    def compute_latent_stats(self) -> None:
        """``scaling_factor = 1 / sqrt(mean(E(x)²))`` over fresh renders (own RNGs: training data unaffected)."""
        cfg, vae = self.cfg, self.models["vae"]
        rng = np.random.default_rng(cfg.seed + 7)
        gen = torch.Generator().manual_seed(cfg.seed + 7)
        zs = []
        for i in range(0, cfg.latent_stats_images, 64):
            rows = self.sampler.sample(rng, min(64, cfg.latent_stats_images - i))
            zs.append(vae.encode(render_rows(rows, rng)).latent_dist.sample(generator=gen))  # [n, 4, h, w]
        z = torch.cat(zs)
        rms = float(z.pow(2).mean().sqrt())
        stats = {"scaling_factor": 1.0 / rms, "raw_mean": float(z.mean()), "raw_std": float(z.std()),
                 "raw_rms": rms}
        self._set_latent_stats(stats)
        self.log(f"latent stats of E(x): mean={stats['raw_mean']:.4f} std={stats['raw_std']:.4f} rms={rms:.4f} "
                 f"-> scaling_factor={stats['scaling_factor']:.4f}, shift_factor=None "
                 f"(scaled latents: mean {stats['raw_mean'] / rms:.3f}, second moment 1)")
        append_log(self.out, {"global_step": self.step, **stats})

    # ---- one step ----------------------------------------------------------------------------
    def train_step(self) -> dict:
        cfg, m, g = self.cfg, self.models, self.gen
        k = cfg.noise_per_image
        rows = self.sampler.sample(self.rng, cfg.batch_size // k)
        x = render_rows(scene_specs(rows, self.rng, cfg.caption_noise), self.rng)  # [n, 3, 64, 64]
        with torch.no_grad():
            z0 = m["vae"].encode(x).latent_dist.sample(generator=g) * self.latent_stats["scaling_factor"]  # [n, 4, h, w]
        z0 = z0.repeat_interleave(k, 0)  # [B, 4, h, w]
        prompts = [r["prompt"] for r in rows for _ in range(k)]
        drop = torch.rand(len(prompts), generator=g) < cfg.cond_dropout
        prompts = ["" if d else p for p, d in zip(prompts, drop.tolist())]
        b = len(prompts)
        t = torch.randint(0, cfg.num_train_timesteps, (b,), generator=g)  # [B]
        eps = torch.randn(z0.shape, generator=g)  # [B, 4, h, w]
        ab = self.alphas_cumprod[t].view(b, 1, 1, 1)  # ᾱ_t
        zt = ab.sqrt() * z0 + (1 - ab).sqrt() * eps  # q(z_t | z_0)
        target = eps if cfg.prediction_type == "epsilon" else ab.sqrt() * eps - (1 - ab).sqrt() * z0
        cond = encode_prompts(prompts, m["tokenizer"], m["text_encoder"])  # [B, L, H]
        pred = m["unet"](zt, t, encoder_hidden_states=cond, return_dict=False)[0]  # [B, 4, h, w]
        return {"loss": F.mse_loss(pred, target)}

    # ---- evaluation --------------------------------------------------------------------------
    def pipeline(self, ema: bool = True):
        if not ema:
            return make_pipeline(self.models, self.cfg)
        return make_pipeline(self.models, self.cfg, unet=self.ema["unet"], text_encoder=self.ema.get("text_encoder"))

    def run_eval(self, per_task: int, tag: str, save_dir: Optional[Path] = None, pipe=None) -> dict:
        return logged_eval(pipe or self.pipeline(), per_task, tag, self.out, self.log, {"global_step": self.step},
                           save_dir=save_dir, num_inference_steps=self.cfg.eval_steps,
                           guidance_scale=self.cfg.eval_guidance, eta=0.0)

    # ---- main loop ---------------------------------------------------------------------------
    def train(self) -> Path:
        cfg = self.cfg
        self.log(self.describe())
        if self.latent_stats is None:
            self.compute_latent_stats()
        params = [p for k in self.trained for p in self.models[k].parameters()]
        ran, t_log, acc = 0, time.time(), collections.defaultdict(float)
        while self.step < cfg.steps:
            for k in self.trained:
                self.models[k].train()
            lr_now = _lr_at(self.step, cfg.steps, cfg.lr, cfg.warmup_steps, cfg.min_lr_ratio)
            for group in self.opt.param_groups:
                group["lr"] = lr_now * group["lr_scale"]
            out = self.train_step()
            self.opt.zero_grad(set_to_none=True)
            out["loss"].backward()
            gnorm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            self.opt.step()
            ema_update(self.ema, self.models, cfg.ema_decay, self.step)
            self.step += 1
            for k, v in out.items():
                acc[k] += float(v.detach())
            acc["grad_norm"] += float(gnorm)
            ran += 1
            if self.step % cfg.log_every == 0 or self.step == cfg.steps:
                rec = {"global_step": self.step, "lr": lr_now, **{k: round(v / ran, 5) for k, v in acc.items()},
                       "steps_per_s": round(ran / (time.time() - t_log), 3)}
                append_log(self.out, rec)
                self.log(f"step {self.step}/{cfg.steps} " + " ".join(f"{k}={v / ran:.4f}" for k, v in acc.items())
                         + f" lr={lr_now:.2e} {rec['steps_per_s']:.2f} steps/s")
                ran, t_log, acc = 0, time.time(), collections.defaultdict(float)
            if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step < cfg.steps:
                self.run_eval(cfg.eval_per_task, f"step_{self.step}", save_dir=self.out / "samples" / f"step_{self.step:06d}.png")
                t_log = time.time()  # keep steps/s about training only
            if self.step % cfg.ckpt_every == 0 or self.step == cfg.steps:
                self.log(f"checkpoint {self.save()}")
        return self.finish()

    def finish(self) -> Path:
        """Save the EMA pipeline to ``<out>/final`` and evaluate it as loaded back from disk."""
        from diffusers import StableDiffusionPipeline

        return save_final(self, StableDiffusionPipeline.from_pretrained)

    def describe(self) -> str:
        counts = {k: count_params(self.models[k]) for k in ("vae", "text_encoder", "unet")}
        total = sum(counts.values())
        return ("params: " + ", ".join(f"{k}={v / 1e6:.3f}M" for k, v in counts.items())
                + f", total={total / 1e6:.3f}M (~{4 * total / 1e6:.1f} MB float32; unet "
                f"{4 * counts['unet'] / 1e6:.1f} MB); trained: {'+'.join(self.trained)}; "
                f"steps={self.cfg.steps} (batch {self.cfg.batch_size}); now at step {self.step}")


#: config fields a resumed run may change (see :data:`worlds.shapes.pretrain_sd3.RESUME_MUTABLE`); a
#: larger ``steps`` extends a run, re-stretching the cosine LR schedule over the new total;
#: ``caption_noise`` changes the data from the current step on.
RESUME_MUTABLE = ("steps", "caption_noise", "eval_every", "eval_per_task", "final_eval_per_task", "ckpt_every",
                  "keep_last", "log_every")


def run(cfg: PretrainSDConfig, out_dir, resume: bool = False, log=print, overrides: Optional[dict] = None) -> Path:
    """Train (or continue, with ``resume``) a run in ``out_dir``; return the final pipeline directory."""
    return start_or_resume(SDPretrainer, RESUME_MUTABLE, cfg, out_dir, resume, log, overrides).train()
