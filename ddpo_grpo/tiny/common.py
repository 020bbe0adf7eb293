"""Pieces the tiny pipelines share: locally built tokenizers, tiny text-encoder configs, tiny VAEs.

Every tokenizer here is built from a vocabulary written in code (no hub files): character-level, so any
lower-case ASCII prompt tokenises, and saved with its pipeline by ``save_pretrained`` so that it reloads offline.

    build_tokenizer()      CLIPTokenizer over a character BPE vocabulary with no merges (SD, SD3, SDXL, FLUX's CLIP)
    build_t5_tokenizer()   T5TokenizerFast over a character Unigram model (FLUX's T5, Wan's UMT5)
    build_qwen_tokenizer() Qwen2Tokenizer over byte-level characters with the chat / vision special tokens
                           (Qwen-Image's Qwen2.5-VL, Z-Image's Qwen3), with a minimal chat template
"""

from __future__ import annotations

import json
import string
import tempfile
from pathlib import Path

TOKENIZER_MAX_LENGTH = 64  # characters + 2 specials; prompts longer than this are truncated
TEXT_HIDDEN = 32  # hidden size of each tiny text encoder
_CHARS = string.ascii_lowercase + string.digits + string.punctuation

#: Qwen's special tokens (chat turns and the vision placeholders the Qwen2-VL processor expands)
QWEN_SPECIALS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
#: a minimal chat template in Qwen's format (what ``apply_chat_template`` renders for Z-Image's prompts)
QWEN_CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _char_vocab() -> dict[str, int]:
    """Character-level BPE vocabulary: every printable char, alone and as a word ending (``x</w>``)."""
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in _CHARS:
        vocab.setdefault(ch, len(vocab))
        vocab.setdefault(ch + "</w>", len(vocab))
    return vocab


def build_tokenizer():
    """A ``CLIPTokenizer`` over the character vocabulary (its files live in a temporary directory)."""
    from transformers import CLIPTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        vocab, merges = Path(tmp) / "vocab.json", Path(tmp) / "merges.txt"
        vocab.write_text(json.dumps(_char_vocab()))
        merges.write_text("#version: 0.2\n")
        return CLIPTokenizer(str(vocab), str(merges), model_max_length=TOKENIZER_MAX_LENGTH)


def text_config(**overrides):
    """The tiny CLIP text encoder's config (hidden ``TEXT_HIDDEN``, 2 layers) over the character vocabulary."""
    from transformers import CLIPTextConfig

    values = dict(
        vocab_size=len(_char_vocab()),
        hidden_size=TEXT_HIDDEN,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=TOKENIZER_MAX_LENGTH,
        projection_dim=TEXT_HIDDEN,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    return CLIPTextConfig(**{**values, **overrides})


def build_t5_tokenizer():
    """A ``T5TokenizerFast``: a character Unigram model (ids 0 <pad>, 1 </s>, 2 <unk>), "▁" word starts, </s> appended."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import T5TokenizerFast

    pieces = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -1.0)]
    for ch in _CHARS:
        pieces += [(ch, -2.0), ("▁" + ch, -1.5)]
    tok = Tokenizer(models.Unigram(pieces, unk_id=2, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)]
    )
    return T5TokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", extra_ids=0, model_max_length=512
    )


def t5_vocab_size() -> int:
    """Vocabulary size of ``build_t5_tokenizer`` (3 specials, "▁", each character alone and after "▁")."""
    return 4 + 2 * len(_CHARS)


def _byte_chars() -> list[str]:
    """GPT-2's byte-level alphabet for the printable ASCII bytes and the newline (space is "Ġ", newline "Ċ")."""
    chars = []
    for b in [10] + list(range(32, 127)):
        chars.append({32: "Ġ", 10: "Ċ"}.get(b, chr(b)))
    return chars


def build_qwen_tokenizer():
    """A ``Qwen2Tokenizer``: byte-level characters, no merges, Qwen's special tokens and a chat template."""
    from transformers import AddedToken, Qwen2Tokenizer

    vocab = {ch: i for i, ch in enumerate(_byte_chars())}
    tokenizer = Qwen2Tokenizer(vocab=vocab, merges=[], model_max_length=4096)
    tokenizer.add_special_tokens(
        {"additional_special_tokens": [AddedToken(t, special=True, normalized=False) for t in QWEN_SPECIALS]}
    )
    tokenizer.chat_template = QWEN_CHAT_TEMPLATE
    return tokenizer


def qwen_vocab_size() -> int:
    return len(_byte_chars()) + len(QWEN_SPECIALS)


def qwen_token_id(token: str) -> int:
    """The id ``build_qwen_tokenizer`` gives a special token."""
    return len(_byte_chars()) + QWEN_SPECIALS.index(token)


def vae(shift_factor: float | None = None, latent_channels: int = 4, scaling_factor: float = 1.0):
    """A tiny ``AutoencoderKL`` downsampling 4× (three blocks)."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * 3,
        up_block_types=["UpDecoderBlock2D"] * 3,
        block_out_channels=[8, 16, 16],
        latent_channels=latent_channels,
        norm_num_groups=8,
        layers_per_block=1,
        sample_size=32,
        scaling_factor=scaling_factor,
        shift_factor=shift_factor,
    )


def video_vae_kwargs(z_dim: int = 4) -> dict:
    """The tiny Wan / Qwen-Image video VAE's config: 8× spatial and 4× temporal downsampling, base width 8.

    latents_mean / latents_std are set away from (0, 1) so that the normalisation is exercised.
    """
    return dict(
        base_dim=8,
        z_dim=z_dim,
        dim_mult=[1, 1, 1, 1],
        num_res_blocks=1,
        temperal_downsample=[False, True, True],
        latents_mean=[0.1 * (i + 1) for i in range(z_dim)],
        latents_std=[1.0 + 0.5 * i for i in range(z_dim)],
    )
