"""Recipe: MotionWorld's text-to-motion base model in MDM's architecture, from scratch, on CPU.

The result is a :class:`ddpo_grpo.denoiser_pipeline.DenoiserPipeline` directory (``models/mdm/`` ships one) that
GRPO fine-tunes (``config/motion.py``); the loop, EMA, checkpoints, exact resume and evaluation are the
core's (:mod:`ddpo_grpo.pretraining`). Components:

* ``denoiser`` — :class:`~worlds.motion.model.MotionDenoiser` (MDM-style transformer, x̂₀ prediction);
* ``scheduler`` — ``DDPMScheduler``: cosine β (``squaredcos_cap_v2``, Nichol & Dhariwal 2021) over 1000
  steps as MDM, ``prediction_type="sample"``, ``variance_type="fixed_small"``, ``timestep_spacing="linspace"``
  (IDDPM / MDM respacing), ``clip_sample=False`` (features are not bounded);
* ``text_encoder`` + ``tokenizer`` — a small ``CLIPTextModelWithProjection`` trained jointly with the
  denoiser on a word-level tokenizer (:func:`ddpo_grpo.pretraining.tokenizer.build_word_tokenizer` over
  the grammar's words: one token per word); ``text_embedding`` "sequence" hands the denoiser every token's
  last hidden state as prefix tokens, "pooled" the projected EOS embedding as MDM's single condition token;
* ``normalizer`` — :class:`~worlds.motion.model.MotionNormalizer` with the shipped statistics
  (``data/motion_{mean,std}.npy``); CFG's unconditional branch is MDM's zero text embedding.

Data (:class:`MotionData`): ``clips_per_prompt`` clips of every train-split prompt from
:func:`worlds.motion.generator.generate_dataset` (master seed ``seed``), all ``frames + 1`` joint frames
long so that every clip has ``frames`` feature frames (the model's fixed sample shape), normalised and
kept as float16. Each step draws ``batch_size`` clips (uniformly, or by ``task_weights``) with a numpy
generator seeded ``seed``; a torch generator seeded ``seed + 1`` draws t, the noise and the dropout. Both
are saved in checkpoints.

Objective (DDPM with x₀ prediction, MDM eq. 2 / Ho et al. 2020 eq. 4), one stage ``mdm``::

    x₀  = normalize(features)                           # [B, F, 263]
    t   ~ U{0, …, 999},  ε ~ N(0, I)
    x_t = √ᾱ_t · x₀ + √(1 − ᾱ_t) · ε                      # q(x_t | x₀)
    c   = text_encoder(tokens(prompt)) · m,  m ~ Bernoulli(1 − cond_dropout)   # zero = unconditional
    L   = ‖ f_θ(x_t, t, c) − x₀ ‖²  (mean)               # L_simple on x₀ (MDM)
        + vel_weight · ‖ Δ_F f_θ − Δ_F x₀ ‖²             # optional frame-difference term (MDM's L_vel, here
                                                         # on the normalised features; 0 = off)
        + Σ_k geo_<k> · L_k(denormalize(f_θ), denormalize(x₀))   # optional geometric terms on recovered joints,
                                                         # k ∈ pos, vel, foot, floor, bone (geometry.py; 0 = off)

``bone_projection`` builds the skeleton into the denoiser (constant bone lengths; geometry.py).

Evaluation (every ``eval_every`` steps and at the end): deterministic samples (``eval_kernel``, η = 0,
``eval_steps`` steps, CFG ``eval_guidance``) of the *test* split's held-out compositions, ``eval_per_task``
per task, scored by the strict judge with the physics metrics (:func:`worlds.motion.evaluation.with_physics`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from ddpo_grpo.pretraining import PretrainConfig, Recipe, denoiser_stage

from .geometry import GEOMETRIC_TERMS
from .grammar import PHRASES, TASKS, all_prompts

TEXT_EMBEDDINGS = ("sequence", "pooled")
KERNELS = ("ddim", "ddpm")


def grammar_words() -> list[str]:
    """Every word of every MotionWorld prompt, in order of first appearance (the tokenizer's vocabulary)."""
    words = [w for prompt in all_prompts() for w in prompt.split()]
    for leg, arm in PHRASES.values():
        words += f"{leg} {arm}".split()
    return list(dict.fromkeys(words))


@dataclass
class MotionConfig(PretrainConfig):
    """Every setting of an MDM pretraining run (saved in each checkpoint; ``--resume`` reuses it)."""

    # ---- data ----
    frames: int = 96  # feature frames per clip (generated with frames + 1 joint frames; 20 fps)
    clips_per_prompt: int = 16  # generated clips per train prompt
    task_weights: tuple[float, ...] = ()  # per task of TASKS; () = every clip equally likely
    # ---- denoiser (MotionDenoiser) ----
    width: int = 128
    layers: int = 4
    heads: int = 4
    ff: int = 256
    smooth_kernel: int = 5  # > 0: a learned per-feature temporal filter of this (odd) length on x̂₀; 0 = off (MDM)
    bone_projection: bool = True  # project x̂₀'s joints onto bones of constant length (geometry.py); False = MDM
    # ---- text encoder (CLIPTextModelWithProjection, word-level tokenizer) ----
    text_embedding: str = "sequence"  # "sequence": every token as a prefix token | "pooled": MDM's one token
    text_hidden: int = 64
    text_layers: int = 2
    text_heads: int = 2
    text_ff: int = 128
    max_length: int = 16  # tokens incl. BOS/EOS (longest prompt: 11 words -> 13)
    text_lr_ratio: float = 1.0  # text-encoder lr = text_lr_ratio * lr; 0 freezes it
    # ---- objective and schedule ----
    num_train_timesteps: int = 1000
    vel_weight: float = 0.0
    # weights of the geometric terms on recovered joints (m² each, geometry.py); 0 = off
    geo_pos: float = 0.0  # MDM L_pos: joint positions
    geo_vel: float = 0.0  # MDM L_vel: joint velocities (m per frame)
    geo_foot: float = 0.0  # MDM L_foot: contact joints of the data do not move
    geo_floor: float = 1000.0  # no joint under the floor
    geo_bone: float = 0.0  # bone lengths of the data, every frame
    steps: int = 3000  # the shipped model (worlds/motion/README.md, "Base model")
    lr: float = 1e-3
    warmup_steps: int = 200
    cond_dropout: float = 0.1
    # ---- evaluation ----
    eval_every: int = 500
    eval_per_task: int = 32
    final_eval_per_task: int = 100
    eval_steps: int = 20
    eval_guidance: float = 2.5  # MDM's guidance scale
    eval_kernel: str = "ddim"  # deterministic DDIM (η = 0) | "ddpm": the posterior-mean chain
    ckpt_every: int = 500
    log_every: int = 50

    RESUME_MUTABLE: ClassVar[tuple[str, ...]] = (
        "steps",
        "eval_kernel",
        "eval_guidance",
        "eval_steps",
        *PretrainConfig.RESUME_MUTABLE,
    )
    TINY: ClassVar[dict] = dict(
        PretrainConfig.TINY,
        frames=16,
        clips_per_prompt=1,
        width=16,
        layers=1,
        heads=2,
        ff=32,
        text_hidden=16,
        text_layers=1,
        text_ff=32,
        steps=3,
        eval_steps=2,
    )

    def validate(self) -> None:
        super().validate()
        if not 16 <= self.frames <= 199:
            raise ValueError(
                f"frames={self.frames} must be in [16, 199] feature frames (the generator draws "
                "frames + 1 joint frames; under 59 it pads the timeline: use >= 59 for real runs)"
            )
        if self.clips_per_prompt < 1:
            raise ValueError(f"clips_per_prompt must be >= 1; got {self.clips_per_prompt}")
        w = self.task_weights
        if w and (len(w) != len(TASKS) or min(w) < 0 or sum(w) <= 0):
            raise ValueError(
                f"task_weights needs {len(TASKS)} non-negative weights ({', '.join(TASKS)}), not all "
                f"zero, or () for uniform clips; got {w}"
            )
        if self.width % self.heads or self.width % 2:
            raise ValueError(f"width={self.width} must be even and a multiple of heads={self.heads}")
        if self.text_hidden % self.text_heads:
            raise ValueError(f"text_hidden={self.text_hidden} must be a multiple of text_heads={self.text_heads}")
        if self.text_embedding not in TEXT_EMBEDDINGS:
            raise ValueError(f"text_embedding={self.text_embedding!r} must be one of {TEXT_EMBEDDINGS}")
        if self.eval_kernel not in KERNELS:
            raise ValueError(f"eval_kernel={self.eval_kernel!r} must be one of {KERNELS}")
        longest = max(len(p.split()) for p in all_prompts()) + 2
        if self.max_length < longest:
            raise ValueError(f"max_length={self.max_length} < {longest} would truncate the longest MotionWorld prompts")
        if self.steps < 1:
            raise ValueError(f"steps must be >= 1; got {self.steps}")
        if self.text_lr_ratio < 0 or self.vel_weight < 0:
            raise ValueError("text_lr_ratio and vel_weight must be >= 0 (text_lr_ratio 0 freezes the text encoder)")
        for term in GEOMETRIC_TERMS:
            if getattr(self, f"geo_{term}") < 0:
                raise ValueError(f"geo_{term}={getattr(self, f'geo_{term}')} must be >= 0 (0 turns the term off)")


@functools.lru_cache(maxsize=4)
def training_clips(
    seed: int, clips_per_prompt: int, frames: int
) -> tuple[torch.Tensor, tuple[str, ...], tuple[str, ...]]:
    """The generated training set: ``(x₀ [N, frames, 263] float16 normalised, prompts, tasks)`` (cached, read-only)."""
    from .features import normalize
    from .generator import generate_dataset
    from .grammar import train_rows

    items = generate_dataset(train_rows(), clips_per_prompt, seed=seed, with_joints=False, frames=max(frames + 1, 60))
    feats = np.stack([normalize(it["features"])[:frames] for it in items])  # [N, F, 263]
    return (
        torch.from_numpy(feats.astype(np.float16)),
        tuple(it["prompt"] for it in items),
        tuple(it["task"] for it in items),
    )


class MotionData:
    """The generated training clips and the training randomness (module docstring)."""

    def __init__(self, cfg: MotionConfig):
        self.x0, self.prompts, tasks = training_clips(cfg.seed, cfg.clips_per_prompt, cfg.frames)
        if cfg.task_weights:
            weight = dict(zip(TASKS, cfg.task_weights))
            counts = {t: tasks.count(t) for t in set(tasks)}
            p = np.array([weight[t] / counts[t] for t in tasks], dtype=np.float64)
        else:
            p = np.ones(len(tasks))
        self.p = p / p.sum()
        self.rng = np.random.default_rng(cfg.seed)  # which clips
        self.gen = torch.Generator().manual_seed(cfg.seed + 1)  # t, noise, condition dropout

    def batch(self, n: int) -> tuple[torch.Tensor, list[str]]:
        """``n`` clips: ``(x₀ [n, F, 263] float32, prompts)``."""
        idx = self.rng.choice(len(self.prompts), size=n, p=self.p)
        return self.x0[idx].float(), [self.prompts[i] for i in idx]

    def state_dict(self) -> dict:
        return {"data_rng": self.rng.bit_generator.state, "torch_gen": self.gen.get_state().tolist()}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["data_rng"]
        self.gen.set_state(torch.tensor(state["torch_gen"], dtype=torch.uint8))


def encode_text(prompts: Sequence[str], tokenizer, text_encoder, mode: str) -> torch.Tensor:
    """What ``DenoiserPipeline.encode_prompt`` hands the denoiser: ``[B, C]`` ("pooled") or ``[B, L, C]``."""
    ids = tokenizer(
        list(prompts), padding="max_length", max_length=tokenizer.model_max_length, truncation=True, return_tensors="pt"
    ).input_ids  # [B, L]
    out = text_encoder(ids)
    return out.text_embeds if mode == "pooled" else out.last_hidden_state


def make_scheduler(cfg: MotionConfig):
    """The ``DDPMScheduler`` trained against and saved with the pipeline (module docstring)."""
    from diffusers import DDPMScheduler

    return DDPMScheduler(
        num_train_timesteps=cfg.num_train_timesteps,
        beta_schedule="squaredcos_cap_v2",
        prediction_type="sample",
        variance_type="fixed_small",
        clip_sample=False,
        timestep_spacing="linspace",
    )


class MDMRecipe(Recipe):
    """Text encoder + MDM denoiser by DDPM with x₀ prediction (module docstring)."""

    config_class = MotionConfig
    eval_group_by = "task"
    eval_metric = "strict"

    def __init__(self, cfg: MotionConfig):
        from transformers import CLIPTextModelWithProjection

        from ddpo_grpo.pretraining.tokenizer import build_word_tokenizer, word_text_config

        from .features import load_stats
        from .model import MotionDenoiser, MotionNormalizer

        cfg.validate()
        self.cfg = cfg
        self.tokenizer = build_word_tokenizer(grammar_words(), cfg.max_length)
        torch.manual_seed(cfg.seed)
        text_cfg = word_text_config(
            self.tokenizer,
            hidden=cfg.text_hidden,
            ff=cfg.text_ff,
            layers=cfg.text_layers,
            heads=cfg.text_heads,
            projection_dim=cfg.text_hidden,
        )
        text_encoder = CLIPTextModelWithProjection(text_cfg).requires_grad_(cfg.text_lr_ratio > 0)
        denoiser = MotionDenoiser(
            frames=cfg.frames,
            width=cfg.width,
            layers=cfg.layers,
            heads=cfg.heads,
            ff=cfg.ff,
            text_dim=cfg.text_hidden,
            max_text_tokens=cfg.max_length,
            smooth_kernel=cfg.smooth_kernel,
            bone_projection=cfg.bone_projection,
        )
        self.normalizer = MotionNormalizer.from_stats(*load_stats(), bone_projection=cfg.bone_projection)
        self.models = {"text_encoder": text_encoder, "denoiser": denoiser}
        self.stages = [denoiser_stage("mdm", cfg, "denoiser")]
        self.ema_modules = self.stages[0].modules
        self.alphas_cumprod = make_scheduler(cfg).alphas_cumprod.float()  # [T]

    def make_data(self) -> MotionData:
        return MotionData(self.cfg)

    def loss(self, stage: str, data: MotionData) -> dict[str, torch.Tensor]:
        """The x₀ loss of the module docstring."""
        cfg, m, g = self.cfg, self.models, data.gen
        x0, prompts = data.batch(cfg.batch_size)  # [B, F, D]
        b = len(prompts)
        t = torch.randint(0, cfg.num_train_timesteps, (b,), generator=g)  # [B]
        eps = torch.randn(x0.shape, generator=g)  # [B, F, D]
        keep = (torch.rand(b, generator=g) >= cfg.cond_dropout).float()  # [B] 0 = unconditional
        ab = self.alphas_cumprod[t].view(b, 1, 1)  # ᾱ_t
        xt = ab.sqrt() * x0 + (1 - ab).sqrt() * eps  # q(x_t | x_0)
        cond = encode_text(prompts, self.tokenizer, m["text_encoder"], cfg.text_embedding)  # [B, C] | [B, L, C]
        cond = cond * keep.view(b, *([1] * (cond.ndim - 1)))
        pred = m["denoiser"](xt, t, text_embeds=cond)  # [B, F, D]
        mse = F.mse_loss(pred, x0)
        out = {"loss": mse, "mse": mse.detach()}
        if cfg.vel_weight > 0:
            vel = F.mse_loss(pred[:, 1:] - pred[:, :-1], x0[:, 1:] - x0[:, :-1])
            out["loss"] = mse + cfg.vel_weight * vel
            out["vel"] = vel.detach()
        weights = {k: getattr(cfg, f"geo_{k}") for k in GEOMETRIC_TERMS}
        if any(weights.values()):
            from .geometry import geometric_losses

            norm = self.normalizer  # denormalise: x · std + mean
            geo = geometric_losses(norm.decode(pred), norm.decode(x0))
            for k, w in weights.items():
                if w:
                    out["loss"] = out["loss"] + w * geo[k]
                    out[f"geo_{k}"] = geo[k].detach()
        return out

    def pipeline(self):
        from ddpo_grpo.denoiser_pipeline import DenoiserPipeline

        from .model import LORA_TARGETS

        m = self.models
        pipe = DenoiserPipeline(
            denoiser=m["denoiser"],
            scheduler=make_scheduler(self.cfg),
            text_encoder=m["text_encoder"],
            tokenizer=self.tokenizer,
            normalizer=self.normalizer,
            sample_shape=[self.cfg.frames, m["denoiser"].config.feature_dim],
            text_embedding=self.cfg.text_embedding,
            uncond="zeros",
            lora_target_modules=LORA_TARGETS,
        )
        pipe.set_progress_bar_config(disable=True)
        return pipe

    def eval_rows(self) -> list[dict]:
        from .grammar import test_rows

        return test_rows()

    def eval_reward(self):
        from reward_models import load_reward

        from .evaluation import with_physics

        return with_physics(load_reward("motion_judge", score="strict"))

    def policy_options(self) -> dict:
        return {"kernel": self.cfg.eval_kernel}


RECIPE = MDMRecipe

__all__ = [
    "KERNELS",
    "MDMRecipe",
    "MotionConfig",
    "MotionData",
    "RECIPE",
    "encode_text",
    "grammar_words",
    "make_scheduler",
    "training_clips",
]
