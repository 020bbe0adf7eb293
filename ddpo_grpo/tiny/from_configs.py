"""A family's pipeline built from a real checkpoint's configs (``config/model_configs/<dir>/``), random weights.

What the adapter kit's real-config mode runs on: everything as the checkpoint ships it — the scheduler's config
verbatim; the VAE's scaling / shift factors, latent channels and statistics, ``force_upcast`` and spatial factor; the
pipeline's own options in ``model_index.json`` (Wan 2.2's ``boundary_ratio``, …) — except what a CPU cannot hold:

    denoiser       the family's ``FamilySpec.real_cut``: 1–2 blocks, 2 heads of the shipped head width (RoPE axes are
                   tied to it), the text widths of the cut encoders; every other key as shipped
    text encoders  2 layers (the pipelines read the penultimate layer's states), a narrow width, the local tokenizer's
                   vocabulary and special-token ids (``ENCODER_CUTS``; positions, relative-attention buckets,
                   activations, RoPE sections as shipped)
    VAE            the shipped number of levels (the spatial factor) at 32 channels (16 base for the video VAEs),
                   1 block per level (``VAE_CUTS``)
    tokenizers     built locally (``tiny.common``): character-level, with the shipped text lengths
    processors     image processors from their shipped configs (Qwen-Image-Edit's, not shipped: transformers' defaults)
    left out       what takes no part in sampling (``NOT_SAMPLING``: SD's safety checker)

The result is saved in float32 with ``save_pretrained``; load it in the recipe's dtype (``load_pipeline(dir,
torch_dtype)``), as a run does.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import torch

from ddpo_grpo.tiny.common import (
    _char_vocab,
    build_qwen_tokenizer,
    build_t5_tokenizer,
    build_tokenizer,
    qwen_token_id,
    qwen_vocab_size,
    t5_vocab_size,
)

#: text encoders' widths after the cut (CLIP's pooled / hidden states; T5's d_model ≥ the two CLIPs' together, which
#: SD3 pads to T5's width); Qwen keeps its head width of 128 (its multimodal RoPE sections sum to half of it)
CLIP_WIDTH, T5_WIDTH, QWEN_HEAD = 32, 64, 128
ENCODER_LAYERS = 2


def _clip_text(config) -> None:
    config.update(
        dict(hidden_size=CLIP_WIDTH, intermediate_size=2 * CLIP_WIDTH, num_attention_heads=2, projection_dim=CLIP_WIDTH)
    )
    config.update(dict(num_hidden_layers=ENCODER_LAYERS, vocab_size=len(_char_vocab())))
    config.update(dict(bos_token_id=0, eos_token_id=1, pad_token_id=1))


def _clip_vision(config) -> None:
    config.update(
        dict(hidden_size=CLIP_WIDTH, intermediate_size=2 * CLIP_WIDTH, num_attention_heads=2, projection_dim=CLIP_WIDTH)
    )
    config.num_hidden_layers = ENCODER_LAYERS


def _t5(config) -> None:
    config.update(dict(d_model=T5_WIDTH, d_kv=T5_WIDTH // 2, num_heads=2, d_ff=2 * T5_WIDTH))
    config.update(dict(num_layers=ENCODER_LAYERS, vocab_size=t5_vocab_size()))
    config.update(dict(pad_token_id=0, eos_token_id=1, decoder_start_token_id=0))


def _cut_layer_types(config) -> None:
    """The per-layer attention kinds of the kept layers (a config listing one per layer)."""
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:ENCODER_LAYERS]


def _qwen_ids() -> dict:
    return dict(bos_token_id=qwen_token_id("<|endoftext|>"), eos_token_id=qwen_token_id("<|im_end|>"))


def _qwen2_5_vl(config) -> None:
    text = config.text_config
    text.update(dict(hidden_size=QWEN_HEAD, num_attention_heads=1, num_key_value_heads=1, intermediate_size=256))
    text.update(dict(num_hidden_layers=ENCODER_LAYERS, vocab_size=qwen_vocab_size(), **_qwen_ids()))
    text.max_window_layers = min(text.max_window_layers, ENCODER_LAYERS)
    _cut_layer_types(text)
    for key in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
        token = {"image": "<|image_pad|>", "video": "<|video_pad|>"}.get(key.split("_")[0]) or (
            "<|vision_start|>" if "start" in key else "<|vision_end|>"
        )
        setattr(config, key, qwen_token_id(token))
    vision = config.vision_config
    vision.update(dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=1, fullatt_block_indexes=[0]))
    vision.out_hidden_size = QWEN_HEAD


def _qwen3(config) -> None:
    config.update(dict(hidden_size=64, num_attention_heads=1, num_key_value_heads=1, intermediate_size=128))
    config.update(dict(num_hidden_layers=ENCODER_LAYERS, vocab_size=qwen_vocab_size(), **_qwen_ids()))
    config.pad_token_id = qwen_token_id("<|endoftext|>")
    _cut_layer_types(config)


#: transformers model class -> its config's cut (in place)
ENCODER_CUTS = {
    "CLIPTextModel": _clip_text,
    "CLIPTextModelWithProjection": _clip_text,
    "CLIPVisionModel": _clip_vision,
    "CLIPVisionModelWithProjection": _clip_vision,
    "T5EncoderModel": _t5,
    "UMT5EncoderModel": _t5,
    "Qwen2_5_VLForConditionalGeneration": _qwen2_5_vl,
    "Qwen3Model": _qwen3,
}


def _kl_vae(config: dict) -> dict:
    levels = len(config["block_out_channels"])
    return dict(config, block_out_channels=[32] * levels, layers_per_block=1, norm_num_groups=32)


def _video_vae(config: dict) -> dict:
    return dict(config, base_dim=16, num_res_blocks=1)


#: diffusers VAE class -> its config's cut
VAE_CUTS = {"AutoencoderKL": _kl_vae, "AutoencoderKLWan": _video_vae, "AutoencoderKLQwenImage": _video_vae}


def _tokenizer(directory: Path, name: str, class_name: str, encoder):
    """A local tokenizer of the kind ``class_name`` with the shipped text length (its ``tokenizer_config.json``'s
    ``model_max_length``, else its encoder's positions, else the builder's)."""
    shipped = Path(directory) / name / "tokenizer_config.json"
    length = read_json(shipped).get("model_max_length") if shipped.is_file() else None
    length = length or getattr(encoder, "max_position_embeddings", None)
    if class_name.startswith("CLIPTokenizer"):
        tokenizer = build_tokenizer()
    elif class_name.startswith(("T5Tokenizer", "UMT5Tokenizer")):
        tokenizer = build_t5_tokenizer()
    elif class_name.startswith("Qwen2Tokenizer"):
        return build_qwen_tokenizer()  # (the pipelines pass their own lengths)
    else:
        raise NotImplementedError(f"no local tokenizer for {class_name}: add one to ddpo_grpo/tiny/common.py")
    if length:
        tokenizer.model_max_length = int(length)
    return tokenizer


def _processor(directory: Path, name: str, class_name: str, tokenizer):
    """An image processor from its shipped ``preprocessor_config.json``; Qwen-Image-Edit's ``Qwen2VLProcessor``
    (configs not shipped) from transformers' defaults, Qwen2-VL's published pixel range, over the local tokenizer."""
    import transformers

    if class_name == "Qwen2VLProcessor":
        return transformers.Qwen2VLProcessor(
            image_processor=transformers.Qwen2VLImageProcessor(),
            video_processor=transformers.Qwen2VLVideoProcessor(),
            tokenizer=tokenizer,
        )
    if (Path(directory) / name / "preprocessor_config.json").is_file():
        return getattr(transformers, class_name).from_pretrained(Path(directory) / name)
    raise NotImplementedError(f"{Path(directory).name}: no preprocessor_config.json for {name} ({class_name})")


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def component_config(directory: Path, name: str) -> dict:
    """The shipped config of component ``name`` (``config.json``, or a scheduler's ``scheduler_config.json``)."""
    folder = Path(directory) / name
    for file in ("config.json", "scheduler_config.json", "preprocessor_config.json"):
        if (folder / file).is_file():
            return read_json(folder / file)
    raise FileNotFoundError(f"{folder}: no config.json / scheduler_config.json")


def encoder_configs(directory: str | Path) -> dict:
    """The configs of the text / image encoders (transformers models) of the pipeline in ``directory``, by name."""
    import transformers

    index = read_json(Path(directory) / "model_index.json")
    found = {}
    for name, value in index.items():
        if isinstance(value, list) and len(value) == 2 and value[0] == "transformers" and value[1] in ENCODER_CUTS:
            found[name] = getattr(transformers, value[1]).config_class.from_pretrained(Path(directory) / name)
    return found


def _encoder(class_name: str, shipped: dict):
    import transformers

    cls = getattr(transformers, class_name)
    if class_name not in ENCODER_CUTS:
        raise NotImplementedError(f"no CPU cut for {class_name}: add one to ENCODER_CUTS (ddpo_grpo/tiny/from_configs)")
    config = cls.config_class.from_dict(shipped)
    ENCODER_CUTS[class_name](config)
    config.dtype = torch.float32  # the random weights' dtype (the shipped one is the checkpoint's file dtype)
    return cls(config)


#: components that take no part in sampling, left out (None): SD's safety checker and the feature extractor feeding it
#: (a random safety checker would black out the plain pipeline's images at random)
NOT_SAMPLING = ("safety_checker", "feature_extractor")


def build_from_configs(spec, checkpoint, path: str | Path, seed: int = 0):
    """Build ``spec``'s pipeline from ``checkpoint``'s configs (module docstring), save it to ``path``, return it."""
    import diffusers

    directory = checkpoint.path
    index = read_json(directory / "model_index.json")
    if index["_class_name"] != spec.pipeline:
        raise ValueError(f"{directory}: a {index['_class_name']}, not the {spec.pipeline} of family {spec.name!r}")
    torch.manual_seed(seed)
    entries = {k: tuple(v) for k, v in index.items() if isinstance(v, list) and len(v) == 2}
    parts: dict = {n: None for n, (library, _) in entries.items() if library is None or n in NOT_SAMPLING}

    def kind(*suffixes):
        return [(n, c) for n, (library, c) in entries.items() if n not in parts and c.endswith(suffixes)]

    encoders = {}  # first: the tokenizers and the denoiser take their sizes
    for name, class_name in kind(*ENCODER_CUTS):
        parts[name] = _encoder(class_name, component_config(directory, name))
        encoders[name] = parts[name].config
    for name, class_name in kind("Tokenizer", "TokenizerFast"):
        parts[name] = _tokenizer(directory, name, class_name, encoders.get(name.replace("tokenizer", "text_encoder")))
    for name, class_name in kind("Processor"):
        parts[name] = _processor(directory, name, class_name, parts.get("tokenizer"))
    for name, (library, class_name) in entries.items():
        if name in parts:
            continue
        if library != "diffusers":
            raise NotImplementedError(f"{directory.name}: no real-config build for {name} ({library}.{class_name})")
        cls = getattr(diffusers, class_name)
        shipped = component_config(directory, name)
        if name == "scheduler":
            parts[name] = cls.from_config(shipped)
        elif class_name in VAE_CUTS:
            parts[name] = cls.from_config(VAE_CUTS[class_name](shipped))
        else:  # a denoiser
            parts[name] = cls.from_config({**shipped, **spec.real_cut(shipped, encoders)})
    pipeline_class = spec.pipeline_class()
    accepted = inspect.signature(pipeline_class.__init__).parameters
    options = {k: v for k, v in index.items() if not k.startswith("_") and k not in entries and k in accepted}
    if "requires_safety_checker" in options:
        options["requires_safety_checker"] = False  # (left out above)
    pipeline = pipeline_class(**parts, **options)
    pipeline.save_pretrained(Path(path))
    return pipeline
