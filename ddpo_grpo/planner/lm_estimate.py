"""The per-process memory of a GRPO run on a causal language model, part by part (bytes): the formulas of
``causal_lm.py`` under the run's config, for one strategy and P processes.

With P the model's parameters, T the trainable ones (the LoRA factors, or P for full fine-tuning), kept in float32,
c the compute itemsize (2 under bf16 / fp16 ``mixed_precision``, else 4), and the config fields (read with getattr
and the defaults named, so a config without them plans too):

    S_p = sample.max_prompt_length (512), S_r = sample.max_response_length (1024), S = S_p + S_r: every sequence
    counted at its full padded length; b = train.batch_size (training micro-batch per process); n =
    sample.batch_size (rollout micro-batch per process); LoRA: train.use_lora, train.lora_rank,
    train.lora_target_modules (() = every projection, ``causal_lm.PROJECTIONS``); train.beta > 0: a reference;
    train.gradient_checkpointing; distributed.strategy "ddp" | "fsdp".

    weights      LoRA: the frozen base in the weight dtype, c·P, + 4·T; full fine-tuning: 4·P (float32 masters)
    gradients    4·T
    optimizer    AdamW: 8·T (two float32 moments)
    reference    train.beta > 0: for LoRA none (the reference is the adapter switched off); for full fine-tuning a
                 frozen copy of the model in the weight dtype, c·P
    ddp buckets  DDP over P > 1 processes: the all-reduce buckets, 4·T
    fsdp         the weights, gradients, optimizer and reference rows ÷ P (fully_shard on every decoder layer and
                 on the root: the frozen base and the reference are sharded too). "gathered": the root's parameters
                 (embeddings, final norm, lm_head) and two decoder layers (computing, prefetched) unsharded in the
                 compute dtype; "grad in flight": the largest unit's whole float32 gradient before its
                 reduce-scatter, 4 × max(root, one layer) trainable elements
    autocast     full fine-tuning under bf16 / fp16 without FSDP: autocast's 16-bit copy of each weight, 2·T
    activations  the decoder layers' saved tensors for b sequences of S tokens (causal_lm.activation_bytes)
    logits       the logits, their float32 copy and the log-softmax for b·S tokens (causal_lm.logit_bytes)

The peak is the largest of three phases:

    training     the sum of the rows above
    rollout      ("sampling" in the table) generation of n sequences: the weights, optimizer and reference rows
                 (gradients are set to None after each step), the FSDP gathered row, the KV cache
                 (causal_lm.kv_cache_bytes for n × S) and the last position's logits, n·V·(c + 8); then the
                 per-token log-probs recomputed by a no-grad forward of the n sequences: the logits of n·S tokens
                 (the larger of the two is counted)
    set-up       ("load") the weights and reference rows as loaded

Not counted: the CUDA context and the allocator's fragmentation (≈ 0.5–1 GiB per GPU), the reward (a function on
the host), the backward's transient gradient of the logits (as large as the float32 log-softmax while it lives).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddpo_grpo.planner import causal_lm
from ddpo_grpo.planner.activations import Activations
from ddpo_grpo.planner.estimate import Estimate

#: the config fields' defaults when a config lacks them (config/base.py documents the fields)
DEFAULT_PROMPT_LENGTH = 512
DEFAULT_RESPONSE_LENGTH = 1024
#: how the table names the LM's phases (report.py)
PHASE_LABELS = {"sampling": "rollout phase (KV cache, log-prob forward)", "load": "set-up phase (loading)"}
PHASE_NAMES = {"sampling": "rollout"}


def _get(section, name: str, default):
    value = getattr(section, name, default)
    return default if value is None else value


@dataclass
class LMFacts:
    """What the report needs of a causal LM (the names report.py reads of a pipeline's ModelFacts)."""

    shape: causal_lm.LMShape
    params: int
    lora_numel: int
    lora_per_layer: int
    root_numel: int
    layer_numel: int
    compute_itemsize: int
    weight_itemsize: int
    prompt_length: int
    response_length: int
    activations: Activations
    logits_per_sample: int
    kv_per_sample: int
    rewards: object = None
    phase_labels: dict = field(default_factory=lambda: dict(PHASE_LABELS))
    phase_names: dict = field(default_factory=lambda: dict(PHASE_NAMES))

    @property
    def num_blocks(self) -> int:
        return self.shape.layers

    @property
    def sequence(self) -> int:
        return self.prompt_length + self.response_length


def lm_facts(config_dict: dict, config) -> LMFacts:
    """The facts of the causal LM whose config.json is ``config_dict`` under the run ``config``."""
    from ddpo_grpo.precision import WEIGHT_DTYPES

    shape = causal_lm.LMShape.from_config(config_dict)
    t, s = config.train, config.sample
    c = WEIGHT_DTYPES[_get(config, "mixed_precision", "no")].itemsize
    prompt = int(_get(s, "max_prompt_length", DEFAULT_PROMPT_LENGTH))
    response = int(_get(s, "max_response_length", DEFAULT_RESPONSE_LENGTH))
    seq = prompt + response
    targets = tuple(_get(t, "lora_target_modules", ())) or causal_lm.PROJECTIONS
    lora, per_layer = causal_lm.lora_count(shape, int(_get(t, "lora_rank", 8)), targets)
    acts = Activations(
        per_sample=causal_lm.activation_bytes(shape, seq, c, checkpointing=False),
        fixed=0,
        checkpointed_per_sample=causal_lm.activation_bytes(shape, seq, c, checkpointing=True),
        blocks=shape.layers,
        unmodelled=(),
        per_class=(
            ("decoder layer", shape.layers, seq * causal_lm.layer_activation_bytes(shape, c), seq * c * shape.hidden),
        ),
    )
    return LMFacts(
        shape=shape,
        params=causal_lm.parameter_count(shape),
        lora_numel=lora,
        lora_per_layer=per_layer,
        root_numel=causal_lm.root_parameters(shape),
        layer_numel=causal_lm.layer_parameters(shape),
        compute_itemsize=c,
        weight_itemsize=c,
        prompt_length=prompt,
        response_length=response,
        activations=acts,
        logits_per_sample=causal_lm.logit_bytes(shape, seq, c),
        kv_per_sample=causal_lm.kv_cache_bytes(shape, 1, seq, c),
    )


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def lm_estimate(facts: LMFacts, config, processes: int, strategy: str) -> Estimate:
    """The parts of the module docstring for ``strategy`` over ``processes`` processes."""
    t, s = config.train, config.sample
    p = max(int(processes), 1)
    sharded = strategy == "fsdp" and p > 1
    lora = bool(_get(t, "use_lora", False))
    c = facts.compute_itemsize
    trainable = facts.lora_numel if lora else facts.params
    f32 = 4 * trainable
    out = Estimate(strategy, p)
    states = {
        "weights": c * facts.params + f32 if lora else 4 * facts.params,
        "gradients": f32,
        "optimizer": 2 * f32,
        "reference": c * facts.params if float(_get(t, "beta", 0.0)) > 0 and not lora else 0,
    }
    if sharded:
        states = {k: _ceil_div(v, p) for k, v in states.items()}
    out.parts.update(states)
    if strategy == "ddp" and p > 1:
        out.parts["ddp buckets"] = f32
    if sharded:
        out.parts["fsdp gathered"] = (facts.root_numel + 2 * facts.layer_numel) * c
        root_trainable = 0 if lora else facts.root_numel
        layer_trainable = facts.lora_per_layer if lora else facts.layer_numel
        out.parts["fsdp grad in flight"] = 4 * max(root_trainable, layer_trainable)
    elif not lora and c == 2:
        out.parts["autocast copies"] = 2 * trainable
    checkpointing = bool(_get(t, "gradient_checkpointing", False))
    acts = facts.activations
    per_act = acts.checkpointed_per_sample if checkpointing else acts.per_sample
    b = int(_get(t, "batch_size", 1))
    out.parts["activations"] = b * per_act
    out.parts["logits"] = b * facts.logits_per_sample
    out.per_sample_activation = per_act + facts.logits_per_sample
    out.batch = b
    n = int(_get(s, "batch_size", 1))
    held = sum(out.parts[k] for k in ("weights", "optimizer", "reference", "fsdp gathered") if k in out.parts)
    held += out.parts.get("ddp buckets", 0)
    generation = n * facts.kv_per_sample + causal_lm.logit_bytes(facts.shape, n, c)
    recompute = n * facts.logits_per_sample
    out.sampling_phase = held + max(generation, recompute)
    out.load_phase = out.parts["weights"] + out.parts["reference"]
    out.notes.append(
        f"rollout: KV cache {generation / 2**30:.2f} GiB for sample.batch_size {n} × {facts.sequence} tokens; "
        f"log-prob forward logits {recompute / 2**30:.2f} GiB"
    )
    return out
