"""GPU check: FLUX.1-dev, SD3.5-Medium and Wan 2.1 1.3B at real size, random weights, through the real trainer.

For each family and each ``distributed.strategy`` (ddp, fsdp) the check builds the pipeline from its shipped configs
(``config/model_configs/``) with random weights, sets up ``ddpo_grpo.trainer.Trainer`` from the family's recipe
through the config machinery ``scripts/train.py`` uses (``ddpo_grpo.cli.load_config``: the recipe file, then
``--config.*`` overrides), runs one epoch (``Trainer.run_epoch``) and measures, on the same trainer:

    rollout_over_pipeline   ``scripts/benchmark.py``'s ``bench_rollout``: sample_rollout (every transition recorded)
                            ÷ the family's plain diffusers pipeline call on the same pipeline and initial noise
    train_over_bare         ``bench_train``: Trainer.update_phase ÷ a bare predict + backward + optimizer-step loop
                            over the same minibatches
    peak_over_planner       the epoch's peak memory ÷ the memory planner's prediction (``ddpo_grpo.planner.plan``
                            for the same config and model configs). CUDA: ``torch.cuda.max_memory_allocated`` during
                            the epoch, minus what was allocated before the trainer was built. CPU: the growth of the
                            resident set (/proc/self/status VmHWM after the epoch − VmRSS before the build)
    mfu                     model FLOPs utilisation of a training pass (one ``update_phase`` over the epoch's
                            samples): FLOPs ÷ seconds ÷ the card's peak dense bf16 FLOP/s (``PEAK_BF16_TFLOPS``)
    images_per_s            sampling (bench_rollout's batch ÷ its median rollout time), training (samples of a
                            training pass ÷ its time), and the cold first epoch (images ÷ perf/epoch_s)

FLOPs are counted over one whole ``update_phase`` by ``FlopCount``, a dispatch mode that sums torch's own formulas
(``torch.utils.flop_counter``'s registry) for the forward and backward passes as executed: matrix products,
convolutions and scaled-dot-product attention; elementwise work and the optimizer's update are not counted; with
LoRA the frozen weights' gradients are not computed, so not counted; with gradient checkpointing the recomputed
forward is (``flops_include_recompute``: hardware FLOPs, not model FLOPs). ``FlopCounterMode`` itself is not used:
its module tracker hooks the recomputed blocks' tensors too, which undoes gradient checkpointing's saving (Wan on an
H200 ran out of its 140 GB in the counted pass on 2026-11-28; on CPU a 4-block Wan's pass peaked 1.5–1.7 GB higher
under it than under ``FlopCount``, with the same total: docs/scaling.md). The time is the faster of two uncounted
passes over the same samples, synchronised. On a CPU the attention is not counted (its CPU kernel has no formula
there).

Models. Every component is built on the meta device from its config, its parameters given the storage dtype
(bfloat16: the three recipes' weight dtype), moved with ``to_empty`` to the run's device (accelerate's, as the
trainer uses it) and initialised there: weights ~ N(0, 1/fan_in), biases 0, the other one-dimensional parameters
(norm scales) 1; the buffers the constructors compute (rotary tables, position ids) are kept, tied weights tied
again (T5's embedding table). Nothing is read or downloaded. The denoisers and VAEs are the shipped configs as they
are; the text encoders keep their real width and vocabulary with one layer (the condition has the real shape: CLIP
77 tokens, T5 / UMT5 ``max_sequence_length``);
tokenizers are the character-level ones of ``ddpo_grpo.tiny.common`` (no vocabulary ships), the encoders' special
token ids set to theirs. The trainer loads the pipeline through a factory file (``pretrained.model =
"experiments/gpu_check.py:flux"``, the path for user models; ``ddpo_grpo.policies``). ``--tiny`` cuts every
component's depth and width (``TINY_CUTS``) and the sizes (``TINY_SETTINGS``): the same code path in well under a
minute on a CPU, which tests/test_gpu_check.py runs.

Settings per family (``CASES``): the recipe's (config/flux.py:pickscore, config/sd3.py:pickscore,
config/wan.py:t2v) with the sizes of a check: one batch of 2 samples (one group; Wan: 10 steps, not 20), the reward
``redness`` (no reward model to download), no tracker, no checkpoints. SD3.5-Medium is fully fine-tuned (the
recipe's LoRA off) with no EMA and no KL reference (each a float32 copy of its 2.2 B trainable weights: the planner
puts the run at 46.7 GiB, and bench_train's second AdamW adds 16.7, so with both copies it would not fit 80 GB).

With one process (``--nproc_per_node 1``) accelerate creates the process group (NCCL on a GPU) but does not wrap
the model in DDP (on CPU with ACCELERATE_USE_CPU=1 it does, over gloo), nothing is sharded: ``strategy=fsdp`` leaves
the model whole (wiring.scale_out says so), and the trainer runs no collective (ddpo_grpo/distributed.py). Each
case's ``sharded`` and ``wrapped`` fields record it.

Run on a GPU machine that has torch, transformers, accelerate and peft but not diffusers or ml-collections, and no
network. Here, once (the wheels, 6.4 MB, into a git-ignored folder of the checkout that travels; diffusers' other
requirements — filelock, huggingface-hub ≥ 1.32, numpy, regex, requests, safetensors ≥ 0.8, Pillow — and
ml-collections' — absl-py, PyYAML — are on that image; diffusers' importlib_metadata is imported on Python < 3.8
only)::

    echo /.whl/ >> .git/info/exclude
    python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d .whl diffusers==0.42.1 ml_collections==1.1.0

There (the device tool's ``run`` with ``carry: [".whl"]``; on an H200 on 2026-11-28 FLUX's case took 60 s and
SD3.5's 123 s, each with its own process start: docs/scaling.md)::

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 || exit;
    python3 -m torch.distributed.run --standalone --nproc_per_node 1 experiments/gpu_check.py --out $OUT

``$OUT/gpu_check.json`` holds the figures (written after every case, so a cut-short run keeps what it measured; a
case that fails is recorded under "failed" with its traceback and the figures it had measured, the JSON is written
before any clean-up, the others still run unless the failure broke the device's context ("device_lost"), and the
exit status is 1) and
``$OUT/gpu_check.log`` the trainers' output. On CPU (what the test runs; ACCELERATE_USE_CPU=1 gives the process
group gloo)::

    ACCELERATE_USE_CPU=1 OMP_NUM_THREADS=1 MALLOC_MMAP_THRESHOLD_=65536 torchrun --standalone --nproc_per_node 1 \
        experiments/gpu_check.py --tiny --out /tmp/gpu_check --peak-tflops 1

Options: --cases flux,sd3,wan; --strategies ddp,fsdp; --repeats N (timed pairs per ratio, default 2);
--max-seconds S (cases not started within S seconds are recorded as skipped; default 360); --cudnn-attention (sets
``config.cudnn_attention``: torch's cuDNN attention allowed again, off by default); --workdir DIR (the
runs' directories and the configs the planner reads; default /tmp/gpu_check_<torchrun's run id>, so that --out
holds two files); --peak-tflops X (the card's peak dense bf16 TFLOP/s when it is not in the table; needed for an
MFU on CPU).

Result: ``gpu_check.json`` under ``--out``; what to read in it and the figures of a run: docs/scaling.md, "GPU check".
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import importlib.util
import itertools
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "config" / "model_configs"
STRATEGIES = ("ddp", "fsdp")
#: the storage dtype of the random weights (the three recipes train in bf16: mixed_precision "bf16")
WEIGHT_DTYPE = torch.bfloat16

#: peak dense bf16 tensor-core TFLOP/s by device name (torch.cuda.get_device_name), the most specific name first:
#: NVIDIA's H100 and H200 Tensor Core GPU datasheets give BF16 with 2:4 sparsity (H100 SXM and H200 SXM 1,979,
#: H100 PCIe 1,513, H100 NVL and H200 NVL 1,671); the dense peak is half of that. A100: 312 (A100 datasheet, dense).
PEAK_BF16_TFLOPS = (
    ("H100 NVL", 835.5),
    ("H100 PCIe", 756.5),
    ("H100", 989.4),  # SXM5 ("NVIDIA H100 80GB HBM3")
    ("H200 NVL", 835.5),
    ("H200", 989.4),  # SXM ("NVIDIA H200")
    ("A100", 312.0),
)
PEAK_SOURCE = "NVIDIA H100 / H200 / A100 Tensor Core GPU datasheets, BF16 dense (the sparse figure / 2)"

#: the --config.* fields every case sets: no reward model, no tracker, no checkpoint, one epoch, no progress bars
COMMON = (
    "--config.num_epochs=1",
    "--config.save_freq=0",
    "--config.reward.fns={'redness': 1.0}",
    "--config.logging.tracker=none",
    "--config.logging.progress=False",
    "--config.logging.image_freq=0",
    "--config.sample.num_batches_per_epoch=1",
    "--config.sample.batch_size=2",
    "--config.sample.group_size=2",
    "--config.train.gradient_accumulation_steps=1",
)
#: --tiny: a couple of steps at 32 px (videos: 5 frames), 16 text tokens
TINY_SETTINGS = (
    "--config.sample.resolution=32",
    "--config.sample.num_steps=2",
    "--config.sample.max_sequence_length=16",
)


@dataclasses.dataclass(frozen=True)
class Case:
    configs: str  # directory under config/model_configs/
    recipe: str  # config file (under config/) and experiment
    settings: tuple[str, ...]  # the case's own --config.* fields (beside COMMON)
    tiny: tuple[str, ...] = ()  # and with --tiny (beside TINY_SETTINGS)


CASES = {
    "flux": Case("flux1-dev", "flux.py:pickscore", ("--config.train.batch_size=2",)),
    "sd3": Case(
        "sd3.5-medium",
        "sd3.py:pickscore",
        (
            "--config.train.use_lora=False",
            "--config.train.ema=False",
            "--config.train.beta=0.0",
            "--config.train.batch_size=1",
        ),
    ),
    "wan": Case(
        "wan2.1-t2v-1.3b",
        "wan.py:t2v",
        ("--config.train.batch_size=2", "--config.sample.num_steps=10"),
        ("--config.sample.num_frames=5",),
    ),
}

_CLIP_TINY = dict(hidden_size=32, intermediate_size=64, num_attention_heads=4, projection_dim=32)
_VAE_TINY = dict(block_out_channels=[8, 8, 8, 8], norm_num_groups=8, layers_per_block=1)
#: --tiny: each component's depth and width cut (the shipped config otherwise); the cross-component widths agree
#: (FLUX: joint_attention_dim = T5 d_model, pooled = CLIP width; SD3: T5 d_model ≥ the two CLIP widths together)
TINY_CUTS = {
    "flux1-dev": {
        "transformer": dict(
            num_layers=1,
            num_single_layers=1,
            attention_head_dim=8,
            num_attention_heads=2,
            joint_attention_dim=32,
            pooled_projection_dim=32,
            axes_dims_rope=[2, 2, 4],
        ),
        "text_encoder": _CLIP_TINY,
        "text_encoder_2": dict(d_model=32, d_kv=8, d_ff=64, num_heads=4),
        "vae": _VAE_TINY,
    },
    "sd3.5-medium": {
        "transformer": dict(
            num_layers=1,
            dual_attention_layers=[0],
            attention_head_dim=8,
            num_attention_heads=2,
            caption_projection_dim=16,
            joint_attention_dim=64,
            pooled_projection_dim=64,
        ),
        "text_encoder": _CLIP_TINY,
        "text_encoder_2": _CLIP_TINY,
        "text_encoder_3": dict(d_model=64, d_kv=8, d_ff=64, num_heads=4),
        "vae": _VAE_TINY,
    },
    "wan2.1-t2v-1.3b": {
        "transformer": dict(num_layers=1, num_attention_heads=2, attention_head_dim=8, ffn_dim=32, text_dim=32),
        "text_encoder": dict(d_model=32, d_kv=8, d_ff=64, num_heads=4),
        "vae": dict(base_dim=4, num_res_blocks=1),
    },
}
#: the text encoders' depth, both modes (config key per class family): one layer
ENCODER_DEPTH_KEYS = ("num_hidden_layers", "num_layers")
WEIGHTLESS = ("scheduler", "tokenizer")


# ------------------------------------------------------------------------------------------------ the models
def model_index(configs: str) -> dict:
    return json.loads((SHIPPED / configs / "model_index.json").read_text())


def component_configs(configs: str, tiny: bool) -> dict[str, dict]:
    """Component name -> its config dict: the shipped one, the text encoders cut to one layer, and with ``tiny``
    every component cut (``TINY_CUTS``)."""
    out = {}
    for name, value in model_index(configs).items():
        if not (isinstance(value, list) and len(value) == 2 and value[0]) or name.startswith(WEIGHTLESS):
            continue
        cfg = json.loads((SHIPPED / configs / name / "config.json").read_text())
        if name.startswith("text_encoder"):
            cfg.update({k: 1 for k in ENCODER_DEPTH_KEYS if k in cfg})
        if tiny:
            cfg.update(TINY_CUTS[configs].get(name, {}))
        out[name] = cfg
    return out


def write_configs(configs: str, tiny: bool, directory: Path) -> Path:
    """The pipeline directory the planner reads: model_index.json and each component's (cut) config, no weights."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model_index.json").write_text(json.dumps(model_index(configs), indent=2))
    for name, cfg in component_configs(configs, tiny).items():
        (directory / name).mkdir(exist_ok=True)
        (directory / name / "config.json").write_text(json.dumps(cfg, indent=2))
    return directory


def materialise(module: torch.nn.Module, device, generator: torch.Generator) -> torch.nn.Module:
    """A module built with its parameters on meta: parameters in WEIGHT_DTYPE, moved to ``device`` uninitialised
    (``to_empty``), then drawn there (weights N(0, 1/fan_in), biases 0, norm scales 1); the buffers its constructor
    computed are copied back, and transformers' tied weights tied again (on meta they are built apart)."""
    buffers = {n: b.detach().clone() for n, b in module.named_buffers()}
    for p in module.parameters():
        if p.is_floating_point():
            p.data = p.data.to(WEIGHT_DTYPE)  # on meta: no storage
    module.to_empty(device=device)
    if hasattr(module, "tie_weights"):  # transformers' tied tables (T5's shared = embed_tokens): built apart on meta
        module.tie_weights()
    with torch.no_grad():
        for n, b in buffers.items():
            module.get_buffer(n).copy_(b)
        for n, p in module.named_parameters():
            if n.endswith("bias"):
                p.zero_()
            elif p.dim() < 2:
                p.fill_(1.0)
            else:  # fan_in = the elements of one output row (linear: in; conv: in·k…; embedding: its width)
                p.normal_(0.0, p[0].numel() ** -0.5, generator=generator)
    return module.eval()


def build_module(library: str, class_name: str, cfg: dict, device, generator) -> torch.nn.Module:
    from accelerate import init_empty_weights

    cls = getattr(__import__(library), class_name)
    with init_empty_weights(include_buffers=False):
        if library == "diffusers":
            module = cls.from_config(cfg)
        else:
            module = cls._from_config(cls.config_class.from_dict(cfg))
    return materialise(module, device, generator)


def tokenizer_for(class_name: str, encoder: torch.nn.Module | None = None):
    """The character-level tokenizer of ``class_name``'s kind (CLIP's length: its encoder's positions)."""
    from ddpo_grpo.tiny.common import build_t5_tokenizer, build_tokenizer

    if not class_name.startswith("CLIP"):
        return build_t5_tokenizer()
    tokenizer = build_tokenizer()
    if encoder is not None:
        tokenizer.model_max_length = encoder.config.max_position_embeddings
    return tokenizer


def random_pipeline(configs: str, tiny: bool):
    """The diffusers pipeline of ``configs`` with random weights on the run's device (module docstring)."""
    import diffusers
    from accelerate import PartialState

    device = PartialState().device  # the Trainer's accelerator set it up (its device, e.g. cuda:LOCAL_RANK)
    generator = torch.Generator(device).manual_seed(0)
    index, cfgs = model_index(configs), component_configs(configs, tiny)
    parts = {k: v for k, v in index.items() if not k.startswith("_") and not isinstance(v, list)}  # boundary_ratio…
    parts.update({k: None for k, v in index.items() if isinstance(v, list) and v[0] is None})
    for name, cfg in cfgs.items():
        library, class_name = index[name]
        if name.startswith("text_encoder"):  # the special token ids of the tokenizer it is paired with
            tokenizer = tokenizer_for(index[name.replace("text_encoder", "tokenizer")][1])
            ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
            ids["pad_token_id"] = tokenizer.pad_token_id
            cfg = {**cfg, **{k: v for k, v in ids.items() if k in cfg and v is not None}}
        parts[name] = build_module(library, class_name, cfg, device, generator)
    for name, value in index.items():
        if name.startswith("tokenizer") and value[0] is not None:
            parts[name] = tokenizer_for(value[1], parts.get(name.replace("tokenizer", "text_encoder")))
    scheduler = getattr(diffusers, index["scheduler"][1])
    parts["scheduler"] = scheduler.from_config(scheduler.load_config(SHIPPED / configs / "scheduler"))
    return getattr(diffusers, index["_class_name"])(**parts)


# the factories pretrained.model names ("experiments/gpu_check.py:<name>"): ddpo_grpo.policies calls them
def flux():
    return random_pipeline("flux1-dev", tiny=False)


def sd3():
    return random_pipeline("sd3.5-medium", tiny=False)


def wan():
    return random_pipeline("wan2.1-t2v-1.3b", tiny=False)


def flux_tiny():
    return random_pipeline("flux1-dev", tiny=True)


def sd3_tiny():
    return random_pipeline("sd3.5-medium", tiny=True)


def wan_tiny():
    return random_pipeline("wan2.1-t2v-1.3b", tiny=True)


# ------------------------------------------------------------------------------------------------ the runs
def case_settings(name: str, tiny: bool, cudnn_attention: bool = False) -> tuple:
    """The --config.* fields a case sets on its recipe (COMMON, the case's, --tiny's, --cudnn-attention's)."""
    case = CASES[name]
    tiny_fields = (TINY_SETTINGS + case.tiny) if tiny else ()
    return COMMON + case.settings + tiny_fields + (("--config.cudnn_attention=True",) if cudnn_attention else ())


def run_config(name: str, strategy: str, tiny: bool, logdir: Path, cudnn_attention: bool = False):
    """The case's config through scripts/train.py's machinery: the recipe, then the --config.* fields."""
    from ddpo_grpo.cli import load_config

    recipe = f"{ROOT / 'config' / CASES[name].recipe}"
    argv = ["gpu_check", f"--config={recipe}", *case_settings(name, tiny, cudnn_attention)]
    argv += [
        f"--config.pretrained.model={Path(__file__).resolve()}:{name}{'_tiny' if tiny else ''}",
        f"--config.distributed.strategy={strategy}",
        f"--config.logdir={logdir}",
        f"--config.run_name={name}_{strategy}",
    ]
    return load_config(argv, recipe)


def load_benchmark():
    """scripts/benchmark.py as a module (scripts/ is not a package): bench_rollout, bench_train."""
    spec = importlib.util.spec_from_file_location("ddpo_grpo_benchmark", ROOT / "scripts" / "benchmark.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class PeakMemory:
    """The peak memory of a phase above what was in use before the case (module docstring: CUDA or resident set)."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == "cuda"
        self.device = device
        self.how = (
            "torch.cuda.max_memory_allocated − memory_allocated before the build"
            if self.cuda
            else "resident set: VmHWM after − VmRSS before the build (/proc/self/status)"
        )
        self.base = torch.cuda.memory_allocated(device) if self.cuda else _status("VmRSS")

    def start(self) -> None:
        """Forget the peaks so far (call after the build: the epoch's peak, the weights resident)."""
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS

    def peak(self) -> int:
        return (torch.cuda.max_memory_allocated(self.device) if self.cuda else _status("VmHWM")) - self.base


def _status(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def peak_tflops(device, given: float) -> tuple[float | None, str]:
    """(peak dense bf16 TFLOP/s, where it comes from): --peak-tflops, else PEAK_BF16_TFLOPS by device name."""
    if given > 0:
        return given, "--peak-tflops"
    if torch.device(device).type != "cuda":
        return None, "no table entry for a CPU (give --peak-tflops)"
    name = torch.cuda.get_device_name(device)
    for key, value in PEAK_BF16_TFLOPS:
        if key in name:
            return value, f"{PEAK_SOURCE}: {key}"
    return None, f"{name!r} not in PEAK_BF16_TFLOPS (give --peak-tflops)"


class FlopCount(TorchDispatchMode):
    """The FLOPs of every operator run under it that torch has a formula for (``torch.utils.flop_counter``'s
    registry: matrix products, convolutions, attention, forward and backward), summed; ``total`` after the block.

    ``FlopCounterMode`` sums the same formulas but also attributes them to modules: its tracker registers gradient
    hooks on every module's inputs and outputs, and under non-reentrant gradient checkpointing, with those on the
    recomputed blocks, the pass peaked above the same pass without checkpointing, and higher with every further
    backward pass (measured: module docstring)."""

    def __init__(self):
        super().__init__()
        from torch.utils.flop_counter import flop_registry

        self.formulas = flop_registry
        self.total = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = self.formulas.get(func._overloadpacket)
        if formula is not None:
            self.total += formula(*args, **kwargs, out_val=out)
        return out


def training_pass(trainer, device) -> dict:
    """FLOPs of one update_phase over a fresh epoch's samples (``FlopCount``), and the time of the faster of two
    more passes over the same samples (synchronised, not counted)."""
    ep, timing = trainer.sample_phase(1)
    advantages, _ = trainer.advantage_phase(ep, trainer.reward_phase(ep, timing))
    with FlopCount() as counter:
        trainer.update_phase(ep, advantages)
    times = []
    for _ in range(2):
        synchronize(device)
        start = time.perf_counter()
        trainer.update_phase(ep, advantages)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return {"flops": counter.total, "seconds": sorted(times)[0], "samples": len(ep.rollout)}


def check(name: str, strategy: str, args, bench, log, plans: dict, partial: dict) -> dict:
    """One family under one strategy: the trainer, its epoch, the measurements (module docstring). ``plans``: the
    planner's Plan per family, made once (it holds both strategies' estimates). ``partial`` receives each figure as
    soon as it is measured (a case that fails later still reports its epoch's peak memory, say)."""
    from ddpo_grpo import console, planner, wiring
    from ddpo_grpo.planner.estimate import GIB
    from ddpo_grpo.trainer import Trainer

    started = time.perf_counter()
    case = CASES[name]
    cfg = run_config(name, strategy, args.tiny, args.workdir / "runs", args.cudnn_attention)
    configs = write_configs(case.configs, args.tiny, args.workdir / "configs" / f"{name}{'_tiny' if args.tiny else ''}")
    acc = wiring.accelerator(cfg)  # the run's Accelerator, as Trainer(cfg) makes it (the first: the process group)
    device = acc.device
    processes = acc.num_processes
    on_cuda = torch.device(device).type == "cuda"
    card = torch.cuda.get_device_properties(device).total_memory / GIB if on_cuda else 0
    if name not in plans:
        plans[name] = planner.plan(cfg, processes, card, model=str(configs), accelerator=on_cuda)
    plan = plans[name].estimate(strategy)
    partial["planner_bytes"] = plan.peak
    memory = PeakMemory(device)
    with contextlib.redirect_stdout(log):
        trainer = Trainer(cfg, accelerator=acc)
        build_s = time.perf_counter() - started
        memory.start()
        metrics = trainer.run_epoch(0, console.Clock(1))
        synchronize(device)
    peak = memory.peak()
    partial.update(peak_memory_bytes=peak, peak_over_planner=peak / plan.peak)
    bench_args = argparse.Namespace(repeats=args.repeats, min_unit=0.0)
    with contextlib.redirect_stdout(log):
        rollout = bench.bench_rollout(trainer, bench_args)
        partial["rollout_over_pipeline"] = rollout["ratio"]
        train = bench.bench_train(trainer, bench_args)
        partial["train_over_bare"] = train["ratio"]
        synchronize(device)
        passed = training_pass(trainer, device)
    peak_flops, _ = peak_tflops(device, args.peak_tflops)
    achieved = passed["flops"] / passed["seconds"]
    s = cfg.sample
    result = {
        "family": name,
        "strategy": strategy,
        "model_configs": f"config/model_configs/{case.configs}",
        "recipe": f"config/{case.recipe}",
        "settings": list(case_settings(name, args.tiny, args.cudnn_attention)),
        "resolution": s.resolution,
        "num_frames": s.num_frames,
        "num_steps": s.num_steps,
        "use_lora": bool(cfg.train.use_lora),
        "denoiser_params": sum(p.numel() for p in trainer.policy.denoiser.parameters()),
        "trainable_params": sum(p.numel() for p in trainer.params.values()),
        "sharded": bool(trainer.sharded),
        "wrapped": type(trainer.model).__name__,
        "build_s": build_s,
        "rollout_over_pipeline": rollout["ratio"],
        "rollout_s": rollout["ours"],
        "pipeline_s": rollout["baseline"],
        "train_over_bare": train["ratio"],
        "train_s": train["ours"],
        "bare_s": train["baseline"],
        "train_detail": train["detail"],
        "peak_memory_bytes": peak,
        "peak_memory_how": memory.how,
        "planner_bytes": plan.peak,
        "planner_parts_gib": {k: v / GIB for k, v in plan.parts.items()},
        "peak_over_planner": peak / plan.peak,
        "train_pass_flops": passed["flops"],
        "flops_include_recompute": bool(cfg.train.gradient_checkpointing),
        "train_pass_s": passed["seconds"],
        "train_pass_tflops_per_s": achieved / 1e12,
        "mfu": achieved / (peak_flops * 1e12) if peak_flops else None,
        "images_per_s": {
            "sampling": s.batch_size * processes / rollout["ours"],
            "training": passed["samples"] * processes / passed["seconds"],
            "first_epoch": trainer.totals["images_per_epoch"] / metrics["perf/epoch_s"],
        },
        "epoch_metrics": {k: metrics[k] for k in ("train/loss", "train/grad_norm", "reward/mean") if k in metrics},
    }
    close(trainer)
    del trainer
    gc.collect()  # (the pipeline's reference cycles)
    if on_cuda:
        torch.cuda.empty_cache()
    result["memory_before_build_bytes"] = memory.base  # CUDA: what earlier cases left allocated (0: all freed)
    result["seconds"] = time.perf_counter() - started
    return result


def close(trainer) -> None:
    """What Trainer.run closes at its end (run_epoch leaves them open), and accelerate's references to the model."""
    trainer.logger.close()
    if trainer.reward_pool is not None:
        trainer.reward_pool.shutdown()
    trainer.acc.free_memory()


def quiet_libraries() -> None:
    """diffusers' and transformers' loading bars and advice off (they would bury the log)."""
    import diffusers
    import transformers

    for library in (diffusers, transformers):
        library.utils.logging.set_verbosity_error()
        library.utils.logging.disable_progress_bar()


def environment(args) -> dict:
    """The date, card, versions and peak figure (before any case: a report whose cases all fail still has them)."""
    import accelerate
    import diffusers
    import peft
    import transformers

    cuda = torch.cuda.is_available() and os.environ.get("ACCELERATE_USE_CPU", "") not in ("1", "true", "True")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))) if cuda else torch.device("cpu")
    peak, source = peak_tflops(device, args.peak_tflops)
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "versions": {
            "torch": torch.__version__,
            "diffusers": diffusers.__version__,
            "transformers": transformers.__version__,
            "accelerate": accelerate.__version__,
            "peft": peft.__version__,
            "cuda": torch.version.cuda,
        },
        "processes": int(os.environ.get("WORLD_SIZE", "1")),
        "backend": None,  # set once the first trainer has made the process group
        "tiny": bool(args.tiny),
        "cudnn_attention": bool(args.cudnn_attention),
        "cuda_launch_blocking": os.environ.get("CUDA_LAUNCH_BLOCKING", "0"),
        "peak_bf16_tflops": peak,
        "peak_source": source,
        "flops_counted_by": "FlopCount (torch.utils.flop_counter's formulas) over one Trainer.update_phase "
        "(forward + backward as executed: matmuls, convolutions, attention)",
    }


def backend() -> str | None:
    dist = torch.distributed
    return dist.get_backend() if dist.is_available() and dist.is_initialized() else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for gpu_check.json and gpu_check.log")
    parser.add_argument(
        "--workdir", type=Path, default=None, help="folder for the runs and the planner's configs (default: in /tmp)"
    )
    parser.add_argument("--tiny", action="store_true", help="every component cut (TINY_CUTS), 32 px, 2 steps")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma list of {', '.join(CASES)}")
    parser.add_argument("--strategies", default=",".join(STRATEGIES), help="comma list of ddp, fsdp")
    parser.add_argument("--repeats", type=int, default=2, help="timed pairs per ratio (after one warm-up each)")
    parser.add_argument("--max-seconds", type=float, default=360.0, help="start no case after this many seconds")
    parser.add_argument("--peak-tflops", type=float, default=0.0, help="peak dense bf16 TFLOP/s (0: the table)")
    parser.add_argument(
        "--cudnn-attention", action="store_true", help="config.cudnn_attention=True (torch's cuDNN attention allowed)"
    )
    args = parser.parse_args(argv)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    bad = [c for c in cases if c not in CASES] + [s for s in strategies if s not in STRATEGIES]
    if bad:
        parser.error(f"unknown case or strategy {bad[0]!r}: cases {', '.join(CASES)}; strategies ddp, fsdp")
    args.out.mkdir(parents=True, exist_ok=True)
    launch = os.environ.get("TORCHELASTIC_RUN_ID", str(os.getpid()))  # one folder for every process of a launch
    args.workdir = args.workdir or Path(tempfile.gettempdir()) / f"gpu_check_{launch}"
    start = time.perf_counter()
    quiet_libraries()
    from ddpo_grpo.distributed import rank

    main_process = rank() == 0  # (accelerate's state is made by the first trainer: its Accelerator's settings)
    bench = load_benchmark()
    report = {**environment(args), "cases": [], "skipped": [], "failed": []}
    v = report["versions"]
    print(f"{report['device']}: " + ", ".join(f"{k} {v[k]}" for k in v), flush=True)
    plans = {}
    path = args.out / "gpu_check.json"
    with open(args.out / f"gpu_check{'' if main_process else rank()}.log", "a") as log:
        # every family under the first strategy before the second (if time runs short)
        for strategy, name in itertools.product(strategies, cases):
            elapsed = time.perf_counter() - start
            if elapsed > args.max_seconds:
                report["skipped"].append({"family": name, "strategy": strategy, "after_s": elapsed})
                continue
            partial = {}
            try:
                result = check(name, strategy, args, bench, log, plans, partial)
                report["backend"] = backend()
            except Exception:  # noqa: BLE001  (one case's failure, e.g. out of memory, must not lose the others)
                error = traceback.format_exc()
                failure = {"family": name, "strategy": strategy, "measured": partial, "error": error[-6000:]}
                report["failed"].append(failure)
                print(f"{name} {strategy} FAILED:\n{failure['error']}", flush=True)
                if main_process:  # before any clean-up: a device fault can make the clean-up raise too
                    path.write_text(json.dumps(report, indent=2, default=_jsonable))
                if not release_memory():
                    report["device_lost"] = "the device's context is broken (a kernel fault): no further case"
                    break
                continue
            report["cases"].append(result)
            report["total_s"] = time.perf_counter() - start
            if main_process:
                path.write_text(json.dumps(report, indent=2, default=_jsonable))
                print(_line(result), flush=True)
    report["total_s"] = time.perf_counter() - start
    if main_process:
        path.write_text(json.dumps(report, indent=2, default=_jsonable))
        print(f"{path}: {len(report['cases'])} case(s), {len(report['failed'])} failed, in {report['total_s']:.0f} s")
    return 1 if report["failed"] else 0


def release_memory() -> bool:
    """Free a failed case's memory; False when the device cannot be used again in this process (CUDA keeps an
    illegal memory access or a failed kernel launch for the context's lifetime, so every later call raises)."""
    gc.collect()
    if not torch.cuda.is_available():
        return True
    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    except RuntimeError:  # (torch.AcceleratorError is one)
        return False
    return True


def _jsonable(value):
    return value.item() if hasattr(value, "item") else str(value)


def _line(r: dict) -> str:
    mfu = f"{100 * r['mfu']:.1f} %" if r["mfu"] is not None else "n/a"
    return (
        f"{r['family']:>4} {r['strategy']:<4} rollout/pipeline {r['rollout_over_pipeline']:.3f}  "
        f"train/bare {r['train_over_bare']:.3f}  peak {r['peak_memory_bytes'] / 2**30:.2f} GiB / planner "
        f"{r['planner_bytes'] / 2**30:.2f} GiB = {r['peak_over_planner']:.2f}  MFU {mfu}  "
        f"{r['images_per_s']['sampling']:.2f} img/s sampling  ({r['seconds']:.0f} s)"
    )


if __name__ == "__main__":
    sys.exit(main())
