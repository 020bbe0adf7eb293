"""The activations a denoiser block keeps for its backward pass, counted on the meta device.

Method: the block (built on meta, its trainable parameters marked as the run marks them) runs one forward on meta
inputs of the sample's shapes (``blocks.py``) under ``torch.autograd.graph.saved_tensors_hooks``; every tensor
autograd saves is recorded by its storage, once (views and tensors saved twice share it), leaving out the block's
own parameters and buffers (they are weights, counted elsewhere). That is exactly what the backward pass holds, for
the block as diffusers writes it, in the dtype it computes in — no per-family formula to drift from the code.

Attention: on meta, scaled-dot-product attention would take the math path and keep the N×N attention matrix; the
run's kernels (flash / memory-efficient on GPUs, the flash kernel of CPU fp32) keep q, k, v, the output and the
log-sum-exp [B, H, N] (float32) instead. The count replaces SDPA by a function that saves exactly those.

Mixed precision: under bf16 / fp16 the blocks run as autocast runs them — a ``TorchFunctionMode`` casts the inputs
of the matrix products (linear, matmul, bmm, baddbmm, addmm, conv) to the 16-bit dtype and those of the ops autocast
keeps in float32 (layer / group norm, softmax, exp, pow, rsqrt, sum, norm) to float32, above autograd as autocast
does, so the casted copies are what autograd saves. (PyTorch's autocast does not run on the meta device.)

Per sample and fixed parts: the forward runs at batch 1 and 2; per sample = S(2) − S(1), and the rest (tensors
shared by every sample, e.g. the rotary tables) is S(1) − per sample, kept once for the whole model.

With gradient checkpointing (``train.gradient_checkpointing``, non-reentrant ``torch.utils.checkpoint``) a block keeps
only its inputs (the streams entering it) until the backward, where it recomputes its forward and holds its full
activations once: total = Σ blocks' inputs + the largest block's activations.

Denoisers whose blocks take inputs no builder makes (the UNets: each block's resolution, channels and skip
connections differ) are counted whole (``count_whole``): the denoiser's own forward on meta inputs
(``blocks.unet_inputs``), each saved storage attributed to the block running when autograd saved it (forward hooks)
or to the model outside the blocks; with checkpointing a block keeps every tensor it was called with (its skip
connections included) and the largest block's activations come once, the outside's as they are.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from ddpo_grpo.planner.blocks import block_inputs


class _FusedAttention(torch.autograd.Function):
    """What a fused attention kernel saves: q, k, v, the output, the log-sum-exp (float32, [B, H, N_q])."""

    @staticmethod
    def forward(ctx, q, k, v):
        out = q.new_empty(*q.shape[:-1], v.shape[-1])
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):  # never called: the planner runs forwards only
        raise RuntimeError("planner: the counting attention has no backward")


def _sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    return _FusedAttention.apply(query, key, value)


@contextlib.contextmanager
def _fused_attention():
    original = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = _sdpa
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original


#: autocast's policy (the CUDA op lists' main entries): matrix products in the 16-bit dtype, these ops in float32
_LOW = (
    "torch.nn.functional.linear",
    "torch.matmul",
    "torch.bmm",
    "torch.baddbmm",
    "torch.addmm",
    "torch.mm",
    "torch.nn.functional.conv1d",
    "torch.nn.functional.conv2d",
    "torch.nn.functional.conv3d",
    "torch.Tensor.__matmul__",
)
_FP32 = (
    "torch.nn.functional.layer_norm",
    "torch.layer_norm",
    "torch.nn.functional.group_norm",
    "torch.group_norm",
    "torch.nn.functional.softmax",
    "torch.softmax",
    "torch.Tensor.softmax",
    "torch.nn.functional.log_softmax",
    "torch.exp",
    "torch.Tensor.exp",
    "torch.pow",
    "torch.Tensor.pow",
    "torch.rsqrt",
    "torch.Tensor.rsqrt",
    "torch.sum",
    "torch.Tensor.sum",
    "torch.norm",
)


def _resolve(names):
    import operator

    out = set()
    for name in names:
        parts = name.split(".")
        try:
            out.add(operator.attrgetter(".".join(parts[1:]))(torch))
        except AttributeError:
            continue
    return out


class _Autocast(torch.overrides.TorchFunctionMode):
    """Autocast's casts on any device (meta included): see the module docstring."""

    def __init__(self, dtype: torch.dtype):
        super().__init__()
        self.dtype, self.low, self.fp32 = dtype, _resolve(_LOW), _resolve(_FP32)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        target = self.dtype if func in self.low else torch.float32 if func in self.fp32 else None
        if target is not None:

            def cast(a):
                if isinstance(a, torch.Tensor) and a.is_floating_point() and a.dtype != target:
                    return a.to(target)
                return a

            args = tuple(cast(a) for a in args)
            kwargs = {k: cast(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def _key(t: torch.Tensor):
    return t.untyped_storage()._cdata


def saved_bytes(block: torch.nn.Module, inputs: dict, autocast: torch.dtype | None = None) -> int:
    """Bytes of the storages autograd saves in ``block(**inputs)`` (the block's own weights left out), under
    autocast to ``autocast`` (bf16 / fp16) when given."""
    weights = {_key(t) for t in list(block.parameters()) + list(block.buffers())}
    saved: dict[int, int] = {}

    def pack(t):
        key = _key(t)
        if key not in weights:
            saved[key] = t.untyped_storage().nbytes()
        return t

    mode = _Autocast(autocast) if autocast is not None else contextlib.nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _fused_attention(), torch.enable_grad(), mode:
        block(**inputs)
    return sum(saved.values())


def input_bytes(inputs: dict) -> int:
    """Bytes of the streams entering a block (what a checkpointed block keeps)."""
    return sum(
        t.numel() * t.element_size() for k, t in inputs.items() if k in ("hidden_states", "encoder_hidden_states")
    )


@dataclass(frozen=True)
class Activations:
    """Activation bytes of the denoiser's blocks for one training forward."""

    per_sample: int  # all blocks, no checkpointing, per sample
    fixed: int  # kept once whatever the batch (shared tables)
    checkpointed_per_sample: int  # with checkpointing: Σ block inputs + the largest block's activations, per sample
    blocks: int  # blocks counted
    unmodelled: tuple[str, ...]  # block classes without an input builder (their activations are not counted)
    per_class: tuple = ()  # (block class, how many, largest per-sample bytes of one, its inputs per sample)

    def total(self, batch: int, checkpointing: bool) -> int:
        per = self.checkpointed_per_sample if checkpointing else self.per_sample
        return self.fixed + batch * per


def _signature(block: torch.nn.Module) -> tuple:
    """What a block's saved activations depend on besides its inputs: its class and every parameter's and buffer's
    name, shape, dtype and trainability (a transformer's repeated blocks share one; a UNet's stages differ)."""
    tensors = [(n, tuple(t.shape), t.dtype, t.requires_grad) for n, t in block.named_parameters()]
    tensors += [(n, tuple(t.shape), t.dtype) for n, t in block.named_buffers()]
    return (type(block), tuple(tensors))


def count(blocks: list[torch.nn.Module], config, image_tokens: int, text_tokens: int, dtype) -> Activations:
    """Activations of ``blocks`` (meta modules, trainable parameters marked) for the sample's token counts. Blocks
    of one signature (``_signature``) fed inputs of one shape save the same bytes: each is traced once."""
    per_sample = fixed = inputs_total = largest = 0
    unmodelled, classes, traced = set(), {}, {}
    for block in blocks:
        one = block_inputs(block, config, 1, image_tokens, text_tokens, dtype)
        if one is None:
            unmodelled.add(type(block).__name__)
            continue
        autocast = dtype if dtype in (torch.bfloat16, torch.float16) else None
        two = block_inputs(block, config, 2, image_tokens, text_tokens, dtype)
        key = (_signature(block), *(_shapes(inputs) for inputs in (one, two)))
        if key not in traced:
            traced[key] = (saved_bytes(block, one, autocast), saved_bytes(block, two, autocast))
        s1, s2 = traced[key]
        per = s2 - s1
        per_sample += per
        fixed = max(fixed, s1 - per)
        inputs_total += input_bytes(one)
        largest = max(largest, per)
        n, most, kept = classes.get(type(block).__name__, (0, 0, 0))
        classes[type(block).__name__] = (n + 1, max(most, per), max(kept, input_bytes(one)))
    per_class = tuple((name, *v) for name, v in classes.items())
    return Activations(per_sample, fixed, inputs_total + largest, len(blocks), tuple(sorted(unmodelled)), per_class)


def _shapes(inputs: dict) -> tuple:
    """The (name, shape, dtype) of every tensor among a block's inputs, and the other inputs' values."""
    out = []
    for k, v in sorted(inputs.items()):
        parts = _tensors(v)
        out.append((k, tuple((tuple(t.shape), t.dtype) for t in parts) if parts else repr(v)))
    return tuple(out)


def _tensors(value) -> list:
    """The tensors in ``value`` (a tensor, or tuples / lists / dicts of them)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _attributed(model: torch.nn.Module, blocks, inputs: dict, autocast) -> tuple[int, list, list]:
    """One forward of ``model`` on meta: (bytes saved outside the blocks, bytes saved in each block, bytes of each
    block's input tensors)."""
    weights = {_key(t) for t in list(model.parameters()) + list(model.buffers())}
    index = {id(b): i for i, b in enumerate(blocks)}
    saved, current = {}, []
    kept = [0] * len(blocks)

    def pack(t):
        key = _key(t)
        if key not in weights and key not in saved:
            saved[key] = (current[-1] if current else -1, t.untyped_storage().nbytes())
        return t

    def enter(module, args, kwargs):
        current.append(index[id(module)])
        tensors = {_key(t): t.untyped_storage().nbytes() for t in _tensors(args) + _tensors(kwargs)}
        kept[current[-1]] = sum(tensors.values())

    def leave(module, args, kwargs, output):
        current.pop()

    hooks = [b.register_forward_pre_hook(enter, with_kwargs=True) for b in blocks]
    hooks += [b.register_forward_hook(leave, with_kwargs=True) for b in blocks]
    mode = _Autocast(autocast) if autocast is not None else contextlib.nullcontext()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), _fused_attention(), torch.enable_grad(), mode:
            model(**inputs)
    finally:
        for h in hooks:
            h.remove()
    per_block = [0] * len(blocks)
    outside = 0
    for owner, nbytes in saved.values():
        if owner < 0:
            outside += nbytes
        else:
            per_block[owner] += nbytes
    return outside, per_block, kept


def count_whole(model: torch.nn.Module, blocks: list, inputs_for, dtype) -> Activations:
    """Activations of ``model`` (meta, trainable parameters marked) counted whole (module docstring);
    ``inputs_for(batch)`` makes its keyword inputs."""
    autocast = dtype if dtype in (torch.bfloat16, torch.float16) else None
    o1, b1, k1 = _attributed(model, blocks, inputs_for(1), autocast)
    o2, b2, k2 = _attributed(model, blocks, inputs_for(2), autocast)
    per_block = [y - x for x, y in zip(b1, b2)]
    kept = [y - x for x, y in zip(k1, k2)]
    total1, total2 = o1 + sum(b1), o2 + sum(b2)
    per_sample = total2 - total1
    classes = {}
    for block, per, keep in zip(blocks, per_block, kept):
        n, most, k = classes.get(type(block).__name__, (0, 0, 0))
        classes[type(block).__name__] = (n + 1, max(most, per), max(k, keep))
    checkpointed = (o2 - o1) + sum(kept) + max(per_block, default=0)
    return Activations(
        per_sample,
        total1 - per_sample,
        checkpointed,
        len(blocks),
        (),
        tuple((name, *v) for name, v in classes.items()),
    )
