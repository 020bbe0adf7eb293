"""How a plan is printed: a table of the parts per strategy, and the one-line summary train.py prints at start-up."""

from __future__ import annotations

from ddpo_grpo.planner.estimate import GIB

ORDER = (
    "weights",
    "gradients",
    "optimizer",
    "reference",
    "ema",
    "sampler",
    "old policy",
    "ddp buckets",
    "fsdp gathered",
    "fsdp grad in flight",
    "autocast copies",
    "activations",
    "logits",
    "overlap",
    "store",
    "encoders",
    "rewards",
)
#: the phases besides training, as the table names them (estimate.py's module docstring)
PHASES = (
    ("encoding", "encoding phase (offloaded encoders)"),
    ("load", "set-up phase (loading, sharding)"),
    ("swap", "swap phase (other weights swapped in)"),
    ("sampling", "sampling phase (the denoiser gathered whole)"),
)


def gib(n: int) -> str:
    return f"{n / GIB:.2f}"


def size(n: int) -> str:
    """``12.34 GiB``, or ``56.7 MiB`` below 1 GiB (the tiny models)."""
    return f"{n / GIB:.2f} GiB" if abs(n) >= GIB else f"{n / 2**20:.1f} MiB"


def largest(plan, estimate) -> str:
    """The largest train.batch_size that fits, or "?" when some block's activations are not modelled."""
    if plan.facts.activations.unmodelled or not plan.facts.num_blocks:
        return "? (activations not modelled)"
    return str(estimate.largest_batch(plan.memory))


def table(plan) -> str:
    """Markdown table: one row per part, one column per strategy, then the peak and the largest train batch."""
    ests = plan.estimates
    head = [f"{e.strategy} × {e.processes}" for e in ests]
    lines = ["| part (GiB per process) | " + " | ".join(head) + " |", "|---" * (len(ests) + 1) + "|"]
    for part in ORDER:
        if any(e.parts.get(part) for e in ests):
            lines.append(f"| {part} | " + " | ".join(gib(e.parts.get(part, 0)) for e in ests) + " |")
    lines.append("| training phase | " + " | ".join(gib(e.training_phase) for e in ests) + " |")
    labels = getattr(plan.facts, "phase_labels", {})
    for phase, label in PHASES:
        label = labels.get(phase, label)
        if any(e.phases[phase] for e in ests):
            lines.append(f"| {label} | " + " | ".join(gib(e.phases[phase]) for e in ests) + " |")
    lines.append("| **peak** | " + " | ".join(f"**{gib(e.peak)}**" for e in ests) + " |")
    lines.append(
        f"| fits {plan.memory / GIB:.0f} GiB | "
        + " | ".join("yes" if e.peak <= plan.memory else "no" for e in ests)
        + " |"
    )
    lines.append("| largest train.batch_size | " + " | ".join(largest(plan, e) for e in ests) + " |")
    return "\n".join(lines)


def lm_header(plan) -> str:
    """The header of a causal LM's plan: its shape, sequence and trainable elements, per-sequence sizes."""
    f, s = plan.facts, plan.facts.shape
    a = f.activations
    trainable = f"LoRA {f.lora_numel:,}" if plan.lora else f"all {f.params:,}"
    return "\n".join(
        [
            f"model: {plan.model} ({s.architecture}; {f.params / 1e9:.3f} B parameters, {s.layers} decoder layers, "
            f"h {s.hidden}, {s.heads} heads / {s.kv_heads} KV heads × {s.head_dim}, MLP {s.intermediate}, "
            f"vocab {s.vocab}, {'tied' if s.tied else 'untied'} embeddings)",
            f"sequence: {f.prompt_length} prompt + {f.response_length} response tokens; train.batch_size {plan.batch}; "
            f"trainable {trainable}",
            f"per sequence: activations {gib(a.per_sample)} GiB ({gib(a.checkpointed_per_sample)} with "
            f"checkpointing), logits {gib(f.logits_per_sample)} GiB, KV cache {gib(f.kv_per_sample)} GiB",
        ]
    )


def header(plan) -> str:
    f = plan.facts
    if hasattr(f, "shape"):  # a causal LM (lm_estimate.LMFacts)
        return lm_header(plan)
    a = f.activations
    lines = [
        f"model: {plan.model} ({f.pipeline}; {f.denoiser_class} {f.denoiser_numel / 1e9:.3f} B elements, "
        f"{f.num_blocks} blocks; encoders and VAE {sum(n for _, n in f.encoders.values()) / 1e9:.3f} B)",
        f"sample: {f.image_tokens} image (or video) + {f.text_tokens} text tokens; train.batch_size {plan.batch}; "
        f"trainable {'LoRA ' + format(f.lora_numel, ',') if plan.lora else 'all ' + format(f.denoiser_params, ',')}",
        f"activations per sample: {gib(a.per_sample)} GiB ({gib(a.checkpointed_per_sample)} with checkpointing)"
        + (f"; not modelled: {', '.join(a.unmodelled)}" if a.unmodelled else ""),
    ]
    r = f.rewards
    if r is not None and (r.models or r.unmodelled):
        lines.append(
            "rewards on the device: "
            + "; ".join(
                f"{name} ({role}): {model} {n / 1e9:.3f} B in {dtype}" for role, name, model, n, dtype in r.models
            )
            + (f"; not modelled: {', '.join(r.unmodelled)}" if r.unmodelled else "")
        )
    if len(f.denoisers) > 1:
        lines.append(f"denoisers: {' + '.join(f.denoisers)} (two experts, both held; activations of one)")
    if a.per_class:
        lines.append(
            "per block and sample: "
            + "; ".join(
                f"{name} × {n}: {size(most)} ({size(kept)} kept with checkpointing)"
                for name, n, most, kept in a.per_class
            )
        )
    return "\n".join(lines)


def summary(plan, estimate) -> str:
    """``memory plan (fsdp × 8): peak 41.3 GiB per process (training phase; set-up 12.1 GiB, swap 14.0 GiB);
    training = weights 2.9 GiB + …; fits 80 GiB, largest train.batch_size 6``."""
    parts = " ".join(f"{'−' if v < 0 else '+'} {k} {size(abs(v))}" for k in ORDER if (v := estimate.parts.get(k)))
    if plan.facts.activations.unmodelled:
        parts += f" (activations of {', '.join(plan.facts.activations.unmodelled)} not modelled)"
    if plan.facts.rewards is not None and plan.facts.rewards.unmodelled:
        parts += f" (rewards not modelled: {', '.join(plan.facts.rewards.unmodelled)})"
    parts = parts[2:] if parts.startswith("+ ") else parts
    fits = ""
    if plan.memory:
        fits = (
            f"; {'fits' if estimate.peak <= plan.memory else 'does NOT fit'} {plan.memory / GIB:.0f} GiB, "
            f"largest train.batch_size {largest(plan, estimate)}"
        )
    names = getattr(plan.facts, "phase_names", {})
    others = "".join(
        f", {names.get(phase, phase)} {size(estimate.phases[phase])}"
        for phase, _ in PHASES
        if estimate.phases[phase] and phase != estimate.peak_phase
    )
    if estimate.peak_phase != "training":
        others = f", training {size(estimate.training_phase)}" + others
    return (
        f"memory plan ({estimate.strategy} × {estimate.processes}): peak {size(estimate.peak)} per process "
        f"({estimate.peak_phase} phase{others}); training = {parts}{fits}"
    )
