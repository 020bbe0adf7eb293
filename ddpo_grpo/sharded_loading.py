"""Building a sharded denoiser without a whole copy of it in any process (torchtitan's per-rank load).

Under ``distributed.strategy = "fsdp"`` each process needs 1/P of the denoiser's weights, so none should read all of
them. The order (``wiring.build_weights``), as torchtitan builds its models:

1. ``empty_component(path, name, cls, dtype)``: the pipeline component built as ``from_pretrained`` builds it (the
   same class, config, default dtype and float32-kept modules), with its parameters on the meta device — no memory,
   no random initialisation — and its buffers computed by ``__init__`` as usual (rotary tables and other
   non-persistent buffers are therefore exactly the normally loaded model's). The model records which safetensors
   file holds each of its checkpoint keys. ``None`` when the component cannot be built so (not a diffusers model,
   no safetensors weights, keys that do not match): it is then loaded whole, as before.
2. LoRA (``cpu_stand_ins`` lets peft create the factors on the CPU from the same random stream as on a whole model),
   the float32 trainable weights, gradient checkpointing, ``fully_shard``: the parameters become meta ``DTensor``
   shards.
3. ``materialize(model, device)``: every tensor allocated at its sharded size (``to_empty``), then each process reads
   from the files only its own rows of each parameter — FSDP2 shards dim 0 in ``torch.chunk``'s pieces, uneven sizes
   included; the offsets come from the DTensor's own layout — and every persistent buffer whole. What was real before
   (buffers from ``__init__``, the LoRA factors) is put back.

Files are opened per tensor (``safe_open(...).get_slice``): safetensors maps the file, and the pages a read touches
stay resident (and count in the process's memory) until the file is closed, so one open file per tensor bounds that
to one slice. (``torch.distributed.checkpoint``'s HuggingFaceStorageReader keeps each file open while it reads all
of a process's slices from it, and reads every ``*.safetensors`` of the directory, variants included.)

Memory per process: 1/P of the denoiser in its dtype, plus one tensor's slice while it is read.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch

#: diffusers' weight files of a component directory: one file, or an index naming the shards
WEIGHTS = "diffusion_pytorch_model.safetensors"
WEIGHTS_INDEX = "diffusion_pytorch_model.safetensors.index.json"


def weight_files(directory: Path) -> dict[str, str] | None:
    """checkpoint key -> safetensors file of a diffusers component directory; None when it has no such weights."""
    from safetensors import safe_open

    index = directory / WEIGHTS_INDEX
    if index.is_file():
        return {k: str(directory / f) for k, f in json.loads(index.read_text())["weight_map"].items()}
    single = directory / WEIGHTS
    if not single.is_file():
        return None
    with safe_open(str(single), framework="pt") as f:
        return dict.fromkeys(f.keys(), str(single))


def _fp32_kept(name: str, keep) -> bool:
    """diffusers' rule for ``_keep_in_fp32_modules``: a module name among the key's dotted parts."""
    return any(m in name.split(".") for m in keep or ())


def empty_component(directory, cls, dtype: torch.dtype):
    """The component of ``directory`` (a diffusers model class ``cls``) with its parameters on the meta device,
    in ``dtype`` as ``cls.from_pretrained(directory, torch_dtype=dtype)`` would hold them; None when it cannot be
    built so (the module docstring)."""
    from accelerate import init_empty_weights
    from diffusers import ModelMixin
    from diffusers.models.modeling_utils import no_init_weights

    directory = Path(directory)
    if not (isinstance(cls, type) and issubclass(cls, ModelMixin)):
        return None
    files = weight_files(directory)
    if files is None:
        return None
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # what from_pretrained builds under: __init__'s buffers get the same dtype
    try:
        with no_init_weights(), init_empty_weights(include_buffers=False):
            model = cls.from_config(cls.load_config(directory))
    finally:
        torch.set_default_dtype(previous)
    state = model.state_dict(keep_vars=True)
    if set(state) - set(files):  # e.g. an older layout from_pretrained converts: load it whole
        return None
    keep = cls._keep_in_fp32_modules
    with torch.no_grad():
        for name, tensor in state.items():
            if tensor.is_floating_point():
                want = torch.float32 if _fp32_kept(name, keep) else dtype
                if tensor.dtype != want:
                    _replace(model, name, tensor.to(want))
    model.register_to_config(_name_or_path=str(directory))
    model.eval()
    model._checkpoint_files = files  # where materialize reads each key
    return model


def _replace(model: torch.nn.Module, name: str, tensor: torch.Tensor) -> None:
    """Set the parameter or buffer ``name`` of ``model`` to ``tensor`` (a parameter keeps its requires_grad)."""
    owner, _, leaf = name.rpartition(".")
    module = model.get_submodule(owner)
    if leaf in module._parameters:
        old = module._parameters[leaf]
        module._parameters[leaf] = torch.nn.Parameter(tensor, requires_grad=old.requires_grad)
    else:
        module._buffers[leaf] = tensor


def is_empty(model: torch.nn.Module) -> bool:
    """True when some parameter of ``model`` is still on the meta device (not loaded yet)."""
    return any(p.is_meta for p in model.parameters())


@contextlib.contextmanager
def cpu_stand_ins(model: torch.nn.Module):
    """Inside, every meta parameter of ``model`` is a CPU stand-in of its shape and dtype that holds one element
    (``expand``): what peft reads from a base layer (its device and dtype), so the LoRA factors it creates, and the
    random draws that initialise them, are those of a whole model. The meta parameters come back afterwards (with the
    stand-ins' requires_grad)."""
    swapped = []
    for module in model.modules():
        for leaf, p in list(module._parameters.items()):
            if p is not None and p.is_meta:
                stand_in = torch.nn.Parameter(torch.zeros((), dtype=p.dtype).expand(p.shape), p.requires_grad)
                module._parameters[leaf] = stand_in
                swapped.append((module, leaf, p, stand_in))
    try:
        yield
    finally:
        for module, leaf, meta, stand_in in swapped:
            if module._parameters.get(leaf) is stand_in:
                meta.requires_grad_(stand_in.requires_grad)
                module._parameters[leaf] = meta


def _checkpoint_key(name: str) -> str:
    """The base checkpoint's key of a tensor of the model (peft renames a wrapped layer's weight to base_layer.*)."""
    return name.replace(".base_layer.", ".")


def _sources(model: torch.nn.Module) -> dict[str, tuple[str, str]]:
    """model tensor name -> (checkpoint key, file), over every empty component inside ``model``."""
    found = {}
    for prefix, module in model.named_modules():
        files = getattr(module, "_checkpoint_files", None)
        if files is None:
            continue
        head = f"{prefix}." if prefix else ""
        for name, _ in module.state_dict(keep_vars=True).items():
            key = _checkpoint_key(name)
            if key in files:
                found[head + name] = (key, files[key])
    return found


def _local_slices(tensor) -> tuple[torch.Tensor, tuple[slice, ...]]:
    """(the process's own part of ``tensor``, its index into the whole tensor): all of a plain tensor."""
    from torch.distributed.tensor import DTensor

    if not isinstance(tensor, DTensor):
        return tensor, tuple(slice(0, n) for n in tensor.shape)
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    shape, offset = compute_local_shape_and_global_offset(tensor.shape, tensor.device_mesh, tensor.placements)
    local = tensor.to_local()
    if tuple(local.shape) != tuple(shape):
        raise RuntimeError(f"a shard of shape {tuple(local.shape)} where its layout says {tuple(shape)}")
    return local, tuple(slice(o, o + n) for o, n in zip(offset, shape, strict=True))


@torch.no_grad()
def materialize(model: torch.nn.Module, device) -> int:
    """Allocate every tensor of ``model`` (sharded or not) on ``device`` and fill it (the module docstring's step 3);
    returns the number of bytes this process read from the files."""
    from safetensors import safe_open

    sources = _sources(model)
    tensors = dict(model.named_parameters(remove_duplicate=False))
    tensors.update(model.named_buffers(remove_duplicate=False))
    kept = {n: _local_slices(t)[0].clone() for n, t in tensors.items() if not t.is_meta and n not in sources}
    missing = sorted(n for n, t in tensors.items() if t.is_meta and n not in sources)
    if missing:
        raise RuntimeError(f"no checkpoint tensor for {len(missing)} empty tensors of the model, e.g. {missing[:3]}")
    model.to_empty(device=device)
    tensors = dict(model.named_parameters(remove_duplicate=False))
    tensors.update(model.named_buffers(remove_duplicate=False))
    read = 0
    for name, tensor in tensors.items():
        local, index = _local_slices(tensor)
        if name in kept:
            local.copy_(kept.pop(name))
            continue
        key, file = sources[name]
        with safe_open(file, framework="pt") as f:  # one tensor per opening (module docstring)
            part = f.get_slice(key)[index] if local.dim() else f.get_tensor(key)
            local.copy_(part)
            read += part.numel() * part.element_size()
            del part
    return read


def _plain_class(module: torch.nn.Module) -> type:
    """The model class of ``module`` without the wrapper class FSDP2 puts it in."""
    from torch.distributed.fsdp import FSDPModule

    return next(c for c in type(module).__mro__ if not issubclass(c, FSDPModule))


def whole_from(module: torch.nn.Module, state: dict) -> torch.nn.Module:
    """A plain CPU instance of ``module``'s class and config (a diffusers model, or a transformers one such as a
    causal language model) whose every parameter and persistent buffer is the tensor of ``state`` (assigned, not
    copied; non-persistent buffers as ``__init__`` computes them; tied weights tied again): a sharded model's
    gathered weights as a model ``save_pretrained`` can write."""
    from accelerate import init_empty_weights
    from diffusers.models.modeling_utils import no_init_weights

    cls = _plain_class(module)
    build = getattr(cls, "from_config", None) or cls._from_config  # (diffusers' name; transformers' own)
    with no_init_weights(), init_empty_weights(include_buffers=False):
        whole = build(module.config)
    whole.load_state_dict(state, strict=True, assign=True)
    if hasattr(whole, "tie_weights"):  # (assigning the two names of a tied weight unties them)
        whole.tie_weights()
    whole.eval()
    return whole
