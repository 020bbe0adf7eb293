"""The per-process memory of a training run, part by part (bytes), for one strategy and process count P.

With T the trainable parameters (the LoRA factors, or the whole denoiser), kept in float32 (wiring.build_weights
makes them so), W the denoiser's parameters and buffers (both experts of a two-expert model), P the processes,
b = train.batch_size:

    weights      the denoiser: LoRA — the frozen base in the weight dtype (bf16 / fp16 under mixed precision, else
                 fp32) + 4·T; full fine-tuning — 4 bytes per element (trainable weights are float32)
    gradients    4·T
    optimizer    AdamW 8·T (two moments), SGD with momentum 4·T, plain SGD 0
    reference    train.beta > 0: none for LoRA with a "fixed" reference (the adapters switched off), else a float32
                 copy of the trainable weights, 4·T (reference.py)
    ema          train.ema: 4·T;  sampler: the lagging sampler (train.sampler_decay_rate > 0): 4·T
    old policy   the forward objectives (awm / nft / rwr) without the lagging sampler: the epoch's weights before any
                 update, snapshotted for v_old (updates.ForwardUpdate.prepare), 4·T
    ddp buckets  DDP with P > 1: the all-reduce buckets, another 4·T (gradient_as_bucket_view off, accelerate's default)
    fsdp         the weights, gradients, optimizer, reference, EMA, sampler and old-policy rows ÷ P (fully_shard shards
                 every parameter of the denoiser, frozen ones too, and the states made from sharded parameters are
                 sharded). Gradients stay ÷ P over a step of several backward passes: sharding.no_sync leaves FSDP2's
                 reduce-scatter on in every backward, each adding its result into the process's shard.
                 "gathered": what is unsharded at a time, the root's own parameters and two blocks (the one
                 computing and the one prefetched) in the compute dtype, or every parameter when
                 reshard_after_forward is off. "grad in flight": the unit whose backward just ran holds its whole
                 float32 gradient until its reduce-scatter, 4 × the largest block's trainable elements.
                 cpu_offload moves the sharded rows to host memory (0 here)
    autocast     full fine-tuning under bf16/fp16 autocast without FSDP's mixed-precision policy: autocast keeps a
                 16-bit copy of each trainable weight for the backward, 2·T
    overlap      one backward pass per optimizer step (K trained steps × gradient_accumulation_steps = 1, K the
                 trained transitions per sample, or forward_timesteps for the forward objectives): the gradients
                 are set to None after each step (zero_grad(set_to_none=True)) and filled block by block as the
                 backward frees the same blocks' activations, so the two never peak together: the peak holds
                 max(activations, gradients), i.e. this row is −min(activations, gradients). With several
                 backward passes per step the gradients of the first are alive during the next forward: no overlap
    activations  the blocks' saved tensors for b samples (× 2 with CFG in the training forward: the conditional and
                 unconditional halves run as one batch), counted on meta (activations.py); checkpointing keeps
                 the blocks' inputs and one block's activations
    store        the epoch's rollouts kept on the device: per sample (T_s + 1) latents in sample.store_dtype, the
                 text condition (× 2 with CFG: the negative prompt's too) in the weight dtype, the decoded sample
                 in float32; sample.batch_size × sample.num_batches_per_epoch samples per process
    encoders     the text encoders in the weight dtype and the VAE in its own (sample.vae_dtype, facts._vae_dtype);
                 with sample.offload_encoders they are on the device
                 only while encoding / decoding (0 in the training phase, which is then compared with the encoding
                 phase: weights + states + store + encoders)
    rewards      the reward models every process builds for the whole run (reward.fns, and the eval.reward scorers
                 with eval.freq, a second instance even of a training reward), in their dtype (rewards.py)

The peak is the largest of five phases:

    training     the sum of the parts above
    encoding     with offloaded encoders: the encoders back on the device, no activations or gradients
    set-up       (the "load" phase) what loading leaves and passes through, as wiring.build_policy_for /
                 build_weights load a pipeline: each component read in its dtype (the weight dtype; the trained
                 denoiser in float32 for full fine-tuning) and moved to the device; under FSDP the denoiser built on
                 the meta device, sharded, and each process reading only its own shards' slices, one tensor at a
                 time (ddpo_grpo/sharded_loading.py). On the device: the rewards + the encoders (all of them, even with
                 offloading: they are moved to the device first, then back) + the weights row (÷ P under FSDP) +
                 the DDP buckets (allocated when DDP wraps the model) + the shadow copies made at the end
                 (reference, EMA, sampler). The files are read on the host: under FSDP one tensor's slice at a
                 time, twice its bytes (the slice, and the file's pages it touched, resident until the file is
                 closed), 2 × the largest tensor / P, beside the LoRA factors, which peft makes whole on the host
                 before they are sharded (4·T); on CPU processes that host memory is the device's and the phase
                 adds it. (A component read in the dtype it is stored in is mapped from its file, not copied: on
                 CPU processes its pages count once the run touches them; read in another dtype, diffusers holds
                 the file's tensors beside the converted ones, on the host, one weight file at a time.)
                 DDP over P > 1 processes: wrapping the denoiser broadcasts its parameters and buffers from rank 0
                 in buckets of 250 MiB, two in flight, each flattened into one buffer: + min(2 × 250 MiB, the
                 weights row) beside the set-up's parts (0.50 GiB measured over 1.81 GiB resident, 1.06 GiB of
                 weights, 2 CPU processes). On CPU processes the move to the process's device ("cpu:0", not
                 the tensors' "cpu") copies every pipeline component out of its file mapping, whose pages the copy
                 reads and which stays mapped until the last tensor of the file is replaced: 2 × (the encoders +
                 the denoiser as read, before LoRA) beside the rewards (2.10 GiB measured for 1.06 GiB of weights).
                 One CPU process moves nothing (its device is "cpu"); on a GPU that copy is the host-to-device
                 move, on the host. The buckets DDP allocates count on a GPU at once; on CPU processes their pages
                 are untouched, not resident, until the first backward fills them (the training phase).
    sampling     under FSDP with distributed.gather_for_sampling (when present in the config): the rollouts hold
                 the whole denoiser all-gathered in the compute dtype for each batch (sharding.gathered) beside the
                 sharded weights and states, the store, the encoders and rewards; no gradients (set to None after
                 each step) nor training activations; with the lagging sampler swapped in, its 4·T/P saved copy.
                 The run checks at set-up (wiring.gather_fits) that the whole denoiser fits the device's free
                 memory then, beside the sharded weights, EMA, sampler, reference, the encoders on the device and
                 the rewards (the optimizer's states and the store come later: this phase is what sampling needs
                 then); on devices of known memory where it does not, the run gathers block by block at every
                 step, and the planner counts no sampling phase (the training phase's "gathered" row covers it).
    swap         under FSDP, a forward with other weights swapped in (weights.swapped: the reference, the forward
                 objectives' old policy, the EMA for evaluation, the lagging sampler for rollouts): the sharded
                 trainable parameters are copied in place, their current values saved first, 4·T/P; the other
                 parts of the step are held but no training activations (the swapped forward runs before the
                 policy's own, under no_grad), nor gradients when one backward makes a step. Under DDP the swap
                 exchanges .data pointers (no copy)

Not counted: the activations outside the blocks (embedders, final layer, the loss: ≪ one block's), the allocator's
fragmentation and the CUDA context (≈ 0.5–1 GiB per GPU: keep that margin), a reward's own forward (no grad, one
batch of sample.batch_size at the reward's resolution), the no-grad activations of a sampling or swapped forward.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GIB = 2**30
OPTIMIZER_STATES = {"adamw": 2, "sgd": 1}  # float32 states per trainable element (sgd: with momentum)
#: DDP's start-up broadcast of the module's states from rank 0 (torch's broadcast_bucket_size, and the buckets its
#: broadcast_coalesced keeps in flight, each flattened into one buffer)
DDP_BROADCAST_BUCKET = 250 * 2**20
DDP_BROADCAST_IN_FLIGHT = 2
#: the parts that grow with train.batch_size (per_sample_activation is their increase per sample; "logits": a
#: causal LM's, lm_estimate.py)
PER_SAMPLE = ("activations", "logits")


@dataclass
class Estimate:
    """Bytes per process by part (``parts``, the training phase), and what the planner derived them from."""

    strategy: str
    processes: int
    parts: dict = field(default_factory=dict)
    encoding_phase: int = 0  # with offloaded encoders: the peak while they encode (else 0)
    load_phase: int = 0  # set-up: loading, sharding, the shadow copies (module docstring)
    swap_phase: int = 0  # under FSDP: a forward with other weights swapped in (else 0)
    sampling_phase: int = 0  # under FSDP with gathered sampling: the whole denoiser gathered (else 0)
    per_sample_activation: int = 0  # the activations row's increase per train sample (CFG included)
    notes: list = field(default_factory=list)

    batch: int = 1  # the train.batch_size of ``parts``
    overlap: bool = False  # one backward per optimizer step (the "overlap" row)

    @property
    def training_phase(self) -> int:
        return sum(self.parts.values())

    @property
    def phases(self) -> dict:
        """phase -> bytes: training, encoding, load, swap (0 where the phase does not occur)."""
        return {
            "training": self.training_phase,
            "encoding": self.encoding_phase,
            "load": self.load_phase,
            "swap": self.swap_phase,
            "sampling": self.sampling_phase,
        }

    @property
    def peak(self) -> int:
        return max(self.phases.values())

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phases.get)

    def peak_for(self, batch: int) -> int:
        """The peak with train.batch_size = ``batch`` (the other parts as they are)."""
        rest = sum(v for k, v in self.parts.items() if k not in PER_SAMPLE + ("overlap",))
        act = sum(self.parts.get(k, 0) for k in PER_SAMPLE) + (batch - self.batch) * self.per_sample_activation
        overlap = -min(act, self.parts.get("gradients", 0)) if self.overlap else 0
        return max(rest + act + overlap, self.encoding_phase, self.load_phase, self.swap_phase, self.sampling_phase)

    def largest_batch(self, memory: int) -> int:
        """The largest train.batch_size whose peak fits ``memory`` bytes (0 when even one sample does not fit)."""
        if not self.per_sample_activation or self.peak_for(1) > memory:
            return 0
        lo, hi = 1, 2
        while self.peak_for(hi) <= memory and hi < 2**20:
            lo, hi = hi, 2 * hi
        while hi - lo > 1:  # peak_for(lo) fits, peak_for(hi) does not
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.peak_for(mid) <= memory else (lo, mid)
        return lo


def estimate(model, config, processes: int, strategy: str, memory: int = 0) -> Estimate:
    """The parts for ``model`` (``plan.ModelFacts``) under ``config`` with ``processes`` processes and ``strategy``
    on devices of ``memory`` bytes (0 = unknown: gathered sampling is taken to fit)."""
    t, s, d = config.train, config.sample, config.distributed
    p = max(int(processes), 1)
    sharded = strategy == "fsdp" and p > 1
    offload = sharded and bool(d.cpu_offload)
    out = Estimate(strategy, p)
    trainable = model.lora_numel if t.use_lora else model.denoiser_params
    f32 = 4 * trainable
    weights = model.denoiser_bytes_weight_dtype + f32 if t.use_lora else 4 * model.denoiser_numel
    forward_objective = t.objective != "grpo"
    states = {
        "weights": weights,
        "gradients": f32,
        "optimizer": OPTIMIZER_STATES.get(t.optimizer, 2) * f32 if (t.optimizer != "sgd" or t.sgd_momentum) else 0,
        "reference": f32 if t.beta > 0 and not (t.use_lora and t.reference_update == "fixed") else 0,
        "ema": f32 if t.ema else 0,
        "sampler": f32 if t.sampler_decay_rate > 0 else 0,
        "old policy": f32 if forward_objective and not t.sampler_decay_rate > 0 else 0,
    }
    if sharded:
        for k in states:
            states[k] = 0 if offload else -(-states[k] // p)
        if offload:
            out.notes.append("distributed.cpu_offload: the sharded weights and states live in host memory")
    out.parts.update(states)
    if strategy == "ddp" and p > 1:
        out.parts["ddp buckets"] = f32
    if sharded:
        compute = model.compute_itemsize
        gathered = model.denoiser_numel if not d.reshard_after_forward else model.root_numel + 2 * model.largest_block
        out.parts["fsdp gathered"] = gathered * compute
        out.parts["fsdp grad in flight"] = 4 * model.largest_block_trainable
    elif not t.use_lora and config.mixed_precision in ("bf16", "fp16") and model.on_accelerator:
        out.parts["autocast copies"] = 2 * trainable
    cfg_train = t.objective == "grpo" and t.cfg and s.guidance_scale > 1
    factor = 2 if cfg_train else 1
    act = model.activations
    out.per_sample_activation = factor * (act.checkpointed_per_sample if t.gradient_checkpointing else act.per_sample)
    out.parts["activations"] = act.fixed + t.batch_size * out.per_sample_activation
    out.batch = int(t.batch_size)
    out.overlap = backward_passes(config) == 1
    if out.overlap:
        out.parts["overlap"] = -min(out.parts["activations"], out.parts["gradients"])
    per_sample_store = (
        (s.num_steps + 1) * model.latent_numel * model.store_itemsize
        + (2 if s.guidance_scale > 1 else 1) * model.text_tokens * model.text_width * model.weight_itemsize
        + 4 * model.sample_numel
    )
    out.parts["store"] = s.batch_size * s.num_batches_per_epoch * per_sample_store
    rewards = model.rewards.bytes if model.rewards is not None else 0
    if s.offload_encoders:
        out.parts["encoders"] = 0
        out.encoding_phase = sum(
            v for k, v in out.parts.items() if k not in ("activations", "overlap", "gradients", "ddp buckets")
        )
        out.encoding_phase += model.encoder_bytes + rewards
    else:
        out.parts["encoders"] = model.encoder_bytes
    out.parts["rewards"] = rewards
    out.load_phase = _set_up(model, config, out.parts, p if sharded else 1, ddp=strategy == "ddp" and p > 1)
    swaps = out.parts["reference"] or forward_objective or t.ema or t.sampler_decay_rate > 0
    if sharded and not offload and swaps:
        held = {"activations", "overlap"} | ({"gradients"} if out.overlap else set())
        out.swap_phase = sum(v for k, v in out.parts.items() if k not in held) + -(-f32 // p)
    whole = model.denoiser_numel * model.compute_itemsize
    at_check = sum(out.parts[k] for k in ("weights", "reference", "ema", "sampler", "encoders", "rewards"))
    if sharded and getattr(d, "gather_for_sampling", False) and memory and at_check + whole > memory:
        out.notes.append(
            f"distributed.gather_for_sampling: the whole denoiser ({whole / GIB:.1f} GiB) does not fit beside the "
            f"{at_check / GIB:.1f} GiB held at set-up; the run samples gathering block by block"
        )
    elif sharded and getattr(d, "gather_for_sampling", False):
        held = {"activations", "overlap", "gradients", "fsdp gathered", "fsdp grad in flight"}
        out.sampling_phase = sum(v for k, v in out.parts.items() if k not in held) + whole
        out.sampling_phase += -(-f32 // p) if t.sampler_decay_rate > 0 and not offload else 0
    return out


def _set_up(model, config, parts: dict, shards: int, ddp: bool = False) -> int:
    """The set-up phase with the denoiser in ``shards`` shards (1: not sharded), ``ddp``: DDP over several
    processes: the module docstring's "set-up"."""
    t = config.train
    encoders = model.encoder_bytes  # all on the device before the offloaded ones go back to the host
    shadows = parts["reference"] + parts["ema"] + parts["sampler"]
    buckets = parts.get("ddp buckets", 0) if model.on_accelerator else 0  # (CPU: untouched until the first backward)
    device = parts["rewards"] + encoders + parts["weights"] + buckets + shadows
    if shards > 1 and not model.on_accelerator:  # CPU processes: the host's read is the device's memory
        read_itemsize = model.weight_itemsize if t.use_lora else 4  # the trained denoiser is read in float32
        device += 2 * -(-model.largest_tensor // shards) * read_itemsize + (4 * model.lora_numel if t.use_lora else 0)
    if not ddp:
        return device
    wrap = device + min(DDP_BROADCAST_IN_FLIGHT * DDP_BROADCAST_BUCKET, parts["weights"])
    if model.on_accelerator:
        return wrap
    base = parts["weights"] - (4 * model.lora_numel if t.use_lora else 0)  # the denoiser as read (no LoRA yet)
    return max(wrap, parts["rewards"] + 2 * (encoders + base))


def backward_passes(config) -> int:
    """Backward passes per optimizer step: trained transitions per sample K (grpo: ⌈timestep_fraction · S⌉ of the S
    stochastic steps, S = sde_window_size or num_steps; forward objectives: forward_timesteps) × accumulation."""
    import math

    t, s = config.train, config.sample
    if t.objective == "grpo":
        stochastic = s.sde_window_size if s.sde_window_size > 0 else s.num_steps
        k = max(1, math.ceil(t.timestep_fraction * stochastic))
    else:
        k = max(1, int(t.forward_timesteps))
    return k * max(1, int(t.gradient_accumulation_steps))
