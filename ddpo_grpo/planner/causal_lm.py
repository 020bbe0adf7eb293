"""A causal language model's sizes, from its ``config.json`` alone: parameters, LoRA factors, activations, logits
and KV cache, each as a closed formula (no model is built: a 7B count is arithmetic).

A directory is a causal LM when its ``config.json`` names an architecture ending in ``ForCausalLM`` and it has no
``model_index.json`` (``is_causal_lm``). The shape (``LMShape``) is read from the transformers config keys: V =
vocab_size, h = hidden_size, L = num_hidden_layers, H = num_attention_heads, K = num_key_value_heads (GQA; H when
absent), d = head_dim (h / H when absent), I = intermediate_size, tied = tie_word_embeddings, and whether q / k / v
and o carry biases (Qwen2: q / k / v yes, o no; Llama-style configs: ``attention_bias``, both or neither).

Parameters (``parameter_count``) — a pre-norm decoder with grouped-query attention and a gated (SwiGLU) MLP:

    embeddings    V·h                                   (embed_tokens)
    attention     h·(H·d) + 2·h·(K·d) + (H·d)·h         (q, k, v, o projection weights)
                  + bq·(H·d + 2·K·d) + bo·h             (biases: bq for q / k / v, bo for o)
    MLP           3·h·I                                 (gate, up: h → I; down: I → h; no biases)
    norms         2·h per layer + h (final)             (RMSNorm: one weight vector each)
    lm_head       V·h, or 0 when tied (it is embed_tokens' matrix, counted once)

    P = V·h·(2 − tied) + L·(attention + 3·h·I + 2·h) + h

LoRA (``lora_count``): a rank-r adapter on an n_in → n_out linear layer adds A (r × n_in) and B (n_out × r), r·(n_in
+ n_out) elements, for every layer whose name is a target (peft's rule). The decoder's linear layers are q_proj (h →
H·d), k_proj / v_proj (h → K·d), o_proj (H·d → h), gate_proj / up_proj (h → I), down_proj (I → h).

Activations of one decoder layer for its backward pass, bytes per token (``layer_activation_bytes``), with c the
compute itemsize (2 under bf16 / fp16, 4 in fp32); a fused attention kernel (flash / memory-efficient SDPA) keeps
q, k, v, its output and a float32 log-sum-exp per head instead of the T×T matrix:

    2 RMSNorms    2·((4 + 2·c)·h + 4)
                                 each keeps its float32 input (the norm upcasts; pow and the scaling keep it), the
                                 float32 rsqrt per token, the normalised value in c bytes (the weight's product
                                 keeps it) and its output in c bytes (the input of the next matmuls, shared by
                                 q / k / v and by gate / up)
    attention     2·c·(H·d) + 2·c·(K·d) + 4·H
                                 rotated q, rotated k, v (K heads: the kernel takes GQA unrepeated), the kernel's
                                 output (also o_proj's input: the kernel writes it token-major, so the transpose back
                                 is a view) and the float32 log-sum-exp
    MLP           4·c·I          gate output (SiLU's input), SiLU output and up output (the product's operands),
                                 their product (down_proj's input)

(Counted, tensor by tensor, from autograd's saved tensors of transformers' Qwen2DecoderLayer with SDPA; in
float32 the formula equals the measured bytes exactly: tests/test_planner_lm.py.)

Residual adds keep nothing; rotary cos / sin tables are per position, shared by the batch (left out). Over a
micro-batch of B sequences of T = prompt + response tokens and L layers: B·T·L·a. With gradient checkpointing
(each decoder layer a checkpointed unit) a layer keeps only its input, c·h per token, until the backward recomputes
it: B·T·(L·c·h + a) — every layer's input plus one layer's activations at a time.

Logits (``logit_bytes``): the lm_head's output, B·T × V in the compute dtype (c·V per token, held by the model's
output), its float32 upcast (4·V) and the float32 log-softmax (4·V, kept for the backward): (c + 8)·V bytes per
token, every position of the sequence (the forward computes all T; the loss then keeps the response's). With
Qwen's V ≈ 152 k this is 1.5 MB a token in bf16, more than the L decoder layers' activations with checkpointing.

KV cache of the rollout (``kv_cache_bytes``): B sequences × T positions × L layers × 2 (key and value) × K heads × d
× c bytes — GQA makes it H / K times smaller than the heads' width would.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

#: the decoder's linear layers (transformers' Llama / Qwen2 / Mistral names) and their (in, out) features
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
#: float32 bytes of the logits' upcast and of the log-softmax, per element
LOGIT_FLOAT32_COPIES = 2


def read_config(directory) -> dict | None:
    """The ``config.json`` of ``directory`` when it is a causal LM (module docstring), else None."""
    directory = Path(directory)
    path = directory / "config.json"
    if (directory / "model_index.json").is_file() or not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    archs = config.get("architectures") or []
    return config if any(str(a).endswith("ForCausalLM") for a in archs) else None


def is_causal_lm(directory) -> bool:
    return read_config(directory) is not None


@dataclass(frozen=True)
class LMShape:
    architecture: str
    vocab: int  # V
    hidden: int  # h
    layers: int  # L
    heads: int  # H
    kv_heads: int  # K
    head_dim: int  # d
    intermediate: int  # I
    tied: bool
    qkv_bias: bool
    o_bias: bool

    @classmethod
    def from_config(cls, config: dict) -> LMShape:
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        kv = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or hidden // heads)
        if config.get("model_type") == "qwen2":  # Qwen2Attention: q / k / v with bias, o without
            qkv_bias, o_bias = True, False
        else:  # Llama-style attention_bias: all four projections or none
            qkv_bias = o_bias = bool(config.get("attention_bias", False))
        return cls(
            architecture=str((config.get("architectures") or ["?"])[0]),
            vocab=int(config["vocab_size"]),
            hidden=hidden,
            layers=int(config["num_hidden_layers"]),
            heads=heads,
            kv_heads=kv,
            head_dim=head_dim,
            intermediate=int(config["intermediate_size"]),
            tied=bool(config.get("tie_word_embeddings", False)),
            qkv_bias=qkv_bias,
            o_bias=o_bias,
        )

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """name -> (in_features, out_features) of each decoder layer's linear layers."""
        h, q, kv, i = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim, self.intermediate
        return {
            "q_proj": (h, q),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (q, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }


def layer_parameters(s: LMShape) -> int:
    """Elements of one decoder layer: attention, MLP, its two RMSNorm weights."""
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    attention = s.hidden * q + 2 * s.hidden * kv + q * s.hidden
    attention += (q + 2 * kv if s.qkv_bias else 0) + (s.hidden if s.o_bias else 0)
    return attention + 3 * s.hidden * s.intermediate + 2 * s.hidden


def root_parameters(s: LMShape) -> int:
    """Elements outside the decoder layers: embeddings, final norm, lm_head (0 when tied)."""
    return s.vocab * s.hidden * (1 if s.tied else 2) + s.hidden


def parameter_count(s: LMShape) -> int:
    """P = V·h·(2 − tied) + L·(attention + 3·h·I + 2·h) + h (module docstring)."""
    return root_parameters(s) + s.layers * layer_parameters(s)


def _targeted(name: str, targets) -> bool:
    return any(name == t or name.endswith("." + t) for t in targets)


def lora_count(s: LMShape, rank: int, targets) -> tuple[int, int]:
    """(all layers', one layer's) LoRA elements: r·(n_in + n_out) per targeted projection."""
    per_layer = sum(
        rank * (n_in + n_out) for name, (n_in, n_out) in s.linear_shapes().items() if _targeted(name, targets)
    )
    return s.layers * per_layer, per_layer


def layer_activation_bytes(s: LMShape, itemsize: int) -> int:
    """a: bytes one decoder layer keeps per token for its backward (module docstring)."""
    c, h, q, kv = itemsize, s.hidden, s.heads * s.head_dim, s.kv_heads * s.head_dim
    norms = 2 * ((4 + 2 * c) * h + 4)
    attention = 2 * c * q + 2 * c * kv + 4 * s.heads
    mlp = 4 * c * s.intermediate
    return norms + attention + mlp


def activation_bytes(s: LMShape, tokens: int, itemsize: int, checkpointing: bool) -> int:
    """Decoder activations for ``tokens`` tokens (micro-batch × sequence length): T·L·a, or T·(L·c·h + a) with
    gradient checkpointing."""
    a = layer_activation_bytes(s, itemsize)
    if checkpointing:
        return tokens * (s.layers * itemsize * s.hidden + a)
    return tokens * s.layers * a


def logit_bytes(s: LMShape, tokens: int, itemsize: int) -> int:
    """(c + 8)·V bytes per token: the logits in the compute dtype, their float32 copy, the float32 log-softmax."""
    return tokens * s.vocab * (itemsize + 4 * LOGIT_FLOAT32_COPIES)


def kv_cache_bytes(s: LMShape, batch: int, seq: int, itemsize: int) -> int:
    """batch × seq × L × 2 × K × d × c."""
    return batch * seq * s.layers * 2 * s.kv_heads * s.head_dim * itemsize
