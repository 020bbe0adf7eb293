"""Adapter for ``WanPipeline`` (Wan 2.1 / 2.2 text-to-video): WanTransformer3DModel with the flow kernels; samples are
videos, float (B, F, 3, H, W) in [0, 1] (``sample_kind = "video"``).

Latents [B, C, F', h, w]: C = 16, F' = (F − 1) / 4 + 1 latent frames of the causal video VAE (F = ``sample.num_frames``,
which must be 4k + 1), h = H / 8; normalised per channel as the pipeline does ((z − mean) / std, undone by ``decode``).
The transformer patchifies (1, 2, 2) itself and takes the rollout's timestep t = 1000·σ as is. Videos are square
(``sample.resolution``, a multiple of 16).

Schedule: released checkpoints ship a UniPC multistep scheduler (flow sigmas, ``flow_shift``), a solver without a
per-step Gaussian density; the policy samples the same flow with our kernels on ``FlowMatchEulerDiscreteScheduler``
with ``shift = flow_shift`` (``scheduler_config``), whose σ grid differs slightly from UniPC's. The plain pipeline
the adapter test kit compares with runs that Euler scheduler (``reference_scheduler``).

Conditioning (the pipeline's ``encode_prompt``: UMT5 hidden states of the valid tokens, zero-padded to L =
``sample.max_sequence_length``): embeds / neg_embeds [B, L, D]. CFG: v(∅) + w·(v(c) − v(∅)), w = ``sample.guidance_scale``.

Wan 2.2 A14B (``transformer`` + ``transformer_2``, ``boundary_ratio``): the pipeline runs ``transformer`` (high noise)
at t ≥ boundary_ratio·1000 and ``transformer_2`` below (with one guidance scale for both here). ``denoiser`` is then
``WanExperts``, one nn.Module holding both that routes every sample by its timestep, so the trainer sees one trainable
module. ``sample.experts`` picks the expert(s) LoRA trains ("" = both); the LoRA export writes ``transformer``'s layers
as the default ``pytorch_lora_weights.safetensors`` (what ``load_lora_weights(dir)`` loads) and ``transformer_2``'s as
``pytorch_lora_weights_transformer_2.safetensors``, loaded by diffusers with
``load_lora_weights(dir, weight_name=..., load_into_transformer_2=True)`` (``load_lora`` does both).
"""

from __future__ import annotations

import os

import torch

from ddpo_grpo.policies.flow import FlowPolicy

#: the pipeline's default frame count and height (videos here are square)
DEFAULT_FRAMES = 81
DEFAULT_RESOLUTION = 480
#: the file the second expert's LoRA layers are written to (the first's is diffusers' default name)
EXPERT_2_WEIGHTS = "pytorch_lora_weights_transformer_2.safetensors"
EXPERTS = ("transformer", "transformer_2")


class WanExperts(torch.nn.Module):
    """Two experts as one module: ``transformer`` for timesteps ≥ ``boundary`` (high noise), ``transformer_2`` below.

    ``forward`` takes the transformers' keyword arguments with per-sample tensors batch-first and returns
    ``(output,)`` (``return_dict`` is ignored); a batch whose timesteps straddle the boundary is split, each part run by its expert, and
    reassembled in order (a training minibatch holds different steps of different samples).
    """

    def __init__(self, transformer: torch.nn.Module, transformer_2: torch.nn.Module, boundary: float):
        super().__init__()
        self.transformer = transformer
        self.transformer_2 = transformer_2
        self.boundary = float(boundary)

    @property
    def config(self):
        return self.transformer.config

    def experts_with_adapters(self) -> list[torch.nn.Module]:
        return [m for m in (self.transformer, self.transformer_2) if getattr(m, "peft_config", None)]

    def disable_adapters(self) -> None:
        for expert in self.experts_with_adapters():
            expert.disable_adapters()

    def enable_adapters(self) -> None:
        for expert in self.experts_with_adapters():
            expert.enable_adapters()

    def forward(self, hidden_states: torch.Tensor, timestep: torch.Tensor, return_dict: bool = False, **kwargs):
        high = timestep >= self.boundary  # [B]
        if bool(high.all()):
            return (self.transformer(hidden_states, timestep, return_dict=False, **kwargs)[0],)
        if not bool(high.any()):
            return (self.transformer_2(hidden_states, timestep, return_dict=False, **kwargs)[0],)
        out = None
        for expert, rows in ((self.transformer, high), (self.transformer_2, ~high)):
            part = {k: v[rows] if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
            y = expert(hidden_states[rows], timestep[rows], return_dict=False, **part)[0]
            out = y.new_empty((hidden_states.shape[0], *y.shape[1:])) if out is None else out
            out[rows] = y
        return (out,)


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
        self._experts = None
        if getattr(pipeline, "transformer_2", None) is not None and pipeline.config.boundary_ratio is not None:
            boundary = pipeline.config.boundary_ratio * pipeline.scheduler.config.num_train_timesteps
            self._experts = WanExperts(pipeline.transformer, pipeline.transformer_2, boundary)
        super().__init__(pipeline, settings, **kwargs)
        self.num_frames = self.check_frames(int(self.settings.num_frames) or DEFAULT_FRAMES)
        self.trained_experts = self.check_experts(self.settings.experts)

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
        """The shipped scheduler as a FlowMatchEuler config: its own if it is one, else ``shift = flow_shift``."""
        config = self.pipeline.scheduler.config
        if type(self.pipeline.scheduler).__name__ == "FlowMatchEulerDiscreteScheduler":
            return config
        if config.get("flow_shift") is None:
            raise ValueError(
                f"{type(self.pipeline.scheduler).__name__} has no flow_shift: a Wan pipeline needs a flow-matching "
                "scheduler (FlowMatchEulerDiscreteScheduler, or UniPC with use_flow_sigmas)"
            )
        return {"shift": float(config["flow_shift"]), "num_train_timesteps": int(config["num_train_timesteps"])}

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
        )
