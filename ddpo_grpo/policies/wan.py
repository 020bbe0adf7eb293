"""Adapter for ``WanPipeline`` (Wan 2.1 / 2.2 text-to-video): WanTransformer3DModel with the flow kernels; samples are
videos, float (B, F, 3, H, W) in [0, 1] (``sample_kind = "video"``).

Latents [B, C, F', h, w]: C = 16, F' = (F − 1) / 4 + 1 latent frames of the causal video VAE (F = ``sample.num_frames``,
which must be 4k + 1), h = H / 8; normalised per channel as the pipeline does ((z − mean) / std, undone by ``decode``).
The transformer patchifies (1, 2, 2) itself and takes the rollout's timestep t = 1000·σ as is. Videos are square
(``sample.resolution``, a multiple of 16).

Schedule: released checkpoints ship a UniPC multistep scheduler (``use_flow_sigmas``, ``flow_shift``), a multistep
solver without a per-step Gaussian density. The policy samples the checkpoint scheduler's own σ grid (what its
``set_timesteps(T)`` draws: σ_i = s·u_i / (1 + (s − 1)·u_i), u_i = linspace(1, 1/1000, T + 1)[i], s = flow_shift, the
first σ lowered by 1e-6, σ_T = 0; ``sampling_sigmas``) through our one-step kernels, the denoiser seeing t = 1000·σ
(the UniPC pipeline feeds int(1000·σ)). The grid is the checkpoint's; the solver is not: Euler steps where UniPC
corrects with the previous step's prediction, so noise level 0 follows the plain UniPC pipeline closely, not exactly
(1.6 % of the final latent's norm at 20 steps on the tiny Wan; tests/test_wan.py). The forward-process objectives use
σ(u) = s·u / (1 + (s − 1)·u) (``scheduler_config``: FlowMatchEuler with ``shift = flow_shift``). The plain pipeline
the adapter test kit compares with is FlowMatchEuler handed that grid (``reference_scheduler``, ``GridEuler``): the
rollout equals it. A checkpoint shipping FlowMatchEuler is sampled on its own scheduler, as every flow family.

Conditioning (the pipeline's ``encode_prompt``: UMT5 hidden states of the valid tokens, zero-padded to L =
``sample.max_sequence_length``): embeds / neg_embeds [B, L, D]. CFG: v(∅) + w·(v(c) − v(∅)), w = ``sample.guidance_scale``.

Wan 2.2 A14B (``transformer`` + ``transformer_2``, ``boundary_ratio``): the pipeline runs ``transformer`` (high noise)
at t ≥ boundary_ratio·1000 and ``transformer_2`` below, the latter with w = ``sample.guidance_scale_2`` (the pipeline's
``guidance_scale_2``; 0 / None = ``sample.guidance_scale``); CFG is on for both when ``sample.guidance_scale`` > 1, as
in the pipeline. ``predict`` gives each sample its expert's w, in sampling and in training alike. ``denoiser`` is then
``WanExperts``, one nn.Module holding both that routes every sample by its timestep, so the trainer sees one trainable
module; with several processes every process takes the same collective path (``WanExperts.calls``). ``sample.experts``
picks the expert(s) LoRA trains ("" = both); the LoRA export writes ``transformer``'s layers as the default
``pytorch_lora_weights.safetensors`` (what ``load_lora_weights(dir)`` loads) and ``transformer_2``'s as
``pytorch_lora_weights_transformer_2.safetensors``, loaded by diffusers with
``load_lora_weights(dir, weight_name=..., load_into_transformer_2=True)`` (``load_lora`` does both).
"""

from __future__ import annotations

import os

import torch
from diffusers import FlowMatchEulerDiscreteScheduler

from ddpo_grpo.policies.flow import FlowPolicy
from ddpo_grpo.policies.wan_experts import WanExperts  # (its own module; importable from here)

#: the pipeline's default frame count and height (videos here are square)
DEFAULT_FRAMES = 81
DEFAULT_RESOLUTION = 480
#: the file the second expert's LoRA layers are written to (the first's is diffusers' default name)
EXPERT_2_WEIGHTS = "pytorch_lora_weights_transformer_2.safetensors"
EXPERTS = ("transformer", "transformer_2")


class GridEuler(FlowMatchEulerDiscreteScheduler):
    """FlowMatchEuler stepping on the σ grids of ``grid(T) -> [T + 1]`` (set on the instance): ``set_timesteps(T)``
    takes grid(T) as its σ's with t = 1000·σ, so a plain pipeline samples the σ's a policy's ``sampling_sigmas`` gives.
    Built with shift 1, which leaves the given σ's as they are (σ / 1)."""

    grid = None

    def set_timesteps(self, num_inference_steps=None, device=None, **kwargs):
        sigmas = self.grid(num_inference_steps)  # [T + 1]
        super().set_timesteps(num_inference_steps, device=device, sigmas=sigmas[:-1].numpy(), **kwargs)
        self.sigmas[-1] = sigmas[-1]


class WanPolicy(FlowPolicy):
    denoiser_attr = "transformer"
    lora_layers_kwarg = "transformer_lora_layers"
    default_lora_targets = ("to_q", "to_k", "to_v", "to_out.0")
    shard_blocks = ("WanTransformerBlock",)
    sample_kind = "video"

    def __init__(self, pipeline, settings=None, **kwargs):
        if getattr(pipeline.config, "expand_timesteps", False):
            raise ValueError(
                f"{type(pipeline).__name__} with expand_timesteps (Wan2.2-TI2V-5B: per-token timesteps) is not "
                "supported; use a Wan 2.1 or Wan 2.2 A14B checkpoint"
            )
        shipped = pipeline.scheduler
        #: a copy of the scheduler the checkpoint ships (the pipeline's may be swapped: ``reference_sample``)
        self.shipped_scheduler = type(shipped).from_config(shipped.config)
        self._experts = None
        if getattr(pipeline, "transformer_2", None) is not None and pipeline.config.boundary_ratio is not None:
            boundary = pipeline.config.boundary_ratio * pipeline.scheduler.config.num_train_timesteps
            self._experts = WanExperts(pipeline.transformer, pipeline.transformer_2, boundary)
        super().__init__(pipeline, settings, **kwargs)
        self.num_frames = self.check_frames(int(self.settings.num_frames) or DEFAULT_FRAMES)
        self.trained_experts = self.check_experts(self.settings.experts)
        self.guidance_scale_2 = self.check_guidance_scale_2(self.settings.guidance_scale_2)

    # ---- the trainable module -----------------------------------------------------------------
    @property
    def denoiser(self) -> torch.nn.Module:
        return self._experts if self._experts is not None else self.pipeline.transformer

    def denoiser_modules(self) -> list[torch.nn.Module]:
        e = self._experts
        return [self.pipeline.transformer] if e is None else [e.transformer, e.transformer_2]

    @classmethod
    def denoiser_components(cls, index: dict) -> tuple[str, ...]:
        second = index.get(EXPERTS[1])  # Wan 2.2's low-noise expert: ["diffusers", "WanTransformer3DModel"] or nulls
        two = isinstance(second, list) and second[0] is not None and index.get("boundary_ratio") is not None
        return EXPERTS if two else EXPERTS[:1]  # (as __init__ pairs them)

    def check_experts(self, experts: str) -> tuple[str, ...]:
        """The expert attributes LoRA trains: all for "", else the one named; ValueError naming ``sample.experts``."""
        names = EXPERTS if self._experts is not None else EXPERTS[:1]
        if not experts:
            return names
        if experts not in names:
            raise ValueError(
                f"sample.experts={experts!r}: {type(self.pipeline).__name__} has the experts {list(names)} "
                "('' = all of them)"
            )
        return (experts,)

    def check_guidance_scale_2(self, value) -> float | None:
        """The low-noise expert's guidance (None = the high-noise expert's, for 0 / None); ValueError naming
        ``sample.guidance_scale_2`` when it is negative or the pipeline has one transformer (as the pipeline refuses it)."""
        if not value:
            return None
        if not float(value) >= 0:
            raise ValueError(f"sample.guidance_scale_2={value!r} must be ≥ 0 (0 = sample.guidance_scale)")
        if self._experts is None:
            raise ValueError(
                f"sample.guidance_scale_2={value!r}: {type(self.pipeline).__name__} has one transformer (no "
                "boundary_ratio), so there is no low-noise expert to guide; leave it 0"
            )
        return float(value)

    def add_lora(self, *, rank, alpha, target_modules, dropout=0.0):
        """A LoRA adapter "default" on each trained expert (``sample.experts``); every base weight frozen."""
        from peft import LoraConfig

        targets = list(target_modules) or list(self.default_lora_targets)
        self.denoiser.requires_grad_(False)
        for name in self.trained_experts:
            config = LoraConfig(
                r=rank, lora_alpha=alpha, lora_dropout=dropout, init_lora_weights="gaussian", target_modules=targets
            )
            getattr(self.pipeline, name).add_adapter(config)

    def save_lora(self, out_dir, model, state_dict: dict | None = None):
        """Each trained expert's layers in diffusers' format (module docstring for the file names). ``state_dict``:
        the model's trainable tensors when they are not its own (a sharded run's, gathered; named as in ``model``)."""
        from peft.utils import get_peft_model_state_dict

        experts = {"transformer": model} if self._experts is None else {n: getattr(model, n) for n in EXPERTS}
        for name, expert in experts.items():
            if not getattr(expert, "peft_config", None):
                continue
            own = state_dict
            if state_dict is not None and self._experts is not None:
                own = {k[len(name) + 1 :]: v for k, v in state_dict.items() if k.startswith(name + ".")}
            type(self.pipeline).save_lora_weights(
                str(out_dir),
                transformer_lora_layers=get_peft_model_state_dict(expert, state_dict=own),
                transformer_lora_adapter_metadata=expert.peft_config["default"].to_dict(),
                **({"weight_name": EXPERT_2_WEIGHTS} if name == "transformer_2" else {}),
            )

    @classmethod
    def load_lora(cls, pipeline, lora_dir: str) -> None:
        """Load a ``save_lora`` export: the default file into ``transformer``, the second expert's into
        ``transformer_2`` (diffusers' ``load_into_transformer_2``)."""
        if os.path.isfile(os.path.join(lora_dir, "pytorch_lora_weights.safetensors")):
            pipeline.load_lora_weights(lora_dir)
        if os.path.isfile(os.path.join(lora_dir, EXPERT_2_WEIGHTS)):
            pipeline.load_lora_weights(lora_dir, weight_name=EXPERT_2_WEIGHTS, load_into_transformer_2=True)

    # ---- shapes ---------------------------------------------------------------------------------
    @property
    def vae_scale_factor(self) -> int:
        return int(self.pipeline.vae.config.scale_factor_spatial)

    @property
    def resolution_multiple(self) -> int:
        return self.vae_scale_factor * int(self.pipeline.transformer.config.patch_size[1])

    @classmethod
    def native_resolution(cls, pipeline) -> int:
        return DEFAULT_RESOLUTION

    def check_frames(self, frames: int) -> int:
        """``frames`` if the causal VAE can take it (F = 4k + 1); ValueError naming ``sample.num_frames`` otherwise."""
        step = int(self.pipeline.vae.config.scale_factor_temporal)
        if frames < 1 or (frames - 1) % step:
            low = max(1, (frames - 1) // step * step + 1)
            raise ValueError(
                f"sample.num_frames={frames}: {type(self.pipeline).__name__} takes {step}k + 1 frames "
                f"(nearest: {low} or {low + step})"
            )
        return frames

    def latent_shape(self) -> tuple[int, ...]:
        side = self.resolution // self.vae_scale_factor
        frames = (self.num_frames - 1) // int(self.pipeline.vae.config.scale_factor_temporal) + 1
        return (self.pipeline.vae.config.z_dim, frames, side, side)

    def image_seq_len(self) -> int:
        c, f, h, w = self.latent_shape()
        return f * (h // 2) * (w // 2)

    def scheduler_config(self):
        """The shipped scheduler as a FlowMatchEuler config: its own if it is one, else ``shift = flow_shift`` (the
        forward-process objectives' σ(u); sampling takes the shipped grid, ``sampling_sigmas``)."""
        config = self.shipped_scheduler.config
        if type(self.shipped_scheduler) is FlowMatchEulerDiscreteScheduler:
            return config
        if config.get("flow_shift") is None or not config.get("use_flow_sigmas", False):
            raise ValueError(
                f"{type(self.shipped_scheduler).__name__} without flow sigmas: a Wan pipeline needs a flow-matching "
                "scheduler (FlowMatchEulerDiscreteScheduler, or UniPC with use_flow_sigmas and flow_shift)"
            )
        return {"shift": float(config["flow_shift"]), "num_train_timesteps": int(config["num_train_timesteps"])}

    def sampling_sigmas(self, num_steps: int) -> torch.Tensor | None:
        """The shipped scheduler's own σ grid [T + 1] (its ``set_timesteps(T)``), unless it is FlowMatchEuler."""
        if type(self.shipped_scheduler) is FlowMatchEulerDiscreteScheduler:
            return None
        self.shipped_scheduler.set_timesteps(num_steps)
        return self.shipped_scheduler.sigmas.float().clone()  # [T + 1]

    def reference_scheduler(self):
        """The plain pipeline's scheduler for the kit: FlowMatchEuler on the grid the policy samples (``GridEuler``
        given ``sampling_sigmas``), or the shipped FlowMatchEuler itself."""
        if type(self.shipped_scheduler) is FlowMatchEulerDiscreteScheduler:
            return super().reference_scheduler()
        sched = GridEuler(shift=1.0, num_train_timesteps=self.scheduler.config.num_train_timesteps)
        sched.grid = self.sampling_sigmas
        return sched

    # ---- conditioning -----------------------------------------------------------------------------
    def encode_prompts(self, prompts, negative_prompt=""):
        prompts = list(prompts)
        embeds, neg_embeds = self.pipeline.encode_prompt(
            prompt=prompts,
            negative_prompt=[negative_prompt] * len(prompts),
            do_classifier_free_guidance=True,
            max_sequence_length=self.max_sequence_length,
            device=self.device,
        )
        return {"embeds": embeds, "neg_embeds": neg_embeds}  # [B, L, D] each

    # ---- denoiser -------------------------------------------------------------------------------
    def model_input(self, latents, cond) -> torch.Tensor:
        """What the transformer's ``hidden_states`` get (text-to-video: the latent itself)."""
        return latents

    def guidance_of(self, timesteps: torch.Tensor, guidance_scale: float):
        """w per sample: ``guidance_scale_2`` for the low-noise expert's samples (t < boundary), ``guidance_scale`` for
        the others; a float when one value serves the whole batch, else [B, 1, 1, 1, 1]."""
        low = timesteps < self._experts.boundary  # [B]
        if bool(low.all()) or not bool(low.any()):
            return self.guidance_scale_2 if bool(low.all()) else float(guidance_scale)
        w = torch.where(low, self.guidance_scale_2, float(guidance_scale))  # [B]
        return w.view(-1, 1, 1, 1, 1)

    def predict(self, model, latents, timesteps, cond, guidance_scale: float, detach_uncond: bool = False):
        """``Policy.predict`` with each sample's expert's w (``guidance_scale_2``, the module docstring): CFG when
        ``guidance_scale`` > 1, both branches in one batch of 2B, uncond first, as ``Policy.predict`` runs them."""
        if self.guidance_scale_2 is None or guidance_scale <= 1.0:
            return super().predict(model, latents, timesteps, cond, guidance_scale, detach_uncond)
        positive = {k: v for k, v in cond.items() if not k.startswith("neg_")}
        both = {k: torch.cat([cond.get("neg_" + k, v), v]) for k, v in positive.items()}  # [2B, ...]
        out = self.forward(model, torch.cat([latents, latents]), torch.cat([timesteps, timesteps]), both)
        uncond, text = out.chunk(2)  # [B, C, F', h, w] each
        if detach_uncond:
            uncond = uncond.detach()
        w = self.guidance_of(timesteps, guidance_scale)
        return self.guide(uncond, text, w.to(out.dtype) if isinstance(w, torch.Tensor) else w)

    def forward(self, model, latents, timesteps, cond):
        extra = {"encoder_hidden_states_image": cond["image_embeds"]} if "image_embeds" in cond else {}
        return model(
            hidden_states=self.model_input(latents, cond),
            timestep=timesteps,
            encoder_hidden_states=cond["embeds"],
            return_dict=False,
            **extra,
        )[0]  # [B, C, F', h, w]

    def decode(self, latents):
        """[B, C, F', h, w] -> videos [B, F, 3, H, W] in [0, 1] (the pipeline's de-normalisation and decoding)."""
        vae = self.pipeline.vae
        z = latents.to(vae.dtype)
        mean = torch.tensor(vae.config.latents_mean).view(1, -1, 1, 1, 1).to(z.device, z.dtype)
        inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, -1, 1, 1, 1).to(z.device, z.dtype)
        video = vae.decode(z / inv_std + mean, return_dict=False)[0]  # [B, 3, F, H, W] in [-1, 1]
        return (video.float() / 2 + 0.5).clamp(0, 1).permute(0, 2, 1, 3, 4)  # [B, F, 3, H, W]

    def preview(self, samples):
        """A filmstrip per video (``ddpo_grpo.video.filmstrip``): [B, 3, H, k·W]."""
        from ddpo_grpo.video import filmstrip

        return filmstrip(samples)

    # ---- the plain pipeline ---------------------------------------------------------------------
    def pipeline_kwargs(self, rows, latents, guidance_scale, negative_prompt):
        prompts = [r["prompt"] for r in rows]
        return dict(
            prompt=prompts,
            negative_prompt=[negative_prompt] * len(prompts),
            guidance_scale=guidance_scale,
            height=self.resolution,
            width=self.resolution,
            num_frames=self.num_frames,
            latents=latents,
            max_sequence_length=self.max_sequence_length,
            **({"guidance_scale_2": self.guidance_scale_2} if self.guidance_scale_2 is not None else {}),
        )


# ---- the family's registration (ddpo_grpo.policies.family) -------------------------------------------------
from ddpo_grpo.policies.family import Checkpoint, FamilySpec  # noqa: E402 (the spec block closes the adapter file)


def real_cut(shipped: dict, encoders) -> dict:
    """1 block of 2 heads (of the shipped head width, which the RoPE axes split); the cut encoders' widths (UMT5's;
    the CLIP image encoder's for Wan 2.1 image-to-video)."""
    heads = 2
    cut = dict(num_layers=1, num_attention_heads=heads, text_dim=encoders["text_encoder"].d_model)
    if shipped.get("image_dim") is not None:
        cut["image_dim"] = encoders["image_encoder"].hidden_size
    if shipped.get("added_kv_proj_dim") is not None:  # the image tokens' keys / values: the blocks' width
        cut["added_kv_proj_dim"] = heads * shipped["attention_head_dim"]
    return cut


SPEC = FamilySpec(
    name="wan",
    pipeline="WanPipeline",
    adapter=WanPolicy,
    tiny="ddpo_grpo.tiny.wan:build_tiny_wan",
    checkpoints=(
        Checkpoint("wan2.1-t2v-1.3b", recipe="config.wan:t2v", hub_ids=("Wan-AI/Wan2.1-T2V-1.3B-Diffusers",)),
        Checkpoint("wan2.1-t2v-14b", recipe="config.wan:t2v", hub_ids=("Wan-AI/Wan2.1-T2V-14B-Diffusers",)),
        Checkpoint("wan2.2-t2v-a14b", recipe="config.wan:t2v_a14b", hub_ids=("Wan-AI/Wan2.2-T2V-A14B-Diffusers",)),
    ),
    real_cut=real_cut,
    geometry="wan",
)
