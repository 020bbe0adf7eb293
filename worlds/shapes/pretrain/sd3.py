"""Recipe: a small ShapesWorld text-to-image model in the SD3 architecture, from scratch, on CPU.

The result is a plain diffusers ``StableDiffusion3Pipeline`` directory (two CLIP text encoders, no T5)
that later RL (GRPO) fine-tunes; the loop, checkpoints and evaluation are the core's
(:mod:`ddpo_grpo.pretraining`), the data and the held-out evaluation :mod:`.base`'s.

Stages
------
1. ``vae``: **AutoencoderKL** 64×64×3 ↔ 16×16×4 (three levels, two downsamples). Loss per image, with
   pixels ``x`` in [-1, 1] and reconstruction ``x̂`` decoded from a posterior *sample*::

       L_vae = mean_pixels( w · (|x̂ − x| + (x̂ − x)²) ) + β_KL · KL(q(z|x) ‖ N(0, I))_sum / (3·64·64)

   ``w = 1 + fg_weight`` on object pixels (non-white in ``x``) and 1 on the background, so the ~10–30 %
   of pixels that carry colour and shape are not drowned by white; ``β_KL`` is LDM's convention
   (KL summed per image against the per-image *sum* of the reconstruction loss), i.e. tiny. The
   learning rate warms up over min(100, vae_steps) steps. Afterwards the latent statistics of
   ``latent_stats_images`` fresh renders give ``shift_factor = mean(z)`` and ``scaling_factor = 1 / std(z)``
   (stored in the VAE config, so the pipeline's ``latents / scaling_factor + shift_factor`` decoding is right).

2. ``flow``: **text encoders + SD3 transformer**, trained jointly by rectified-flow matching (SD3,
   Esser et al. 2024, eqs. 1–3 with the logit-normal ``t`` sampling of §3.1), VAE frozen::

       z₀ = (E(x) − shift) · scale                                  # [B, 4, 16, 16]
       t  = sigmoid(m + s·n),  n ~ N(0, 1)                          # logit-normal, m = 0, s = 1
       z_t = (1 − t)·z₀ + t·ε,  ε ~ N(0, I)
       v*  = ε − z₀                                                  # velocity target
       L   = ‖ v_θ(z_t, 1000·t, c) − v* ‖²   (mean)

   The pipeline samples with ``FlowMatchEulerDiscreteScheduler(shift)``: ``z ← z + (σ_next − σ)·v``
   from σ = 1 to 0, the denoiser seeing ``timestep = 1000·σ``, exactly the convention above. We use
   ``shift = 1.0``: SD3's 3.0 compensates for the *high* resolution of 1024² images (more pixels →
   more signal survives a given σ); a 16×16×4 latent is the opposite case, and a logit-normal
   centred at t = 0.5 already spends most training on the middle of the path. A fraction
   ``cond_dropout`` of the prompts is replaced by the empty prompt ``""`` (what the pipeline encodes
   as the negative prompt) so classifier-free guidance works.

Text conditioning exactly as ``StableDiffusion3Pipeline.encode_prompt`` builds it: each CLIP
encoder's penultimate hidden states ``[B, L, H]`` concatenated on channels ``[B, L, 2H]``
(``joint_attention_dim = 2H``), the two projected pooled outputs concatenated ``[B, 2P]``
(``pooled_projection_dim = 2P``), followed by ``N = max_sequence_length`` all-zero "T5" tokens (the
pipeline has no T5). Those N tokens are identical at every layer (same input, no positional
embedding on text), so in joint attention they act as *one* key/value with an extra logit
``log N``. Training therefore appends a single zero token and adds ``log N`` to its attention
logit (:class:`NullTokenJointAttnProcessor`, exact up to float rounding, see
``tests/test_pretrain_shapes.py``) with ``N`` drawn log-uniformly in ``[1, max_null_tokens]``: the
model is robust to whatever ``max_sequence_length`` a sampler later passes (8 in tests, 77 in
``scripts/sample.py``, 128–256 in the RL configs) at the cost of one token instead of 256.

The tokenizer (:mod:`.tokenizer`) makes every grammar word one token.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from ddpo_grpo.pretraining import Stage
from ddpo_grpo.pretraining.tokenizer import word_text_config
from worlds.shapes.pretrain.base import ShapesRecipe
from worlds.shapes.pretrain.config import ShapesConfig
from worlds.shapes.pretrain.data import TrainingData
from worlds.shapes.pretrain.tokenizer import build_word_tokenizer
from worlds.shapes.world import CANVAS


@dataclass
class SD3Config(ShapesConfig):
    """Every setting of an SD3 pretraining run (saved in each checkpoint; ``--resume`` reuses it)."""

    # ---- stage 1: VAE ----
    vae_channels: tuple[int, ...] = (16, 32, 64)  # block_out_channels; len-1 downsamples (3 -> 64/4 = 16)
    vae_layers_per_block: int = 1
    vae_norm_groups: int = 8
    latent_channels: int = 4
    vae_steps: int = 1000
    vae_batch_size: int = 16
    vae_lr: float = 1e-3
    vae_kl_weight: float = 1e-6  # LDM convention: per-image KL sum vs per-image reconstruction sum
    vae_fg_weight: float = 4.0  # extra reconstruction weight on object (non-white) pixels
    # ---- text encoders (two CLIPTextModelWithProjection, same shape) ----
    text_hidden: int = 64
    text_layers: int = 3  # the pipeline uses the penultimate layer's states; the last feeds the pooled output
    text_heads: int = 4
    text_ff: int = 128
    text_proj: int = 64
    max_length: int = 16  # tokens incl. BOS/EOS (longest grammar prompt: 10 words -> 12)
    # ---- SD3 transformer ----
    tf_layers: int = 6
    tf_heads: int = 3
    tf_head_dim: int = 32
    qk_norm: str | None = "rms_norm"
    # ---- stage 2: flow matching (batch_size, lr, ... above) ----
    flow_steps: int = 5000
    logit_mean: float = 0.0
    logit_std: float = 1.0
    max_null_tokens: int = 256
    scheduler_shift: float = 1.0
    eval_max_sequence_length: int = 77  # "T5" zero tokens the evaluation's prompt encoding appends

    RESUME_MUTABLE: ClassVar[tuple[str, ...]] = ("flow_steps", *ShapesConfig.RESUME_MUTABLE)
    TINY: ClassVar[dict] = dict(
        ShapesConfig.TINY,
        vae_channels=(8, 8, 8),
        vae_steps=2,
        vae_batch_size=2,
        text_hidden=16,
        text_layers=2,
        text_heads=2,
        text_ff=32,
        text_proj=16,
        tf_layers=1,
        tf_heads=2,
        tf_head_dim=8,
        flow_steps=3,
        eval_max_sequence_length=8,
    )

    @property
    def latent_side(self) -> int:
        return CANVAS // 2 ** (len(self.vae_channels) - 1)

    def validate(self) -> None:
        super().validate()
        factor = 2 ** (len(self.vae_channels) - 1)
        if CANVAS % factor or self.latent_side % 2:
            raise ValueError(
                f"vae_channels {self.vae_channels}: 64 / 2**(levels-1) must be an even latent side "
                "(patch size 2); use 2 to 4 levels"
            )
        if self.vae_steps < 0 or self.flow_steps < 1:
            raise ValueError(f"vae_steps must be >= 0 and flow_steps >= 1; got {self.vae_steps} and {self.flow_steps}")
        if self.max_length < 12:
            raise ValueError(f"max_length={self.max_length} < 12 would truncate the longest ShapesWorld prompts")
        if self.max_null_tokens < 1:
            raise ValueError(f"max_null_tokens must be >= 1; got {self.max_null_tokens}")


class NullTokenJointAttnProcessor:
    """``JointAttnProcessor2_0`` plus an optional additive attention bias over the keys.

    ``attention_mask``: float ``[B, 1, 1, L_img + L_txt]`` added to every query's logits (SDPA's
    ``attn_mask``). With ``attention_mask=None`` this is exactly the stock processor. Training passes
    ``log N`` on the single null-token column, which equals attending to N identical null tokens.
    """

    def __call__(self, attn, hidden_states, encoder_hidden_states=None, attention_mask=None, *args, **kwargs):
        b = hidden_states.shape[0]
        n_img = hidden_states.shape[1]

        def heads(x):  # [B, L, heads*hd] -> [B, heads, L, hd]
            return x.view(b, -1, attn.heads, x.shape[-1] // attn.heads).transpose(1, 2)

        q, k, v = heads(attn.to_q(hidden_states)), heads(attn.to_k(hidden_states)), heads(attn.to_v(hidden_states))
        if attn.norm_q is not None:
            q = attn.norm_q(q)
        if attn.norm_k is not None:
            k = attn.norm_k(k)
        if encoder_hidden_states is not None:
            cq = heads(attn.add_q_proj(encoder_hidden_states))
            ck = heads(attn.add_k_proj(encoder_hidden_states))
            cv = heads(attn.add_v_proj(encoder_hidden_states))
            if attn.norm_added_q is not None:
                cq = attn.norm_added_q(cq)
            if attn.norm_added_k is not None:
                ck = attn.norm_added_k(ck)
            q, k, v = torch.cat([q, cq], 2), torch.cat([k, ck], 2), torch.cat([v, cv], 2)
        mask = None if attention_mask is None else attention_mask.to(q.dtype)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, is_causal=False)
        out = out.transpose(1, 2).reshape(b, -1, attn.heads * q.shape[-1]).to(q.dtype)  # [B, L, D]
        if encoder_hidden_states is not None:
            out, ctx = out[:, :n_img], out[:, n_img:]
            if not attn.context_pre_only:
                ctx = attn.to_add_out(ctx)
        out = attn.to_out[1](attn.to_out[0](out))
        return (out, ctx) if encoder_hidden_states is not None else out


def set_null_token_processor(transformer) -> None:
    """Install :class:`NullTokenJointAttnProcessor` in every joint-attention layer of ``transformer``."""
    for block in transformer.transformer_blocks:
        block.attn.set_processor(NullTokenJointAttnProcessor())


def with_null_token(embeds: torch.Tensor, n_img_tokens: int, num_null: torch.Tensor):
    """Append one zero token to ``embeds`` [B, L, C] and the key bias equivalent to ``num_null`` of them.

    Returns ``(context [B, L+1, C], attention_mask [B, 1, 1, n_img + L + 1])``.
    """
    b, length, c = embeds.shape
    context = torch.cat([embeds, embeds.new_zeros(b, 1, c)], 1)
    mask = embeds.new_zeros(b, 1, 1, n_img_tokens + length + 1)
    mask[:, 0, 0, -1] = torch.log(num_null.to(embeds.dtype))
    return context, mask


def encode_prompts(prompts: Sequence[str], tokenizer, text_encoder, text_encoder_2, max_length: int):
    """CLIP part of ``StableDiffusion3Pipeline.encode_prompt``: ``([B, L, 2H] embeds, [B, 2P] pooled)``."""
    ids = tokenizer(
        list(prompts), padding="max_length", max_length=max_length, truncation=True, return_tensors="pt"
    ).input_ids  # [B, L]
    embeds, pooled = [], []
    for enc in (text_encoder, text_encoder_2):
        out = enc(ids, output_hidden_states=True)
        embeds.append(out.hidden_states[-2])  # [B, L, H] penultimate layer, as the pipeline (clip_skip=None)
        pooled.append(out[0])  # [B, P] projected EOS state
    return torch.cat(embeds, -1), torch.cat(pooled, -1)


class SD3Recipe(ShapesRecipe):
    """VAE stage, then text encoders + transformer by rectified flow (module docstring)."""

    config_class = SD3Config
    ema_modules = ("transformer", "text_encoder", "text_encoder_2")

    def __init__(self, cfg: SD3Config):
        from diffusers import AutoencoderKL, SD3Transformer2DModel
        from transformers import CLIPTextModelWithProjection

        cfg.validate()
        self.cfg = cfg
        torch.manual_seed(cfg.seed)
        levels = len(cfg.vae_channels)
        vae = AutoencoderKL(
            in_channels=3,
            out_channels=3,
            down_block_types=["DownEncoderBlock2D"] * levels,
            up_block_types=["UpDecoderBlock2D"] * levels,
            block_out_channels=list(cfg.vae_channels),
            layers_per_block=cfg.vae_layers_per_block,
            latent_channels=cfg.latent_channels,
            norm_num_groups=cfg.vae_norm_groups,
            sample_size=CANVAS,
            scaling_factor=1.0,
            shift_factor=0.0,
        )
        self.tokenizer = build_word_tokenizer(cfg.max_length)
        text_cfg = word_text_config(
            self.tokenizer,
            hidden=cfg.text_hidden,
            ff=cfg.text_ff,
            layers=cfg.text_layers,
            heads=cfg.text_heads,
            projection_dim=cfg.text_proj,
        )
        text_encoder = CLIPTextModelWithProjection(text_cfg)
        text_encoder_2 = CLIPTextModelWithProjection(text_cfg)
        transformer = SD3Transformer2DModel(
            sample_size=cfg.latent_side,
            patch_size=2,
            in_channels=cfg.latent_channels,
            out_channels=cfg.latent_channels,
            num_layers=cfg.tf_layers,
            attention_head_dim=cfg.tf_head_dim,
            num_attention_heads=cfg.tf_heads,
            joint_attention_dim=2 * cfg.text_hidden,  # both encoders' hidden states, concatenated
            caption_projection_dim=cfg.tf_heads * cfg.tf_head_dim,
            pooled_projection_dim=2 * cfg.text_proj,
            pos_embed_max_size=cfg.latent_side // 2,  # the (saved) sin-cos table covers exactly our grid
            qk_norm=cfg.qk_norm,
        )
        set_null_token_processor(transformer)
        self.models = {
            "vae": vae,
            "text_encoder": text_encoder,
            "text_encoder_2": text_encoder_2,
            "transformer": transformer,
        }
        self.stages = [
            Stage("vae", cfg.vae_steps, ((("vae",), 1.0),), cfg.vae_lr, warmup=min(100, cfg.vae_steps)),
            Stage(
                "flow",
                cfg.flow_steps,
                ((("transformer", "text_encoder", "text_encoder_2"), 1.0),),
                cfg.lr,
                warmup=cfg.warmup_steps,
                weight_decay=cfg.weight_decay,
                ema=True,
                evaluate=True,
                needs_latents=True,
            ),
        ]

    def loss(self, stage: str, data: TrainingData) -> dict[str, torch.Tensor]:
        return self.vae_loss(data) if stage == "vae" else self.flow_loss(data)

    def vae_loss(self, data: TrainingData) -> dict[str, torch.Tensor]:
        """``L_vae`` of the module docstring on ``vae_batch_size`` fresh renders."""
        cfg, vae = self.cfg, self.models["vae"]
        x = data.images(cfg.vae_batch_size)  # [B, 3, 64, 64]
        post = vae.encode(x).latent_dist
        rec = vae.decode(post.sample(generator=data.gen)).sample  # [B, 3, 64, 64]
        fg = (x < 0.999).any(1, keepdim=True).float()  # [B, 1, 64, 64] object pixels
        w = 1.0 + cfg.vae_fg_weight * fg
        err = rec - x
        rec_loss = (w * (err.abs() + err.pow(2))).mean()
        kl = post.kl().mean() / x[0].numel()  # per-image sum over latents, per pixel
        loss = rec_loss + cfg.vae_kl_weight * kl
        return {"loss": loss, "rec": rec_loss.detach(), "kl": kl.detach(), "mae": err.abs().mean().detach()}

    def flow_loss(self, data: TrainingData) -> dict[str, torch.Tensor]:
        """The rectified-flow loss of the module docstring, with ``N`` null tokens as one biased token."""
        cfg, m, g = self.cfg, self.models, data.gen
        z0, prompts = data.latents(m["vae"], cfg)  # [B, 4, h, w]
        b = len(prompts)
        t = torch.sigmoid(cfg.logit_mean + cfg.logit_std * torch.randn(b, generator=g))  # [B]
        eps = torch.randn(z0.shape, generator=g)  # [B, 4, h, w]
        num_null = torch.exp(torch.rand(b, generator=g) * math.log(cfg.max_null_tokens))  # [B] log-uniform [1, max]
        tb = t.view(b, 1, 1, 1)
        zt = (1 - tb) * z0 + tb * eps
        target = eps - z0
        embeds, pooled = encode_prompts(
            prompts, self.tokenizer, m["text_encoder"], m["text_encoder_2"], cfg.max_length
        )  # [B, L, 2H], [B, 2P]
        n_img_tokens = (z0.shape[-1] // 2) * (z0.shape[-2] // 2)
        context, mask = with_null_token(embeds, n_img_tokens, num_null)  # [B, L+1, 2H], [B, 1, 1, n_img+L+1]
        pred = m["transformer"](
            hidden_states=zt,
            timestep=t * 1000.0,
            encoder_hidden_states=context,
            pooled_projections=pooled,
            joint_attention_kwargs={"attention_mask": mask},
            return_dict=False,
        )[0]  # [B, 4, h, w]
        return {"loss": F.mse_loss(pred, target)}

    @torch.no_grad()
    def measure_latents(self, data: TrainingData) -> dict:
        """``shift = mean(z)``, ``scale = 1/std(z)`` of posterior samples ``z`` of fresh renders.

        Also the judge's strict score of the first 64 reconstructions (decoded posterior modes): an upper
        bound on what the flow model can reach.
        """
        from worlds.shapes.judge import judge

        vae, zs, strict = self.models["vae"], [], []
        for i, (rows, post, z) in enumerate(data.fresh_posteriors(vae, self.cfg.latent_stats_images)):
            zs.append(z)  # [b, 4, h, w]
            if i == 0:
                rec = (vae.decode(post.mode()).sample.clamp(-1, 1) + 1) / 2  # [b, 3, 64, 64] in [0, 1]
                strict = [judge(img.permute(1, 2, 0).numpy(), r)["strict"] for img, r in zip(rec, rows)]
        z = torch.cat(zs)
        stats = {
            "shift_factor": float(z.mean()),
            "scaling_factor": float(1.0 / z.std()),
            "vae/recon_strict": float(np.mean(strict)) if strict else float("nan"),
        }
        self.set_latent_stats(stats)
        return stats

    def set_latent_stats(self, stats: dict) -> None:
        self.latent_stats = stats
        self.models["vae"].register_to_config(
            shift_factor=stats["shift_factor"], scaling_factor=stats["scaling_factor"]
        )

    def pipeline(self):
        from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline

        m = self.models
        pipe = StableDiffusion3Pipeline(
            transformer=m["transformer"],
            scheduler=FlowMatchEulerDiscreteScheduler(shift=self.cfg.scheduler_shift),
            vae=m["vae"],
            text_encoder=m["text_encoder"],
            tokenizer=self.tokenizer,
            text_encoder_2=m["text_encoder_2"],
            tokenizer_2=self.tokenizer,
            text_encoder_3=None,
            tokenizer_3=None,
        )
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def policy_options(self) -> dict:
        return {**super().policy_options(), "max_sequence_length": self.cfg.eval_max_sequence_length}


RECIPE = SD3Recipe
