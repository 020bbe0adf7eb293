"""Causal language models (any transformers ``*ForCausalLM``): a response is a trajectory whose steps are tokens.

The adapter is the only place that knows a language model's calling convention, as a family adapter is for a
diffusion model; the rollout (``token_rollout.py``) and the updater (``token_updates.py``) call it:

    encode_rows(rows)                          -> prompt ids [B, P] left-padded, their mask, the rendered prompts
    logits(model, ids, mask)                   -> next-token logits [B, S, V] of a padded batch (positions from the mask)
    response_logprobs(model, ids, mask, P, T)  -> log π(y_t | x, y_<t) [B, L] and the entropy [B, L] of a batch of
                                                  prompts (first P columns) + responses: THE forward the trainer
                                                  differentiates and the rollout stores the log-probs of
    decode(ids, mask)                          -> the response strings the rewards score

A row's prompt is a string (tokenised as is) or a list of chat messages (``[{"role": …, "content": …}]``), rendered
by the tokenizer's chat template with the generation prompt; a batch of both kinds is refused, as is a prompt longer
than ``sample.max_prompt_length`` or than the model's context with the response, and a tokenizer without a pad token.

LoRA is injected with peft (``inject_adapter_in_model``), so the reference policy is the model with its adapter
switched off (``set_adapters``, ``reference.Reference``) and ``final/`` is peft's format: ``PeftModel.from_pretrained(
AutoModelForCausalLM.from_pretrained(base), final)`` loads it. A full fine-tune's ``final/`` is the model and its
tokenizer (``AutoModelForCausalLM.from_pretrained(final)``). FSDP2 shards the decoder layers: the model's own
``_no_split_modules`` (Qwen2DecoderLayer, LlamaDecoderLayer, …).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import torch

from ddpo_grpo.token_losses import token_entropy, token_logprobs

#: LoRA targets when train.lora_target_modules is empty: every projection of attention and MLP (Llama / Qwen names)
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LanguageSettings:
    """What the adapter reads from the config's ``sample`` section (each documented, with its default, in
    config/base.py); ``unset(**given)`` for code without a config."""

    temperature: float
    top_p: float
    max_prompt_length: int
    max_response_length: int
    stop: tuple[str, ...]
    #: take the most likely token at each step instead of drawing one (evaluation only, scripts/evaluate.py --greedy:
    #: no config field sets it, a greedy rollout has no transition to train); log-probs stay at ``temperature``
    greedy: bool = False

    @classmethod
    def from_config(cls, sample) -> LanguageSettings:
        return cls(
            float(sample.temperature),
            float(sample.top_p),
            int(sample.max_prompt_length),
            int(sample.max_response_length),
            tuple(sample.stop or ()),
        )

    @classmethod
    def unset(cls, **given) -> LanguageSettings:
        defaults = {"temperature": 1.0, "top_p": 1.0, "max_prompt_length": 512, "max_response_length": 256, "stop": ()}
        return cls(**{**defaults, **given})


class CausalLMPolicy:
    """The adapter of a ``language_model.LanguageModel`` (module docstring)."""

    sample_kind = "text"
    kernel = "tokens"
    denoiser_attr = "model"
    image_conditioned = False
    default_lora_targets = LORA_TARGETS
    resolution = 0

    def __init__(self, pipeline, settings: LanguageSettings | None = None, **given):
        settings = settings or LanguageSettings.unset()
        self.pipeline = pipeline
        self.settings = dataclasses.replace(settings, **given) if given else settings
        s = self.settings
        if not s.temperature > 0:
            raise ValueError(
                f"sample.temperature={s.temperature} must be > 0 (a greedy rollout has no transition to train)"
            )
        if not 0 < s.top_p <= 1:
            raise ValueError(f"sample.top_p={s.top_p} must be in (0, 1]")
        if s.max_response_length < 1 or s.max_prompt_length < 1:
            raise ValueError(
                f"sample.max_prompt_length={s.max_prompt_length} and sample.max_response_length="
                f"{s.max_response_length} must be ≥ 1"
            )
        tokenizer = self.tokenizer
        if tokenizer.pad_token_id is None:
            raise ValueError(
                f"the tokenizer of pretrained.model ({type(tokenizer).__name__}) has no pad token; give it one "
                "(e.g. tokenizer.pad_token = tokenizer.eos_token; tokenizer.save_pretrained(model_dir))"
            )
        if tokenizer.eos_token_id is None and not s.stop:
            raise ValueError(
                "the tokenizer of pretrained.model has no EOS token and sample.stop is empty: a response could never end"
            )
        context = self.context_length
        if context and s.max_prompt_length + s.max_response_length > context:
            raise ValueError(
                f"sample.max_prompt_length + sample.max_response_length = {s.max_prompt_length + s.max_response_length} "
                f"tokens exceed the model's context of {context} (max_position_embeddings); lower them"
            )

    # ---- what the run reads of any policy ---------------------------------------------------------------
    @classmethod
    def settings_from(cls, sample) -> LanguageSettings:
        return LanguageSettings.from_config(sample)

    @property
    def model(self) -> torch.nn.Module:
        return self.pipeline.model

    @property
    def tokenizer(self):
        return self.pipeline.tokenizer

    denoiser = model  # the trainable module, as the run names it for every family

    def denoiser_modules(self) -> list[torch.nn.Module]:
        return [self.model]

    @classmethod
    def denoiser_components(cls, index: dict) -> tuple[str, ...]:
        return ("model",)

    def frozen_modules(self) -> list[torch.nn.Module]:
        return []

    def frozen_dtype(self, module, weight_dtype):
        return weight_dtype

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def noise_level(self) -> float:
        """The rollout's stochasticity, as the run reports it for every family: the temperature."""
        return self.settings.temperature

    @property
    def shard_blocks(self) -> tuple[str, ...]:
        """The decoder layers' class names: what FSDP shards and gradient checkpointing recomputes."""
        return tuple(sorted(getattr(self.model, "_no_split_modules", None) or ()))

    @property
    def context_length(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 0) or 0)

    @property
    def eos_ids(self) -> list[int]:
        """The token ids that end a response: the tokenizer's EOS and the generation config's."""
        ids = {self.tokenizer.eos_token_id}
        generation = getattr(self.model, "generation_config", None)
        extra = getattr(generation, "eos_token_id", None) if generation is not None else None
        ids.update(extra if isinstance(extra, (list, tuple)) else [extra])
        return sorted(i for i in ids if i is not None)

    def preview(self, samples):
        return samples

    def sampling_manifest(self) -> dict:
        """The sampling settings a run's ``final/`` records (``checkpoint.final_manifest``): sample.* by name."""
        from ddpo_grpo.run_sampling import TEXT_SAMPLING_KEYS

        return {
            key: list(value) if key == "stop" else value
            for key, value in dataclasses.asdict(self.settings).items()
            if key in TEXT_SAMPLING_KEYS
        }

    def sampling_settings(self) -> list[str]:
        """The sampling settings the run uses (``console.sampling_line``)."""
        s = self.settings
        stop = f", stop={list(s.stop)}" if s.stop else ""
        return [
            f"temperature={s.temperature:g}",
            f"top_p={s.top_p:g}",
            f"max_prompt_length={s.max_prompt_length}",
            f"max_response_length={s.max_response_length}{stop}",
        ]

    # ---- prompts ------------------------------------------------------------------------------------------
    def render(self, rows: list[dict]) -> list[str]:
        """Each row's prompt as text: a string as is, a list of chat messages through the chat template."""
        chat = [isinstance(r["prompt"], (list, tuple)) for r in rows]
        if any(chat) and not all(chat):
            first = chat.index(not chat[0])
            raise ValueError(
                f"prompts.source mixes chat rows (prompt = a list of messages) and plain-text rows (row {first} of "
                "this batch differs from row 0); convert them to one kind"
            )
        if not chat[0]:
            return [str(r["prompt"]) for r in rows]
        if not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("prompts.source has chat rows but the tokenizer of pretrained.model has no chat template")
        return [
            self.tokenizer.apply_chat_template(list(r["prompt"]), tokenize=False, add_generation_prompt=True)
            for r in rows
        ]

    def encode_rows(self, rows: list[dict], negative_prompt: str = "") -> dict:
        """{"ids": [B, P] left-padded, "mask": [B, P], "text": the rendered prompts}; ValueError naming the row of a
        prompt longer than ``sample.max_prompt_length``."""
        texts = self.render(rows)
        tok = self.tokenizer
        encoded = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
        limit = self.settings.max_prompt_length
        for i, ids in enumerate(encoded):
            if not ids:
                raise ValueError(f"prompt row {i} ({texts[i]!r}) is empty after tokenisation")
            if len(ids) > limit:
                raise ValueError(
                    f"prompt row {i} ({texts[i][:60]!r}…) has {len(ids)} tokens > sample.max_prompt_length={limit}; "
                    "shorten it or raise the limit"
                )
        width = max(len(ids) for ids in encoded)
        ids = torch.full((len(encoded), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for i, row in enumerate(encoded):
            ids[i, width - len(row) :] = torch.as_tensor(row)
            mask[i, width - len(row) :] = 1
        return {"ids": ids.to(self.device), "mask": mask.to(self.device), "text": texts}

    def decode(self, response_ids: torch.Tensor, response_mask: torch.Tensor) -> list[str]:
        """The response strings (the tokens under the mask, special tokens such as EOS left out)."""
        return [
            self.tokenizer.decode(ids[mask.bool()].tolist(), skip_special_tokens=True)
            for ids, mask in zip(response_ids.cpu(), response_mask.cpu())
        ]

    # ---- the forward ----------------------------------------------------------------------------------------
    @staticmethod
    def positions(mask: torch.Tensor) -> torch.Tensor:
        """Position ids of a left-padded batch: 0 at each row's first real token (padding gets 0 too)."""
        return (mask.long().cumsum(dim=-1) - 1).clamp_min(0)

    @functools.cached_property
    def forward_parameters(self) -> frozenset[str]:
        """The keyword names the model's forward takes, read once (``logits`` runs at every sampled token)."""
        import inspect

        return frozenset(inspect.signature(self.model.forward).parameters)

    def logits(self, model, ids: torch.Tensor, mask: torch.Tensor, cache=None, positions=None, keep: int = 0):
        """(next-token logits [B, S, V], the KV cache) of ``ids`` [B, S]; ``cache``: the KV cache of what came before
        (``mask`` then covers it too), None for a forward without one; ``keep`` > 0: the logits of the last ``keep``
        positions only (transformers' ``logits_to_keep``, where the model takes it: the LM head skips the prompt).
        transformers ≥ 5.24 names the cache argument ``cache``, earlier versions ``past_key_values``: the model's
        signature says which."""
        if positions is None:
            positions = self.positions(mask)
        params = self.forward_parameters
        name = "cache" if "cache" in params else "past_key_values"
        kwargs = {name: cache, "use_cache": cache is not None}
        if keep and "logits_to_keep" in params:
            kwargs["logits_to_keep"] = keep
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, **kwargs)
        if keep and "logits_to_keep" not in params:
            return out.logits[:, -keep:], (out.get(name) if cache is not None else None)
        return out.logits, (out.get(name) if cache is not None else None)

    def response_logprobs(
        self, model, ids: torch.Tensor, mask: torch.Tensor, prompt_length: int, *, entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(log π(y_t | x, y_<t) [B, L], entropy [B, L] or None) of the responses in columns P: of ``ids`` [B, P + L],
        at the rollout's temperature: the logits at position P − 1 + t predict response token t."""
        length = ids.shape[1] - prompt_length
        logits = self.logits(model, ids, mask, keep=length + 1)[0][:, :-1]  # positions P − 1 … P + L − 2: [B, L, V]
        tokens = ids[:, prompt_length:]
        t = self.settings.temperature
        return token_logprobs(logits, tokens, t), (token_entropy(logits.detach(), t) if entropy else None)

    # ---- LoRA and export -----------------------------------------------------------------------------------
    def add_lora(self, *, rank: int, alpha: float, target_modules, dropout: float = 0.0) -> None:
        """A peft LoRA adapter named "default" injected into the model (base weights frozen). peft's own injection, not
        transformers' ``add_adapter``, which refuses the peft releases before 0.22 (transformers 5.24)."""
        from peft import LoraConfig, inject_adapter_in_model

        targets = list(target_modules) or list(self.default_lora_targets)
        self.model.requires_grad_(False)
        config = LoraConfig(
            r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=targets, task_type="CAUSAL_LM"
        )
        inject_adapter_in_model(config, self.model, adapter_name="default")
        self.model.peft_config = {"default": config}  # what save_lora (peft's state-dict helper) reads

    def set_adapters(self, enabled: bool) -> None:
        """Switch the LoRA layers on or off (``reference.Reference``: the reference is the model with them off)."""
        from peft.tuners.tuners_utils import BaseTunerLayer

        for module in self.model.modules():
            if isinstance(module, BaseTunerLayer):
                module.enable_adapters(enabled)

    def save_lora(self, out_dir, model: torch.nn.Module, state_dict: dict | None = None) -> None:
        """peft's adapter files (adapter_config.json + adapter_model.safetensors) and the tokenizer: loadable with
        ``PeftModel.from_pretrained(base_model, out_dir)``. ``state_dict``: the adapter's tensors gathered from a
        sharded model."""
        from peft.utils import get_peft_model_state_dict
        from safetensors.torch import save_file

        layers = get_peft_model_state_dict(model, state_dict=state_dict)
        config = model.peft_config["default"]
        config.base_model_name_or_path = config.base_model_name_or_path or ""
        config.save_pretrained(str(out_dir))
        tensors = {f"base_model.model.{k}": v.detach().cpu().contiguous() for k, v in layers.items()}
        save_file(tensors, f"{out_dir}/adapter_model.safetensors", metadata={"format": "pt"})
        self.tokenizer.save_pretrained(str(out_dir))

    @classmethod
    def load_lora(cls, pipeline, lora_dir: str) -> None:
        """A ``save_lora`` export onto a freshly loaded base: peft's own loader, merged for sampling."""
        from peft import PeftModel

        pipeline.model = PeftModel.from_pretrained(pipeline.model, lora_dir).merge_and_unload()

    def save_pipeline(self, out_dir) -> None:
        self.pipeline.save_pretrained(str(out_dir))
