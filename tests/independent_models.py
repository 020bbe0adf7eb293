"""Tiny pipelines built from diffusers / transformers classes alone (not this repository's builders), for the tests
that must show the library works on a model it did not make."""

from pathlib import Path


def _clip_tokenizer(path: Path):
    from transformers import CLIPTokenizer

    words = ["a", "red", "green", "blue", "circle", "square", "triangle", "and", "two", "of"]
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1, **{f"{w}</w>": i + 2 for i, w in enumerate(words)}}
    (path / "vocab.json").parent.mkdir(parents=True, exist_ok=True)
    import json

    (path / "vocab.json").write_text(json.dumps(vocab))
    (path / "merges.txt").write_text("#version: 0.2\n")
    return CLIPTokenizer(
        str(path / "vocab.json"), str(path / "merges.txt"), pad_token="<|endoftext|>", model_max_length=16
    )


def build_sd3(out: Path, seed: int = 0) -> Path:
    """A StableDiffusion3Pipeline of random weights (32 px, no T5), saved to ``out``."""
    import torch
    from diffusers import (
        AutoencoderKL,
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    torch.manual_seed(seed)
    out = Path(out)
    tokenizer = _clip_tokenizer(out / "_tok")
    text = CLIPTextConfig(
        vocab_size=12,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=16,
        projection_dim=16,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    transformer = SD3Transformer2DModel(
        sample_size=8,
        patch_size=1,
        in_channels=4,
        num_layers=2,
        attention_head_dim=8,
        num_attention_heads=2,
        joint_attention_dim=32,
        caption_projection_dim=16,
        pooled_projection_dim=32,
        out_channels=4,
        pos_embed_max_size=16,
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
        block_out_channels=(8, 8),
        latent_channels=4,
        norm_num_groups=4,
        layers_per_block=1,
        sample_size=32,
        shift_factor=0.0,
        scaling_factor=1.0,
    )
    pipe = StableDiffusion3Pipeline(
        transformer=transformer,
        scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
        vae=vae,
        text_encoder=CLIPTextModelWithProjection(text),
        tokenizer=tokenizer,
        text_encoder_2=CLIPTextModelWithProjection(text),
        tokenizer_2=tokenizer,
        text_encoder_3=None,
        tokenizer_3=None,
    )
    pipe.save_pretrained(str(out))
    return out
