"""The reward models a run holds on every process's device, from their configs, offline.

Every process builds the training rewards (``reward.fns``) and, with ``eval.freq``, the held-out scorers
(``eval.reward``; "" = the first training reward, built a second time) — ``wiring.build_rewards`` — each on the
run's device ("cuda" when there is one: the reward factories' ``device=None``) and in its ``dtype`` keyword (float32
by default), for the whole run. The planner counts those models' parameters and buffers in that dtype:

    reward        model keyword (default)                          module built on meta
    pickscore     model ("yuvalkirstain/PickScore_v1")             CLIPModel, ViT-H/14 (986 M)
    aesthetic     clip_model ("openai/clip-vit-large-patch14")     CLIPVisionModelWithProjection, ViT-L/14 (304 M),
                                                                   + its MLP head (float32)
    hps           model_name ("ViT-H-14", an open_clip name)       CLIPModel, ViT-H/14
    clip_score    model_name ("ViT-H-14")                          CLIPModel, ViT-H/14

The model keyword's value is read from ``reward.kwargs`` (or ``eval.reward_kwargs``), else from the factory's own
default (its signature in ``reward_models/``): a local directory with a transformers ``config.json`` is built from
that file; a hub id or open_clip name of ``ARCHITECTURES`` from the dimensions below. The architectures are open_clip's
``ViT-H-14`` and ``ViT-L-14`` (``src/open_clip/model_configs/``; PickScore is a CLIP-H fine-tune, the LAION
``CLIP-ViT-H-14-laion2B-s32B-b79K`` architecture): text 24 layers of width 1024 for ViT-H/14 (12 of 768 for ViT-L/14),
checked against open_clip's ``docs/model_profile.csv`` (ViT-H-14 986.11 M parameters, ViT-L-14's image tower
303.97 M) in tests/test_planner.py. Rewards without a model (JPEG size, colour, PSNR / SSIM, remote scoring) hold 0;
any other reward (a world's, a user file) is named as not modelled rather than guessed.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path

import torch

#: open_clip-style dimensions of the CLIP architectures the built-in rewards load (module docstring)
ARCHITECTURES = {
    "vit-h-14": dict(
        projection_dim=1024,
        vision_config=dict(
            hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=16, patch_size=14
        ),
        text_config=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16),
    ),
    "vit-l-14": dict(
        projection_dim=768,
        vision_config=dict(
            hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16, patch_size=14
        ),
        text_config=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12),
    ),
}
#: model id (hub id or open_clip architecture name) -> ARCHITECTURES key
MODEL_IDS = {
    "yuvalkirstain/PickScore_v1": "vit-h-14",
    "laion/CLIP-ViT-H-14-laion2B-s32B-b79K": "vit-h-14",
    "ViT-H-14": "vit-h-14",
    "ViT-H-14-quickgelu": "vit-h-14",
    "openai/clip-vit-large-patch14": "vit-l-14",
    "ViT-L-14": "vit-l-14",
    "ViT-L-14-quickgelu": "vit-l-14",
}
#: reward -> (the factory keyword naming its model, the transformers class of what it holds)
MODEL_REWARDS = {
    "pickscore": ("model", "CLIPModel"),
    "aesthetic": ("clip_model", "CLIPVisionModelWithProjection"),
    "hps": ("model_name", "CLIPModel"),
    "clip_score": ("model_name", "CLIPModel"),
}
#: built-in rewards that hold no model
NO_MODEL = frozenset(
    {"jpeg_compressibility", "jpeg_incompressibility", "redness", "psnr", "ssim", "psnr_ssim", "remote"}
)


@dataclass
class RewardFacts:
    """The reward models on each process's device: total bytes, one entry per built reward, the rewards not
    modelled."""

    bytes: int = 0
    models: list = field(default_factory=list)  # (role: "train" / "eval", reward, model id, elements, dtype name)
    unmodelled: tuple = ()


def _factory_default(name: str, keyword: str):
    from reward_models import REGISTRY

    factory = REGISTRY.get(name)
    if factory is None:
        return None
    param = inspect.signature(factory).parameters.get(keyword)
    return None if param is None or param.default is inspect.Parameter.empty else param.default


def _dtype(name: str, kwargs: dict) -> torch.dtype:
    from reward_models import resolve_dtype

    value = kwargs["dtype"] if "dtype" in kwargs else _factory_default(name, "dtype")
    return resolve_dtype(value)


def _build(model_id, class_name: str) -> torch.nn.Module | None:
    """The reward's model on meta: from a local directory's config.json, or a known architecture; None otherwise."""
    import transformers
    from accelerate import init_empty_weights

    cls = getattr(transformers, class_name)
    path = Path(str(model_id)).expanduser()
    if (path / "config.json").is_file():
        config = transformers.AutoConfig.from_pretrained(path)
        if class_name == "CLIPVisionModelWithProjection" and hasattr(config, "vision_config"):
            config = transformers.CLIPVisionConfig(
                **config.vision_config.to_dict(), projection_dim=config.projection_dim
            )
    elif str(model_id) in MODEL_IDS:
        dims = ARCHITECTURES[MODEL_IDS[str(model_id)]]
        if class_name == "CLIPVisionModelWithProjection":
            config = transformers.CLIPVisionConfig(**dims["vision_config"], projection_dim=dims["projection_dim"])
        else:
            config = transformers.CLIPConfig(**dims)
    else:
        return None
    with init_empty_weights(include_buffers=True):
        return cls._from_config(config)


def _head_bytes(clip: torch.nn.Module) -> int:
    """The aesthetic reward's MLP head (float32) on the CLIP's projection."""
    from accelerate import init_empty_weights

    from reward_models import AestheticMLP

    with init_empty_weights(include_buffers=True):
        head = AestheticMLP(int(clip.config.projection_dim))
    return sum(p.numel() * 4 for p in head.parameters())


def built_rewards(config) -> list[tuple[str, str, dict]]:
    """(role, reward name, factory kwargs) of every reward a process builds (``wiring.build_rewards``)."""
    from ddpo_grpo.heldout import scorer_kwargs, scorer_names

    r, e = config.reward, config.eval

    def plain(d) -> dict:
        d = d.to_dict() if hasattr(d, "to_dict") else dict(d)
        return {k: v.to_dict() if hasattr(v, "to_dict") else v for k, v in d.items()}

    kwargs = plain(r.kwargs)
    out = [("train", r.sources.get(n, n), dict(kwargs.get(n, {}))) for n in r.fns]
    if e.freq and r.fns:
        names = scorer_names(e.reward) or [next(iter(r.fns))]
        if e.reward:
            scorer = scorer_kwargs(names, plain(e.reward_kwargs))
        else:
            scorer = {names[0]: dict(kwargs.get(names[0], {}))}
        out += [("eval", r.sources.get(n, n), scorer[n]) for n in names]
    return out


def reward_facts(config) -> RewardFacts:
    """The reward models of ``config``'s run on each process's device (module docstring)."""
    facts, unmodelled = RewardFacts(), []
    for role, name, kwargs in built_rewards(config):
        if name in NO_MODEL:
            continue
        if name not in MODEL_REWARDS:
            unmodelled.append(name)
            continue
        keyword, class_name = MODEL_REWARDS[name]
        model_id = kwargs.get(keyword, _factory_default(name, keyword))
        module = _build(model_id, class_name) if isinstance(model_id, (str, Path)) else None
        if module is None:
            unmodelled.append(f"{name} ({model_id!r})")
            continue
        dtype = _dtype(name, kwargs)
        from ddpo_grpo.planner import meta

        size = meta.nbytes(module, dtype) + (_head_bytes(module) if name == "aesthetic" else 0)
        facts.bytes += size
        facts.models.append((role, name, str(model_id), meta.numel(module), str(dtype).replace("torch.", "")))
    facts.unmodelled = tuple(unmodelled)
    return facts
