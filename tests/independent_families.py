"""Tiny pipelines of the newer families built from diffusers / transformers classes alone, at sizes and in variants
the library's own builders (``ddpo_grpo.tiny``) do not make: a FLUX.1-schnell-like transformer without guidance
embeddings, a Wan 2.1-style image-to-video pipeline with a CLIP image encoder, 8x-downsampling VAEs. Used by
tests/test_independent_families.py (the library trains a model it did not build; docs/experiments/2026-11-25-model-families.md
§4, first run as experiments/families_done_when.py)."""

from __future__ import annotations

import json
import string
from pathlib import Path

import torch

HIDDEN = 48
CHARS = string.ascii_lowercase + string.digits + " .,"


# ---------------------------------------------------------------------------------------------- tokenizers
def clip_tokenizer(tmp: Path):
    from transformers import CLIPTokenizer

    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for c in CHARS.strip():
        vocab[c], vocab[c + "</w>"] = len(vocab), len(vocab) + 1
    (tmp / "v.json").write_text(json.dumps(vocab))
    (tmp / "m.txt").write_text("#version: 0.2\n")
    return CLIPTokenizer(str(tmp / "v.json"), str(tmp / "m.txt"), model_max_length=77), len(vocab)


def t5_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import T5TokenizerFast

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)] + [(c, -1.0) for c in CHARS.strip()] + [("▁", -1.0)]
    tok = Tokenizer(models.Unigram(pieces, unk_id=2, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    return T5TokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", extra_ids=0)


def qwen_tokenizer():
    from transformers import AddedToken, Qwen2Tokenizer

    chars = ["Ċ", "Ġ"] + [chr(b) for b in range(33, 127)]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>"]
    specials += ["<|image_pad|>", "<|video_pad|>"]
    tok = Qwen2Tokenizer(vocab={c: i for i, c in enumerate(chars)}, merges=[])
    tok.add_special_tokens({"additional_special_tokens": [AddedToken(s, special=True) for s in specials]})
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    return tok, len(chars) + len(specials), {s: len(chars) + i for i, s in enumerate(specials)}


# ---------------------------------------------------------------------------------------------- components
def kl_vae(latent: int, shift=None, scale=1.0):
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        block_out_channels=[16, 16, 16, 16],  # 8× down
        down_block_types=["DownEncoderBlock2D"] * 4,
        up_block_types=["UpDecoderBlock2D"] * 4,
        latent_channels=latent,
        norm_num_groups=8,
        layers_per_block=1,
        shift_factor=shift,
        scaling_factor=scale,
    )


def clip_text(vocab: int, projection=False):
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    cfg = CLIPTextConfig(
        vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=1, num_attention_heads=3,
        max_position_embeddings=77, projection_dim=HIDDEN, bos_token_id=0, eos_token_id=1, pad_token_id=1,
    )  # fmt: skip
    return (CLIPTextModelWithProjection if projection else CLIPTextModel)(cfg)


def t5_text(vocab: int, umt5=False):
    from transformers import T5Config, T5EncoderModel, UMT5Config, UMT5EncoderModel

    kw = dict(vocab_size=vocab, d_model=HIDDEN, d_kv=16, d_ff=96, num_layers=1, num_heads=3, pad_token_id=0)
    return UMT5EncoderModel(UMT5Config(**kw)) if umt5 else T5EncoderModel(T5Config(**kw))


def video_vae_kwargs(z: int):
    return dict(base_dim=8, z_dim=z, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True],
                latents_mean=[0.0] * z, latents_std=[1.0] * z)  # fmt: skip


# ---------------------------------------------------------------------------------------------- pipelines
def build(family: str, path: Path) -> str:
    """Family ``family``'s pipeline (a name of ``FAMILIES``), random weights, saved to ``path``; its class name."""
    import diffusers as d
    import transformers as t

    torch.manual_seed(1)
    path = Path(path)
    tmp = path.parent / f"_{path.name}_tokenizer"  # the CLIP tokenizer's vocabulary files, read once
    tmp.mkdir(parents=True, exist_ok=True)
    if family in ("flux", "kontext"):
        ct, cv = clip_tokenizer(tmp)
        t5 = t5_tokenizer()
        tr = d.FluxTransformer2DModel(in_channels=64, num_layers=1, num_single_layers=2, attention_head_dim=16,
                                      num_attention_heads=3, joint_attention_dim=HIDDEN, pooled_projection_dim=HIDDEN,
                                      guidance_embeds=family == "kontext", axes_dims_rope=(4, 6, 6))  # fmt: skip
        sched = d.FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=True)
        cls = d.FluxKontextPipeline if family == "kontext" else d.FluxPipeline
        pipe = cls(sched, kl_vae(16, 0.1, 0.4), clip_text(cv), ct, t5_text(len(t5)), t5, tr)
    elif family in ("qwen_image", "qwen_image_edit", "qwen_image_edit_plus"):
        tok, vocab, ids = qwen_tokenizer()
        cfg = t.Qwen2_5_VLConfig(
            text_config=dict(vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=1,
                             num_attention_heads=3, num_key_value_heads=1, max_position_embeddings=4096,
                             rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [4, 2, 2]}),
            vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, out_hidden_size=HIDDEN,
                               fullatt_block_indexes=[0]),
            image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
            vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        )  # fmt: skip
        tr = d.QwenImageTransformer2DModel(in_channels=16, out_channels=4, num_layers=1, attention_head_dim=16,
                                           num_attention_heads=2, joint_attention_dim=HIDDEN, axes_dims_rope=(4, 6, 6))  # fmt: skip
        sched = d.FlowMatchEulerDiscreteScheduler(shift=1.0, use_dynamic_shifting=True, time_shift_type="exponential")
        parts = dict(scheduler=sched, vae=d.AutoencoderKLQwenImage(**video_vae_kwargs(4)),
                     text_encoder=t.Qwen2_5_VLForConditionalGeneration(cfg), tokenizer=tok, transformer=tr)  # fmt: skip
        if family == "qwen_image":
            pipe = d.QwenImagePipeline(**parts)
        else:
            proc = t.Qwen2VLProcessor(
                image_processor=t.Qwen2VLImageProcessor(min_pixels=784, max_pixels=3136),
                video_processor=t.Qwen2VLVideoProcessor(min_pixels=784, max_pixels=3136),
                tokenizer=tok,
            )
            cls = d.QwenImageEditPlusPipeline if family.endswith("plus") else d.QwenImageEditPipeline
            pipe = cls(processor=proc, **parts)
    elif family == "zimage":
        tok, vocab, ids = qwen_tokenizer()
        enc = t.Qwen3Model(t.Qwen3Config(vocab_size=vocab, hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=2,
                                         num_attention_heads=3, num_key_value_heads=1, head_dim=16,
                                         pad_token_id=ids["<|endoftext|>"]))  # fmt: skip
        tr = d.ZImageTransformer2DModel(in_channels=4, dim=48, n_layers=1, n_refiner_layers=1, n_heads=2, n_kv_heads=2,
                                        cap_feat_dim=HIDDEN, axes_dims=[8, 8, 8], axes_lens=[1024, 64, 64])  # fmt: skip
        pipe = d.ZImagePipeline(d.FlowMatchEulerDiscreteScheduler(shift=2.0), kl_vae(4, 0.0, 0.5), enc, tok, tr)
    elif family == "sdxl":
        ct, cv = clip_tokenizer(tmp)
        unet = d.UNet2DConditionModel(
            sample_size=8, block_out_channels=(16, 32), layers_per_block=1, norm_num_groups=8, attention_head_dim=4,
            down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            cross_attention_dim=2 * HIDDEN, addition_embed_type="text_time", addition_time_embed_dim=4,
            projection_class_embeddings_input_dim=6 * 4 + HIDDEN,
        )  # fmt: skip
        pipe = d.StableDiffusionXLPipeline(
            kl_vae(4, None, 0.13), clip_text(cv), clip_text(cv, True), ct, ct, unet,
            d.EulerDiscreteScheduler(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012),
            add_watermarker=False,
        )  # fmt: skip
    elif family in ("wan", "wan_i2v"):
        t5 = t5_tokenizer()
        i2v = family == "wan_i2v"
        kw = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=16, in_channels=4 + (8 if i2v else 0),
                  out_channels=4, text_dim=HIDDEN, freq_dim=32, ffn_dim=64, num_layers=1, rope_max_seq_len=64)  # fmt: skip
        sched = d.UniPCMultistepScheduler(prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=2.0)
        parts = dict(tokenizer=t5, text_encoder=t5_text(len(t5), umt5=True), vae=d.AutoencoderKLWan(**video_vae_kwargs(4)),
                     scheduler=sched)  # fmt: skip
        if i2v:  # Wan 2.1 I2V's layout: one transformer with an image projection, a CLIP vision encoder
            vision = t.CLIPVisionModel(t.CLIPVisionConfig(hidden_size=HIDDEN, intermediate_size=96, num_hidden_layers=2,
                                                          num_attention_heads=3, image_size=32, patch_size=8))  # fmt: skip
            processor = t.CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
            tr = d.WanTransformer3DModel(image_dim=HIDDEN, added_kv_proj_dim=32, **kw)
            pipe = d.WanImageToVideoPipeline(image_processor=processor, image_encoder=vision, transformer=tr, **parts)
        else:
            pipe = d.WanPipeline(transformer=d.WanTransformer3DModel(**kw), **parts)
    else:
        raise ValueError(family)
    pipe.save_pretrained(path)
    return type(pipe).__name__


#: the families built here; "flux" without guidance embeddings (FLUX.1-schnell-like), "wan_i2v" in Wan 2.1's layout
FAMILIES = (
    "flux",
    "kontext",
    "qwen_image",
    "qwen_image_edit",
    "qwen_image_edit_plus",
    "zimage",
    "sdxl",
    "wan",
    "wan_i2v",
)
