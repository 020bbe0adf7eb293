"""Pretrain a small ShapesWorld text-to-image model in the SD3 architecture, from scratch, on CPU.

The result is a plain diffusers ``StableDiffusion3Pipeline`` directory (two CLIP text encoders, no T5)
that later RL (GRPO) fine-tunes. Everything is reproducible from :class:`PretrainConfig` (incl. its
seed); data are rendered on the fly from *train*-split prompts only; training is resumable from
atomic checkpoints (:mod:`ddpo_grpo.checkpoint`). Entry point: ``scripts/pretrain_shapes.py``.

Stages
------
1. **AutoencoderKL** 64×64×3 ↔ 16×16×4 (three levels, two downsamples). Loss per image, with
   pixels ``x`` in [-1, 1] and reconstruction ``x̂`` decoded from a posterior *sample*::

       L_vae = mean_pixels( w · (|x̂ − x| + (x̂ − x)²) ) + β_KL · KL(q(z|x) ‖ N(0, I))_sum / (3·64·64)

   ``w = 1 + fg_weight`` on object pixels (non-white in ``x``) and 1 on the background, so the ~10–30 %
   of pixels that carry colour and shape are not drowned by white; ``β_KL`` is LDM's convention
   (KL summed per image against the per-image *sum* of the reconstruction loss), i.e. tiny.
   Afterwards the latent statistics of ``latent_stats_images`` fresh renders give
   ``shift_factor = mean(z)`` and ``scaling_factor = 1 / std(z)`` (stored in the VAE config, so the
   pipeline's ``latents / scaling_factor + shift_factor`` decoding is right).

2. **Text encoders + SD3 transformer**, trained jointly by rectified-flow matching (SD3, Esser et
   al. 2024, eqs. 1–3 with the logit-normal ``t`` sampling of §3.1), VAE frozen::

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

Tokenizer (:func:`build_word_tokenizer`): a ``CLIPTokenizer`` whose BPE merges were *learned* on
the 23 ShapesWorld words, so every word of the grammar is exactly one token (a 10-word prompt is 12
tokens with BOS/EOS; ``max_length = 16``), while any other text still tokenizes character by
character (every printable character is in the vocabulary). One token per word makes the
colour/shape/count/relation bindings far easier to learn than the 64-character sequences of
:mod:`ddpo_grpo.tiny`, and shortens the joint-attention sequence (64 image + 16 text + 1 null).

Data: every batch draws tasks uniformly (``task_weights``), then a train-split prompt of that task
uniformly, then a fresh scene with :func:`~worlds.shapes.world.sample_scene` and renders it
(:func:`~worlds.shapes.world.render`). Default: every latent of every batch is a new image
(rendering + encoding cost ~12 % of a step); ``noise_per_image = K > 1`` reuses each image K times
in its batch with independent ``t`` and ε, to save that cost.

Caption noise (``caption_noise = p``, flow stage only): with probability ``p`` an image is rendered
for a *near miss* of its caption (:func:`near_miss`: a count off by one, one of two objects dropped
or doubled, the relation flipped) while the caption stays. Web alt-text is mis-captioned in the same
way, and a model trained on it learns to make those mistakes at about that rate: it knows the right
image but samples a wrong one part of the time, the situation RL fine-tuning is meant to fix. (At
these model sizes it did not make RL faster; see the README's ShapesWorld experiments.) Only the
caption's own colour–shape pairs are drawn, so no held-out composition leaks into training. ``p``
may change on ``--resume`` (pretrain clean, then continue noisy).

Checkpoints (``<out>/checkpoints/epoch_<global step>``) hold every model (VAE, text encoders,
transformer and its EMA), the optimizer, the data / noise RNG states and the config, so
``--resume`` continues bit-exactly (same thread count). The final pipeline (EMA weights) is saved
to ``<out>/final``; progress lines and evaluations go to ``<out>/pretrain_log.jsonl``.

The SD-architecture counterpart (a UNet on this model's VAE, tokenizer and text encoder) is
:mod:`worlds.shapes.pretrain_sd`, which reuses the data, evaluation, EMA and resume helpers here.
"""
from __future__ import annotations

import collections
import copy
import dataclasses
import json
import math
import string
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from ddpo_grpo.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint
from worlds.shapes.grammar import load_split
from worlds.shapes.world import COLORS, COUNT_WORDS, OPPOSITE, RELATIONS, SHAPES, TASKS, render, sample_scene

LOG_FILE = "pretrain_log.jsonl"
FINAL_DIR = "final"
CANVAS = 64


# ============================================================================================
# configuration
# ============================================================================================


class ConfigDict:
    """``to_dict`` / ``from_dict`` for the pretraining config dataclasses (JSON keeps tuples as lists)."""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict):
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown {cls.__name__} fields {sorted(unknown)}")
        kw = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return cls(**kw)

    @classmethod
    def filled(cls, saved: dict) -> dict:
        """A checkpoint's saved config with every field the run predates set to its default."""
        return {**cls().to_dict(), **saved}


@dataclass
class PretrainConfig(ConfigDict):
    """Every setting of a pretraining run (saved in each checkpoint; ``--resume`` reuses it)."""

    seed: int = 0
    # ---- data ----
    task_weights: Tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)  # sampling weight of each task in TASKS order
    # fraction of flow-stage images rendered for a near miss of their caption (:func:`near_miss`), like
    # the mis-captioned share of web alt-text: the model learns to make those mistakes at about that
    # rate. 0 = every image matches its caption (and draws nothing extra from the data RNG)
    caption_noise: float = 0.0
    # ---- stage 1: VAE ----
    vae_channels: Tuple[int, ...] = (16, 32, 64)  # block_out_channels; len-1 downsamples (3 -> 64/4 = 16)
    vae_layers_per_block: int = 1
    vae_norm_groups: int = 8
    latent_channels: int = 4
    vae_steps: int = 1000
    vae_batch_size: int = 16
    vae_lr: float = 1e-3
    vae_kl_weight: float = 1e-6  # LDM convention: per-image KL sum vs per-image reconstruction sum
    vae_fg_weight: float = 4.0  # extra reconstruction weight on object (non-white) pixels
    latent_stats_images: int = 512  # renders used for scaling_factor / shift_factor
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
    qk_norm: Optional[str] = "rms_norm"
    # ---- stage 2: flow matching ----
    flow_steps: int = 5000
    batch_size: int = 32  # latents per step (= images per step * noise_per_image)
    noise_per_image: int = 1
    lr: float = 8e-4
    warmup_steps: int = 200
    min_lr_ratio: float = 0.1  # cosine decay from lr to min_lr_ratio*lr over the flow steps
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    ema_decay: float = 0.999
    logit_mean: float = 0.0
    logit_std: float = 1.0
    cond_dropout: float = 0.1
    max_null_tokens: int = 256
    scheduler_shift: float = 1.0
    # ---- evaluation (ShapesWorld judge on test-split prompts, through the pipeline) ----
    eval_every: int = 500  # flow steps; 0 = only at the end
    eval_per_task: int = 16
    final_eval_per_task: int = 100
    eval_steps: int = 20
    eval_guidance: float = 4.5
    eval_max_sequence_length: int = 77
    # ---- bookkeeping ----
    ckpt_every: int = 250  # steps (both stages)
    keep_last: int = 2
    log_every: int = 25

    @property
    def total_steps(self) -> int:
        return self.vae_steps + self.flow_steps

    def validate(self) -> None:
        validate_data_fields(self)
        factor = 2 ** (len(self.vae_channels) - 1)
        if CANVAS % factor:
            raise ValueError(f"vae_channels {self.vae_channels}: 64 must be divisible by 2**(levels-1) = {factor}")
        if self.latent_side % 2:
            raise ValueError(f"latent side {self.latent_side} must be even (patch size 2)")
        if self.max_length < 12:
            raise ValueError(f"max_length={self.max_length} < 12 would truncate the longest ShapesWorld prompts")
        if self.max_null_tokens < 1:
            raise ValueError("max_null_tokens must be >= 1")

    @property
    def latent_side(self) -> int:
        return CANVAS // 2 ** (len(self.vae_channels) - 1)


def tiny_config(**overrides) -> PretrainConfig:
    """A seconds-long configuration for tests (same code paths, toy sizes)."""
    base = dict(
        vae_channels=(8, 8, 8), vae_steps=2, vae_batch_size=2, latent_stats_images=4,
        text_hidden=16, text_layers=2, text_heads=2, text_ff=32, text_proj=16,
        tf_layers=1, tf_heads=2, tf_head_dim=8, flow_steps=3, batch_size=4, noise_per_image=2,
        warmup_steps=1, eval_every=0, eval_per_task=1, final_eval_per_task=1, eval_steps=2,
        eval_max_sequence_length=8, ckpt_every=2, log_every=1,
    )
    base.update(overrides)
    return PretrainConfig(**base)


# ============================================================================================
# tokenizer: one token per ShapesWorld word
# ============================================================================================


def grammar_words() -> List[str]:
    """The 23 words of the ShapesWorld grammar."""
    words = ["a", "and", *COUNT_WORDS.values(), *COLORS, *SHAPES, *(s + "s" for s in SHAPES)]
    for phrase in RELATIONS.values():
        words += phrase.split()
    return list(dict.fromkeys(words))


def learn_bpe_merges(words: Sequence[str]) -> List[Tuple[str, str]]:
    """Learn BPE merges on ``words`` (each once) until every word is a single symbol.

    Standard BPE training (most frequent adjacent pair first, ties broken by the pair itself), so
    applying the merges by rank — what ``CLIPTokenizer`` does — reproduces the training segmentation:
    each word becomes one token. Word-final characters carry CLIP's ``</w>`` marker.
    """
    segs = {w: tuple(w[:-1]) + (w[-1] + "</w>",) for w in words}
    merges: List[Tuple[str, str]] = []
    while True:
        counts: collections.Counter = collections.Counter()
        for s in segs.values():
            counts.update(zip(s, s[1:]))
        if not counts:
            return merges
        pair = min(counts, key=lambda p: (-counts[p], p))
        merges.append(pair)
        for w, s in segs.items():
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == pair:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            segs[w] = tuple(out)


def word_vocab_and_merges() -> Tuple[Dict[str, int], List[Tuple[str, str]]]:
    """Vocabulary (specials, every printable char alone and word-final, every merge result) and merges."""
    merges = learn_bpe_merges(grammar_words())
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for ch in string.ascii_lowercase + string.digits + string.punctuation:
        vocab.setdefault(ch, len(vocab))
        vocab.setdefault(ch + "</w>", len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return vocab, merges


def build_word_tokenizer(max_length: int = 16):
    """A ``CLIPTokenizer`` where each ShapesWorld word is one token (files in a temporary directory)."""
    from transformers import CLIPTokenizer

    vocab, merges = word_vocab_and_merges()
    with tempfile.TemporaryDirectory() as tmp:
        vpath, mpath = Path(tmp) / "vocab.json", Path(tmp) / "merges.txt"
        vpath.write_text(json.dumps(vocab))
        mpath.write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
        return CLIPTokenizer(str(vpath), str(mpath), model_max_length=max_length)


# ============================================================================================
# models
# ============================================================================================


def build_models(cfg: PretrainConfig) -> Dict[str, torch.nn.Module]:
    """Randomly initialised ``vae``, ``text_encoder``, ``text_encoder_2``, ``transformer`` (+ ``tokenizer``)."""
    from diffusers import AutoencoderKL, SD3Transformer2DModel
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection

    torch.manual_seed(cfg.seed)
    levels = len(cfg.vae_channels)
    vae = AutoencoderKL(
        in_channels=3, out_channels=3,
        down_block_types=["DownEncoderBlock2D"] * levels, up_block_types=["UpDecoderBlock2D"] * levels,
        block_out_channels=list(cfg.vae_channels), layers_per_block=cfg.vae_layers_per_block,
        latent_channels=cfg.latent_channels, norm_num_groups=cfg.vae_norm_groups, sample_size=CANVAS,
        scaling_factor=1.0, shift_factor=0.0,
    )
    tokenizer = build_word_tokenizer(cfg.max_length)
    text_cfg = CLIPTextConfig(
        vocab_size=len(tokenizer.get_vocab()), hidden_size=cfg.text_hidden, intermediate_size=cfg.text_ff,
        num_hidden_layers=cfg.text_layers, num_attention_heads=cfg.text_heads,
        max_position_embeddings=cfg.max_length, projection_dim=cfg.text_proj,
        bos_token_id=0, eos_token_id=1, pad_token_id=1,
    )
    text_encoder = CLIPTextModelWithProjection(text_cfg)
    text_encoder_2 = CLIPTextModelWithProjection(text_cfg)
    dim = cfg.tf_heads * cfg.tf_head_dim
    transformer = SD3Transformer2DModel(
        sample_size=cfg.latent_side, patch_size=2, in_channels=cfg.latent_channels,
        out_channels=cfg.latent_channels, num_layers=cfg.tf_layers, attention_head_dim=cfg.tf_head_dim,
        num_attention_heads=cfg.tf_heads,
        joint_attention_dim=2 * cfg.text_hidden,  # both encoders' hidden states, concatenated
        caption_projection_dim=dim, pooled_projection_dim=2 * cfg.text_proj,
        pos_embed_max_size=cfg.latent_side // 2,  # the (saved) sin-cos table covers exactly our grid
        qk_norm=cfg.qk_norm,
    )
    return {"vae": vae, "text_encoder": text_encoder, "text_encoder_2": text_encoder_2,
            "transformer": transformer, "tokenizer": tokenizer}


def count_params(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


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


def encode_prompts(prompts: Sequence[str], tokenizer, text_encoder, text_encoder_2, max_length: int):
    """CLIP part of ``StableDiffusion3Pipeline.encode_prompt``: ``([B, L, 2H] embeds, [B, 2P] pooled)``."""
    ids = tokenizer(list(prompts), padding="max_length", max_length=max_length, truncation=True,
                    return_tensors="pt").input_ids  # [B, L]
    embeds, pooled = [], []
    for enc in (text_encoder, text_encoder_2):
        out = enc(ids, output_hidden_states=True)
        embeds.append(out.hidden_states[-2])  # [B, L, H] penultimate layer, as the pipeline (clip_skip=None)
        pooled.append(out[0])  # [B, P] projected EOS state
    return torch.cat(embeds, -1), torch.cat(pooled, -1)


def with_null_token(embeds: torch.Tensor, n_img_tokens: int, num_null: torch.Tensor):
    """Append one zero token to ``embeds`` [B, L, C] and the key bias equivalent to ``num_null`` of them.

    Returns ``(context [B, L+1, C], attention_mask [B, 1, 1, n_img + L + 1])``.
    """
    b, length, c = embeds.shape
    context = torch.cat([embeds, embeds.new_zeros(b, 1, c)], 1)
    mask = embeds.new_zeros(b, 1, 1, n_img_tokens + length + 1)
    mask[:, 0, 0, -1] = torch.log(num_null.to(embeds.dtype))
    return context, mask


def make_pipeline(models: Dict[str, torch.nn.Module], cfg: PretrainConfig, transformer=None, text_encoders=None):
    """A ``StableDiffusion3Pipeline`` (no T5) around the given modules."""
    from diffusers import FlowMatchEulerDiscreteScheduler, StableDiffusion3Pipeline

    te1, te2 = text_encoders or (models["text_encoder"], models["text_encoder_2"])
    pipe = StableDiffusion3Pipeline(
        transformer=transformer if transformer is not None else models["transformer"],
        scheduler=FlowMatchEulerDiscreteScheduler(shift=cfg.scheduler_shift),
        vae=models["vae"], text_encoder=te1, tokenizer=models["tokenizer"], text_encoder_2=te2,
        tokenizer_2=models["tokenizer"], text_encoder_3=None, tokenizer_3=None,
    )
    pipe.set_progress_bar_config(disable=True)
    return pipe


# ============================================================================================
# data
# ============================================================================================


class TaskBalancedSampler:
    """Train-split rows: a task by ``task_weights``, then a prompt of that task uniformly."""

    def __init__(self, rows: Sequence[dict], task_weights: Sequence[float]):
        self.by_task = {t: [r for r in rows if r["task"] == t] for t in TASKS}
        w = np.array([wt if self.by_task[t] else 0.0 for t, wt in zip(TASKS, task_weights)], dtype=float)
        if w.sum() <= 0:
            raise ValueError("no train prompts for any task with positive weight")
        self.p = w / w.sum()

    def sample(self, rng: np.random.Generator, n: int) -> List[dict]:
        out = []
        for _ in range(n):
            rows = self.by_task[TASKS[int(rng.choice(len(TASKS), p=self.p))]]
            out.append(rows[int(rng.integers(len(rows)))])
        return out


def validate_data_fields(cfg) -> None:
    """Checks of the data fields both pretraining configs share (this module's and ``pretrain_sd``'s)."""
    w = cfg.task_weights
    if len(w) != len(TASKS) or min(w) < 0 or sum(w) <= 0:
        raise ValueError(f"task_weights needs {len(TASKS)} non-negative weights ({', '.join(TASKS)}), "
                         f"not all zero; got {w}")
    if cfg.batch_size % cfg.noise_per_image:
        raise ValueError(f"batch_size={cfg.batch_size} must be a multiple of noise_per_image={cfg.noise_per_image}")
    if not 0.0 <= cfg.cond_dropout < 1.0:
        raise ValueError(f"cond_dropout must be in [0, 1); got {cfg.cond_dropout}")
    if not 0.0 <= cfg.caption_noise < 1.0:
        raise ValueError(f"caption_noise must be in [0, 1) (the fraction of images that miss their caption); "
                         f"got {cfg.caption_noise}")


def _group(spec: dict, count: int) -> dict:
    return {"color": spec["color"], "shape": spec["shape"], "count": count}


def near_miss(row: dict, rng: np.random.Generator) -> dict:
    """A scene spec one mistake away from ``row``'s caption, built from the caption's own objects only.

    single object → two of it; counting n → n ± 1 (equally likely; 4 + 1 becomes 3, 2 − 1 a single
    object); two objects → one of them alone or twice (each 1/4); position → the relation flipped.
    No colour or shape is changed, so no colour–shape pair outside the caption (e.g. a held-out test
    composition) is ever drawn.
    """
    task, objs = row["task"], row["objects"]
    if task == "single_object":
        return {"task": "counting", "objects": [_group(objs[0], 2)], "relation": None}
    if task == "counting":
        n = objs[0]["count"] + (1 if rng.random() < 0.5 else -1)
        top = max(COUNT_WORDS)
        n = top - 1 if n > top else n
        if n == 1:
            return {"task": "single_object", "objects": [_group(objs[0], 1)], "relation": None}
        return {"task": "counting", "objects": [_group(objs[0], n)], "relation": None}
    if task == "two_object":
        keep = objs[int(rng.integers(2))]
        if rng.random() < 0.5:
            return {"task": "single_object", "objects": [_group(keep, 1)], "relation": None}
        return {"task": "counting", "objects": [_group(keep, 2)], "relation": None}
    if task == "position":
        return {"task": "position", "objects": objs, "relation": OPPOSITE[row["relation"]]}
    raise ValueError(f"unknown task {task!r}; tasks: {', '.join(TASKS)}")


def scene_specs(rows: Sequence[dict], rng: np.random.Generator, caption_noise: float) -> List[dict]:
    """What to render for each captioned row: the row itself, or with probability ``caption_noise`` a near miss.

    ``caption_noise = 0`` returns ``rows`` without touching ``rng``, so clean runs draw exactly as before.
    """
    if caption_noise <= 0:
        return list(rows)
    return [near_miss(r, rng) if rng.random() < caption_noise else r for r in rows]


def render_rows(rows: Sequence[dict], rng: np.random.Generator) -> torch.Tensor:
    """A fresh scene per row, rendered: float ``[B, 3, 64, 64]`` in [-1, 1]."""
    imgs = np.stack([render(sample_scene(r, rng)) for r in rows])  # [B, 64, 64, 3] uint8
    return torch.from_numpy(imgs).permute(0, 3, 1, 2).float().div(127.5).sub(1.0)


# ============================================================================================
# evaluation
# ============================================================================================


def eval_items(per_task: int, seed: int = 1234) -> List[Tuple[dict, int]]:
    """``per_task`` (test row, image seed) pairs per task: the task's test prompts shuffled, cycled."""
    rng = np.random.default_rng(seed)
    rows = load_split("test")
    items = []
    for task in TASKS:
        trows = [r for r in rows if r["task"] == task]
        order = rng.permutation(len(trows))
        for i in range(per_task):
            items.append((trows[int(order[i % len(trows)])], 10_000 * (i // len(trows)) + int(order[i % len(trows)])))
    return items


@torch.no_grad()
def evaluate(pipe, per_task: int, batch_size: int = 16, save_dir: Optional[Path] = None, **pipe_kwargs) -> dict:
    """Strict/partial ShapesWorld accuracy of a diffusers text-to-image ``pipe`` per task.

    ``pipe_kwargs`` go to every pipeline call (``num_inference_steps``, ``guidance_scale``, ...); the
    prompts, the empty negative prompt, per-image generators (seeded by :func:`eval_items`), 64×64 and
    ``output_type="np"`` are set here.

    Returns ``{"strict/<task>", "partial/<task>", "strict/task_mean", "strict/test_weighted", ...}``;
    ``test_weighted`` weights tasks by their share of the test split (position dominates).
    """
    from worlds.shapes.judge import judge

    items = eval_items(per_task)
    scores = {t: [] for t in TASKS}
    images = []
    saved_rng = torch.get_rng_state()
    for i in range(0, len(items), batch_size):
        chunk = items[i:i + batch_size]
        gens = [torch.Generator().manual_seed(seed) for _, seed in chunk]
        out = pipe(
            prompt=[r["prompt"] for r, _ in chunk], negative_prompt=[""] * len(chunk), generator=gens,
            height=CANVAS, width=CANVAS, output_type="np", **pipe_kwargs,
        ).images  # [b, 64, 64, 3] float in [0, 1]
        for (row, _), img in zip(chunk, out):
            j = judge(img, row)
            scores[row["task"]].append((j["strict"], j["partial"]))
        images.extend(out)
    torch.set_rng_state(saved_rng)
    test_counts = collections.Counter(r["task"] for r in load_split("test"))
    res: Dict[str, float] = {}
    for t in TASKS:
        res[f"strict/{t}"] = float(np.mean([s for s, _ in scores[t]]))
        res[f"partial/{t}"] = float(np.mean([p for _, p in scores[t]]))
    res["strict/task_mean"] = float(np.mean([res[f"strict/{t}"] for t in TASKS]))
    res["partial/task_mean"] = float(np.mean([res[f"partial/{t}"] for t in TASKS]))
    total = sum(test_counts.values())
    res["strict/test_weighted"] = float(sum(res[f"strict/{t}"] * test_counts[t] / total for t in TASKS))
    res["eval/images"] = len(items)
    if save_dir is not None:
        save_grid(images, Path(save_dir))
    return res


def save_grid(images: Sequence[np.ndarray], path: Path, cols: int = 8) -> None:
    """Write images (float [64, 64, 3] in [0, 1]) as one PNG grid."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    rows = math.ceil(len(images) / cols)
    grid = np.full((rows * (CANVAS + 2), cols * (CANVAS + 2), 3), 128, dtype=np.uint8)
    for k, img in enumerate(images):
        r, c = divmod(k, cols)
        grid[r * (CANVAS + 2):r * (CANVAS + 2) + CANVAS, c * (CANVAS + 2):c * (CANVAS + 2) + CANVAS] = (
            np.clip(np.asarray(img) * 255 + 0.5, 0, 255).astype(np.uint8))
    Image.fromarray(grid).save(path)


# ============================================================================================
# the run
# ============================================================================================


def _lr_at(step: int, total: int, lr: float, warmup: int, min_ratio: float) -> float:
    """Linear warm-up for ``warmup`` steps, then cosine decay to ``min_ratio * lr`` at ``total``."""
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


@torch.no_grad()
def ema_update(ema: Dict[str, torch.nn.Module], models: Dict[str, torch.nn.Module], max_decay: float, step: int) -> None:
    """``θ_ema ← d·θ_ema + (1 − d)·θ`` for every module of ``ema``, ``d = min(max_decay, (1 + n)/(10 + n))``.

    The warm-up ``(1 + n)/(10 + n)`` (``n`` = optimisation steps taken so far) lets the average forget
    the random initialisation quickly; ``models[k]`` is the trained module of ``ema[k]``.
    """
    decay = min(max_decay, (1 + step) / (10 + step))
    for k, mod in ema.items():
        for pe, p in zip(mod.parameters(), models[k].parameters()):
            pe.lerp_(p, 1 - decay)


def append_log(out: Path, rec: dict) -> None:
    """Append one JSON line to ``<out>/pretrain_log.jsonl``."""
    with open(Path(out) / LOG_FILE, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")


def logged_eval(pipe, per_task: int, tag: str, out: Path, log, step_fields: dict,
                save_dir: Optional[Path] = None, **pipe_kwargs) -> dict:
    """:func:`evaluate`, then one ``pretrain_log.jsonl`` record (``step_fields`` first) and a log line."""
    t0 = time.time()
    res = evaluate(pipe, per_task, save_dir=save_dir, **pipe_kwargs)
    res = {**step_fields, "eval": tag, **res, "eval/seconds": round(time.time() - t0, 1)}
    append_log(out, res)
    log("eval " + tag + " " + " ".join(
        f"{k.split('/', 1)[1]}={v:.2f}" for k, v in res.items() if k.startswith("strict/")))
    return res


def save_final(trainer, load) -> Path:
    """Save ``trainer.pipeline()`` (EMA weights) to ``<trainer.out>/final``, reload it with ``load(path)``
    and, when ``trainer.cfg.final_eval_per_task``, evaluate the reloaded pipeline (``trainer.run_eval``)
    into ``final_eval.json``. Shared by both pretrainers; returns the pipeline directory."""
    final = trainer.out / FINAL_DIR
    trainer.pipeline().save_pretrained(final, safe_serialization=True)
    size = sum(p.stat().st_size for p in final.rglob("*") if p.is_file())
    trainer.log(f"saved pipeline to {final} ({size / 1e6:.2f} MB)")
    pipe = load(final)
    pipe.set_progress_bar_config(disable=True)
    if trainer.cfg.final_eval_per_task:
        res = trainer.run_eval(trainer.cfg.final_eval_per_task, "final",
                               save_dir=trainer.out / "samples" / "final.png", pipe=pipe)
        (trainer.out / "final_eval.json").write_text(json.dumps(res, indent=1))
    return final


def _gen_state(g: torch.Generator) -> List[int]:
    return g.get_state().tolist()


def _set_gen_state(g: torch.Generator, s: List[int]) -> None:
    g.set_state(torch.tensor(s, dtype=torch.uint8))


class Pretrainer:
    """Both stages, with checkpoints every ``ckpt_every`` steps and exact resumption."""

    def __init__(self, cfg: PretrainConfig, out_dir, log=print):
        cfg.validate()
        self.cfg, self.out, self.log = cfg, Path(out_dir), log
        self.out.mkdir(parents=True, exist_ok=True)
        self.models = build_models(cfg)
        self.tok = self.models["tokenizer"]
        self.sampler = TaskBalancedSampler(load_split("train"), cfg.task_weights)
        self.rng = np.random.default_rng(cfg.seed)  # prompts, scenes
        self.gen = torch.Generator().manual_seed(cfg.seed + 1)  # posterior samples, t, noise, dropout
        self.step = 0  # global: VAE steps then flow steps
        self.ema: Optional[Dict[str, torch.nn.Module]] = None
        self.opt: Optional[torch.optim.Optimizer] = None
        self.vae_stats: Optional[dict] = None
        self.ema = {k: copy.deepcopy(self.models[k]).requires_grad_(False).eval()
                    for k in ("transformer", "text_encoder", "text_encoder_2")}
        set_null_token_processor(self.models["transformer"])

    # ---- helpers -----------------------------------------------------------------------------
    @property
    def stage(self) -> str:
        return "vae" if self.step < self.cfg.vae_steps else "flow"

    def _trainable(self) -> List[torch.nn.Module]:
        m = self.models
        return [m["vae"]] if self.stage == "vae" else [m["transformer"], m["text_encoder"], m["text_encoder_2"]]

    def _make_optimizer(self) -> torch.optim.Optimizer:
        params = [p for mod in self._trainable() for p in mod.parameters()]
        if self.stage == "vae":
            return torch.optim.AdamW(params, lr=self.cfg.vae_lr, betas=(0.9, 0.99), weight_decay=0.0)
        return torch.optim.AdamW(params, lr=self.cfg.lr, betas=(0.9, 0.99), weight_decay=self.cfg.weight_decay)

    def _write_log(self, rec: dict) -> None:
        append_log(self.out, rec)

    def _set_latent_stats(self, shift_factor: float, scaling_factor: float) -> None:
        self.vae_stats = {"shift_factor": shift_factor, "scaling_factor": scaling_factor}
        self.models["vae"].register_to_config(shift_factor=shift_factor, scaling_factor=scaling_factor)

    # ---- checkpoints -------------------------------------------------------------------------
    def save(self) -> Path:
        tensors = {k: self.models[k].state_dict() for k in ("vae", "text_encoder", "text_encoder_2", "transformer")}
        for k, mod in self.ema.items():
            tensors[f"ema_{k}"] = mod.state_dict()
        state = {
            "global_step": self.step, "stage": self.stage, "config": self.cfg.to_dict(),
            "data_rng": self.rng.bit_generator.state, "torch_gen": _gen_state(self.gen),
            "vae_stats": self.vae_stats,
        }
        return save_checkpoint(self.out, self.step, tensors=tensors,
                               optimizer_state=self.opt.state_dict() if self.opt is not None else None,
                               state=state, keep_last=self.cfg.keep_last)

    def restore(self, path=None) -> None:
        ck = load_checkpoint(path or self.out)
        st = ck["state"]
        for k in ("vae", "text_encoder", "text_encoder_2", "transformer"):
            self.models[k].load_state_dict(ck["tensors"][k])
        for k, mod in self.ema.items():
            mod.load_state_dict(ck["tensors"][f"ema_{k}"])
        self.step = int(st["global_step"])
        self.rng.bit_generator.state = st["data_rng"]
        _set_gen_state(self.gen, st["torch_gen"])
        if st.get("vae_stats"):
            self._set_latent_stats(**st["vae_stats"])
        # a checkpoint taken at the last VAE step holds the VAE optimizer: the flow stage starts fresh
        if st["stage"] == self.stage and ck["optimizer_state"] is not None:
            self.opt = self._make_optimizer()
            self.opt.load_state_dict(ck["optimizer_state"])
        self.log(f"resumed from {ck['path']} at global step {self.step} ({self.stage} stage)")

    # ---- stage 1 -----------------------------------------------------------------------------
    def vae_step(self) -> dict:
        cfg, vae = self.cfg, self.models["vae"]
        x = render_rows(self.sampler.sample(self.rng, cfg.vae_batch_size), self.rng)  # [B, 3, 64, 64]
        post = vae.encode(x).latent_dist
        rec = vae.decode(post.sample(generator=self.gen)).sample  # [B, 3, 64, 64]
        fg = (x < 0.999).any(1, keepdim=True).float()  # [B, 1, 64, 64] object pixels
        w = 1.0 + cfg.vae_fg_weight * fg
        err = rec - x
        rec_loss = (w * (err.abs() + err.pow(2))).mean()
        kl = post.kl().mean() / x[0].numel()  # per-image sum over latents, per pixel
        loss = rec_loss + cfg.vae_kl_weight * kl
        return {"loss": loss, "rec": rec_loss.detach(), "kl": kl.detach(), "mae": err.abs().mean().detach()}

    @torch.no_grad()
    def compute_latent_stats(self) -> None:
        cfg, vae = self.cfg, self.models["vae"]
        rng = np.random.default_rng(cfg.seed + 7)
        gen = torch.Generator().manual_seed(cfg.seed + 7)
        from worlds.shapes.judge import judge

        zs, strict = [], []
        for i in range(0, cfg.latent_stats_images, 64):
            n = min(64, cfg.latent_stats_images - i)
            rows = self.sampler.sample(rng, n)
            post = vae.encode(render_rows(rows, rng)).latent_dist
            zs.append(post.sample(generator=gen))
            if i == 0:  # judge the reconstructions: an upper bound on what the flow model can reach
                rec = (vae.decode(post.mode()).sample.clamp(-1, 1) + 1) / 2  # [n, 3, 64, 64]
                strict = [judge(img.permute(1, 2, 0).numpy(), r)["strict"] for img, r in zip(rec, rows)]
        z = torch.cat(zs)
        self._set_latent_stats(float(z.mean()), float(1.0 / z.std()))
        acc = float(np.mean(strict)) if strict else float("nan")
        self.log(f"latent stats: shift_factor={self.vae_stats['shift_factor']:.4f} "
                 f"scaling_factor={self.vae_stats['scaling_factor']:.4f}; judge strict on reconstructions {acc:.3f}")
        self._write_log({"global_step": self.step, "stage": "vae", **self.vae_stats, "vae/recon_strict": acc})

    # ---- stage 2 -----------------------------------------------------------------------------
    def flow_step(self) -> dict:
        cfg, m, g = self.cfg, self.models, self.gen
        n_img = cfg.batch_size // cfg.noise_per_image
        rows = self.sampler.sample(self.rng, n_img)
        x = render_rows(scene_specs(rows, self.rng, cfg.caption_noise), self.rng)  # captions stay rows' prompts
        with torch.no_grad():
            z0 = m["vae"].encode(x).latent_dist.sample(generator=g)
            z0 = (z0 - self.vae_stats["shift_factor"]) * self.vae_stats["scaling_factor"]  # [n, 4, h, w]
        z0 = z0.repeat_interleave(cfg.noise_per_image, 0)  # [B, 4, h, w]
        prompts = [r["prompt"] for r in rows for _ in range(cfg.noise_per_image)]
        drop = torch.rand(len(prompts), generator=g) < cfg.cond_dropout
        prompts = ["" if d else p for p, d in zip(prompts, drop.tolist())]
        b = len(prompts)
        t = torch.sigmoid(cfg.logit_mean + cfg.logit_std * torch.randn(b, generator=g))  # [B]
        eps = torch.randn(z0.shape, generator=g)
        num_null = torch.exp(torch.rand(b, generator=g) * math.log(cfg.max_null_tokens))  # log-uniform [1, max]
        tb = t.view(b, 1, 1, 1)
        zt = (1 - tb) * z0 + tb * eps
        target = eps - z0
        embeds, pooled = encode_prompts(prompts, self.tok, m["text_encoder"], m["text_encoder_2"], cfg.max_length)
        n_img_tokens = (z0.shape[-1] // 2) * (z0.shape[-2] // 2)
        context, mask = with_null_token(embeds, n_img_tokens, num_null)
        pred = m["transformer"](hidden_states=zt, timestep=t * 1000.0, encoder_hidden_states=context,
                                pooled_projections=pooled, joint_attention_kwargs={"attention_mask": mask},
                                return_dict=False)[0]
        loss = F.mse_loss(pred, target)
        return {"loss": loss}

    def ema_update(self, flow_step: int) -> None:
        ema_update(self.ema, self.models, self.cfg.ema_decay, flow_step)

    def pipeline(self, ema: bool = True):
        if ema:
            return make_pipeline(self.models, self.cfg, self.ema["transformer"],
                                 (self.ema["text_encoder"], self.ema["text_encoder_2"]))
        return make_pipeline(self.models, self.cfg)

    def run_eval(self, per_task: int, tag: str, save_dir: Optional[Path] = None, pipe=None) -> dict:
        for mod in self.ema.values():
            mod.eval()
        cfg = self.cfg
        return logged_eval(pipe or self.pipeline(), per_task, tag, self.out, self.log,
                           {"global_step": self.step, "flow_step": self.step - cfg.vae_steps}, save_dir=save_dir,
                           num_inference_steps=cfg.eval_steps, guidance_scale=cfg.eval_guidance,
                           max_sequence_length=cfg.eval_max_sequence_length)

    # ---- main loop ---------------------------------------------------------------------------
    def train(self) -> Path:
        cfg = self.cfg
        self.log(self.describe())
        ran_since_log, t_log, acc = 0, time.time(), collections.defaultdict(float)
        while self.step < cfg.total_steps:
            stage = self.stage
            if stage == "flow" and self.vae_stats is None:
                self.models["vae"].eval()
                self.compute_latent_stats()
            if self.opt is None:
                self.opt = self._make_optimizer()
            for mod in self._trainable():
                mod.train()
            if stage == "vae":
                local, total, lr = self.step, cfg.vae_steps, cfg.vae_lr
                lr_now = _lr_at(local, total, lr, min(100, total), cfg.min_lr_ratio)
                out = self.vae_step()
            else:
                local, total = self.step - cfg.vae_steps, cfg.flow_steps
                lr_now = _lr_at(local, total, cfg.lr, cfg.warmup_steps, cfg.min_lr_ratio)
                out = self.flow_step()
            for group in self.opt.param_groups:
                group["lr"] = lr_now
            self.opt.zero_grad(set_to_none=True)
            out["loss"].backward()
            params = [p for mod in self._trainable() for p in mod.parameters()]
            gnorm = torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            self.opt.step()
            if stage == "flow":
                self.ema_update(local)
            self.step += 1
            for k, v in out.items():
                acc[k] += float(v.detach())
            acc["grad_norm"] += float(gnorm)
            ran_since_log += 1
            if self.step % cfg.log_every == 0 or self.step == cfg.vae_steps or self.step == cfg.total_steps:
                dt = time.time() - t_log
                rec = {"global_step": self.step, "stage": stage, f"{stage}_step": local + 1, "lr": lr_now,
                       **{k: round(v / ran_since_log, 5) for k, v in acc.items()},
                       "steps_per_s": round(ran_since_log / dt, 3)}
                self._write_log(rec)
                self.log(f"[{stage}] step {local + 1}/{total} (global {self.step}/{cfg.total_steps}) "
                         + " ".join(f"{k}={v / ran_since_log:.4f}" for k, v in acc.items())
                         + f" lr={lr_now:.2e} {rec['steps_per_s']:.2f} steps/s")
                ran_since_log, t_log, acc = 0, time.time(), collections.defaultdict(float)
            if stage == "vae" and self.step == cfg.vae_steps:
                self.models["vae"].eval()
                self.compute_latent_stats()
                self.opt = None  # the flow stage gets its own optimizer
            if stage == "flow" and cfg.eval_every and (local + 1) % cfg.eval_every == 0 and self.step < cfg.total_steps:
                self.run_eval(cfg.eval_per_task, f"flow_step_{local + 1}",
                              save_dir=self.out / "samples" / f"flow_{local + 1:06d}.png")
                t_log = time.time()  # keep steps/s about training only
            if self.step % cfg.ckpt_every == 0 or self.step == cfg.vae_steps or self.step == cfg.total_steps:
                path = self.save()
                self.log(f"checkpoint {path}")
        return self.finish()

    def finish(self) -> Path:
        """Save the EMA pipeline to ``<out>/final`` and evaluate it as loaded back from disk."""
        from diffusers import StableDiffusion3Pipeline

        return save_final(self, lambda path: StableDiffusion3Pipeline.from_pretrained(
            path, text_encoder_3=None, tokenizer_3=None))

    def describe(self) -> str:
        m = self.models
        counts = {k: count_params(m[k]) for k in ("vae", "text_encoder", "text_encoder_2", "transformer")}
        total = sum(counts.values())
        return ("params: " + ", ".join(f"{k}={v / 1e6:.3f}M" for k, v in counts.items())
                + f", total={total / 1e6:.3f}M (~{4 * total / 1e6:.1f} MB float32); "
                f"steps: vae={self.cfg.vae_steps} flow={self.cfg.flow_steps}; now at global step {self.step}")


#: config fields a resumed run may change. Evaluation/bookkeeping fields leave the training trajectory
#: untouched (evaluation uses its own generators). ``flow_steps`` *extends* a run: the cosine LR
#: schedule is re-stretched over the new total from the current step on, so the result is no longer
#: identical to a run launched with that length. ``caption_noise`` changes the data from the current
#: step on (the two-phase recipe: pretrain clean, then continue on noisy captions).
RESUME_MUTABLE = ("flow_steps", "caption_noise", "eval_every", "eval_per_task", "final_eval_per_task", "ckpt_every",
                  "keep_last", "log_every")


def run(cfg: PretrainConfig, out_dir, resume: bool = False, log=print, overrides: Optional[dict] = None) -> Path:
    """Train (or continue, with ``resume``) a run in ``out_dir``; return the final pipeline directory.

    On resume the checkpoint's config is used; ``overrides`` may change its :data:`RESUME_MUTABLE` fields.
    """
    return start_or_resume(Pretrainer, RESUME_MUTABLE, cfg, out_dir, resume, log, overrides).train()


def start_or_resume(trainer_cls, mutable: Sequence[str], cfg, out_dir, resume: bool = False, log=print,
                    overrides: Optional[dict] = None):
    """A new ``trainer_cls(cfg, out_dir, log=log)``, or (``resume``) one restored from the newest checkpoint.

    ``trainer_cls`` takes ``(config, out_dir, log=...)`` and has ``restore(path)``; its config class is
    ``type(cfg)`` (a :class:`ConfigDict` dataclass with a ``total_steps`` property). A resumed run uses
    the checkpoint's saved config, where ``overrides`` may change only the ``mutable`` fields.
    """
    out = Path(out_dir)
    existing = list_checkpoints(out)
    if existing and not resume:
        raise FileExistsError(f"{out} already has checkpoints (newest {existing[-1].name}); "
                              "pass --resume to continue it or choose a new --out")
    if resume and existing:
        saved = load_checkpoint(existing[-1])["state"]
        before = type(cfg).filled(saved["config"])
        conf = dict(before)
        bad = sorted(set(overrides or {}) - set(mutable))
        if bad:
            raise ValueError(f"a resumed run keeps its config; cannot change {bad} (changeable: {tuple(mutable)})")
        conf.update(overrides or {})
        new_cfg = type(cfg).from_dict(conf)
        if new_cfg.total_steps < saved["global_step"]:
            raise ValueError(f"the run would end at step {new_cfg.total_steps}, before the checkpoint's step "
                             f"{saved['global_step']}; give more steps")
        if conf != before:
            log("resuming with changed settings: " + ", ".join(
                f"{k}={conf[k]} (was {before[k]})" for k in conf if conf[k] != before[k]))
        trainer = trainer_cls(new_cfg, out, log=log)
        trainer.restore(existing[-1])
    else:
        if resume:
            log(f"--resume: no checkpoint in {out}, starting from scratch")
        trainer = trainer_cls(cfg, out, log=log)
        (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=1))
    return trainer
