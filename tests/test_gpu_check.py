"""experiments/gpu_check.py at tiny size on CPU (the GPU check of issue 36, kept from rotting): the script under
torchrun with one process (gloo), its JSON's keys and finite, positive ratios; the real-size models it builds are
the shipped configs (text encoders at one layer); and the benchmark functions it reuses run under the trainer's
bf16 autocast."""

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import REPO, load_script

SCRIPT = REPO / "experiments" / "gpu_check.py"
CASE_KEYS = {
    "family",
    "strategy",
    "model_configs",
    "recipe",
    "settings",
    "use_lora",
    "denoiser_params",
    "trainable_params",
    "sharded",
    "wrapped",
    "rollout_over_pipeline",
    "rollout_s",
    "pipeline_s",
    "train_over_bare",
    "train_s",
    "bare_s",
    "peak_memory_bytes",
    "peak_memory_how",
    "planner_bytes",
    "planner_parts_gib",
    "peak_over_planner",
    "train_pass_flops",
    "train_pass_s",
    "train_pass_tflops_per_s",
    "mfu",
    "images_per_s",
    "epoch_metrics",
    "seconds",
}
RATIOS = ("rollout_over_pipeline", "train_over_bare", "peak_over_planner", "mfu", "train_pass_tflops_per_s")


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


def _run(out, *extra: str) -> dict:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", str(SCRIPT)]
    cmd += ["--tiny", "--out", str(out / "out"), "--workdir", str(out / "work"), "--peak-tflops", "1", "--repeats", "1"]
    cmd += extra
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "ACCELERATE_USE_CPU": "1",  # the process group with gloo, as NCCL's on a GPU
        "MALLOC_MMAP_THRESHOLD_": "65536",  # freed tensors leave the resident set (the CPU peak memory)
        "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=900)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    # two files (the device tool brings back at most 8 from $OUT); the runs went to --workdir
    assert sorted(p.name for p in (out / "out").iterdir()) == ["gpu_check.json", "gpu_check.log"]
    return json.loads((out / "out" / "gpu_check.json").read_text())


def _check_report(report: dict, strategies: set) -> None:
    assert report["processes"] == 1 and report["backend"] == "gloo" and report["tiny"] is True
    assert report["device"] == "cpu" and report["peak_bf16_tflops"] == 1.0
    assert not report["skipped"] and not report["failed"], report["failed"]
    assert {"torch", "diffusers", "transformers", "accelerate", "peft"} <= set(report["versions"])
    cases = report["cases"]
    assert {(c["family"], c["strategy"]) for c in cases} == {(f, s) for f in ("flux", "sd3", "wan") for s in strategies}
    for c in cases:
        assert CASE_KEYS <= set(c), CASE_KEYS - set(c)
        for key in RATIOS:
            assert math.isfinite(c[key]) and c[key] > 0, (c["family"], key, c[key])
        assert all(math.isfinite(v) and v > 0 for v in c["images_per_s"].values()), c["images_per_s"]
        assert c["train_pass_flops"] > 0 and c["peak_memory_bytes"] > 0 and c["planner_bytes"] > 0
        assert c["use_lora"] is (c["family"] != "sd3")  # SD3.5-Medium: a full fine-tune
        trainable_all = c["trainable_params"] == c["denoiser_params"]
        assert trainable_all is (c["family"] == "sd3")
        assert c["sharded"] is False  # one process: nothing to shard
        assert all(math.isfinite(v) for v in c["epoch_metrics"].values()), c["epoch_metrics"]


def test_tiny_check_runs_every_family_under_torchrun(tmp_path):
    """The three families (fsdp: with one process the model stays whole, which the JSON records)."""
    _check_report(_run(tmp_path, "--strategies", "fsdp"), {"fsdp"})


@pytest.mark.slow  # the whole command at tiny size (both strategies): what a GPU runs, on CPU
def test_tiny_check_runs_both_strategies(tmp_path):
    _check_report(_run(tmp_path), {"ddp", "fsdp"})


def test_real_models_are_the_shipped_configs_with_one_layer_text_encoders(tmp_path):
    """The configs the check builds and the planner reads: denoisers and VAEs as shipped (FLUX.1-dev's transformer
    the hub's 11.9014 B elements), each text encoder at its real width with one layer."""
    from ddpo_grpo.planner import meta

    g = gpu_check()
    for case in g.CASES.values():
        shipped = g.SHIPPED / case.configs
        configs = g.component_configs(case.configs, tiny=False)
        for name, cfg in configs.items():
            original = json.loads((shipped / name / "config.json").read_text())
            changed = {k for k in cfg if cfg[k] != original.get(k)}
            if name.startswith("text_encoder"):
                assert changed == {k for k in ("num_hidden_layers", "num_layers") if k in original}, (name, changed)
                assert all(cfg[k] == 1 for k in changed)
            else:
                assert changed == set(), (case.configs, name, changed)
    directory = g.write_configs("flux1-dev", False, tmp_path / "flux")
    transformer = meta.build(directory, "transformer", "diffusers", "FluxTransformer2DModel")
    assert meta.numel(transformer) == 11_901_408_320
    t5 = meta.build(directory, "text_encoder_2", "transformers", "T5EncoderModel")
    assert t5.config.d_model == 4096 and len(t5.encoder.block) == 1


def test_random_weights_are_drawn_on_the_device_and_buffers_kept():
    """materialise: parameters in bf16 with the fan-in scale, biases 0, norm scales 1; computed buffers unchanged."""
    from transformers import CLIPTextConfig, CLIPTextModel

    g = gpu_check()
    config = CLIPTextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4)
    reference = CLIPTextModel(config)
    from accelerate import init_empty_weights

    with init_empty_weights(include_buffers=False):
        model = CLIPTextModel(config)
    g.materialise(model, torch.device("cpu"), torch.Generator().manual_seed(0))
    assert all(p.dtype == torch.bfloat16 and p.device.type == "cpu" for p in model.parameters())
    ids = next(b for n, b in model.named_buffers() if n.endswith("position_ids"))
    assert torch.equal(ids, next(b for n, b in reference.named_buffers() if n.endswith("position_ids")))
    modules = dict(model.named_modules())
    fc1 = next(m for n, m in modules.items() if n.endswith("layers.0.mlp.fc1"))
    assert torch.all(fc1.bias == 0) and abs(float(fc1.weight.float().std()) - 64**-0.5) < 0.1 * 64**-0.5
    assert torch.all(next(m for n, m in modules.items() if n.endswith("final_layer_norm")).weight == 1)


def test_tied_tables_stay_tied():
    """T5's shared table and its encoder's embed_tokens are one parameter after the build, as in a loaded model (a
    second 4096-wide copy would be 0.13 B elements for T5-XXL's vocabulary, 1.05 B for UMT5's)."""
    from transformers import T5Config, T5EncoderModel

    g = gpu_check()
    cfg = dict(T5Config(vocab_size=100, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=4).to_dict())
    model = g.build_module("transformers", "T5EncoderModel", cfg, torch.device("cpu"), torch.Generator())
    assert model.shared.weight is model.encoder.embed_tokens.weight
    assert sum(p.numel() for p in model.parameters()) == sum(
        p.numel() for p in T5EncoderModel(T5Config(**cfg)).parameters()
    )


@pytest.fixture
def fresh_accelerate_state():
    """accelerate keeps one process-wide state whose ``mixed_precision`` is fixed by the first Accelerator: a bf16
    run after a float32 one in the same process is refused. Forget it before (and after) the test."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_benchmark_rollout_runs_under_the_trainers_bf16_autocast(tmp_path, fresh_accelerate_state):
    """scripts/benchmark.py's bench_rollout on a bf16 run (frozen VAE and encoders in bf16): before the autocast
    both sides fed float32 latents to the bf16 VAE and the plain pipeline call failed."""
    benchmark = load_script("benchmark")
    args = argparse.Namespace(num_steps=2, batch_size=4, repeats=1, min_unit=0.0)
    cfg = benchmark.make_config("sd3", args, 32, str(tmp_path))
    cfg.mixed_precision = "bf16"
    result = benchmark.bench_rollout(benchmark.build_trainer(cfg), args)
    assert math.isfinite(result["ratio"]) and result["ratio"] > 0


def test_flop_count_sums_the_same_formulas_as_torchs_counter():
    """FlopCount (the check's counter) against torch.utils.flop_counter.FlopCounterMode: one forward + backward of
    linear layers and a convolution gives the same total, and the total is the known formula."""
    from torch.utils.flop_counter import FlopCounterMode

    g = gpu_check()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 16))
    x = torch.randn(4, 3, 8, 8)

    def step():
        model(x).square().sum().backward()

    with g.FlopCount() as lean:
        step()
    with FlopCounterMode(display=False) as reference:
        step()
    linear = 2 * 4 * 288 * 16  # forward; the backward: the input's and the weight's gradients, the same each
    assert lean.total == reference.get_total_flops() > 3 * linear


PEAK_PROBE = """
import sys, torch
from ddpo_grpo.sharding import checkpoint_blocks
sys.path.insert(0, sys.argv[2])
import gpu_check
from torch.utils.flop_counter import FlopCounterMode

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(256, 1024), torch.nn.Linear(1024, 256)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(x)))

torch.manual_seed(0)
model = torch.nn.Sequential(*[Block() for _ in range(8)])
if sys.argv[1] != "stored":
    checkpoint_blocks(model, ["Block"])
x = torch.randn(4096, 256)
counter = {"lean": gpu_check.FlopCount, "torch": lambda: FlopCounterMode(display=False)}.get(sys.argv[1], None)

def rss(field):
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith(field)) * 1024

before = rss("VmRSS")
with counter() if counter else torch.autograd.set_grad_enabled(True):
    model(x).square().mean().backward()
print(rss("VmHWM") - before)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="the resident set is read from /proc")
def test_flop_count_keeps_gradient_checkpointings_saving(tmp_path):
    """The counted pass must fit where the training pass fits: under FlopCount a checkpointed forward + backward
    peaks where it peaks uncounted, far below the same pass storing every block's activations (8 blocks of
    4096 × 1024 float32 hidden states, 16 MiB each). FlopCounterMode's module tracker keeps the recomputed
    blocks' activations (measured here, not asserted: a later torch may change it); on an H200 that ran Wan out of
    memory (docs/scaling.md)."""
    script = tmp_path / "probe.py"
    script.write_text(PEAK_PROBE)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536", "PYTHONPATH": str(REPO)}

    modes = ("plain", "lean", "stored")  # three processes at once (each its own resident set)
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), mode, str(SCRIPT.parent)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for mode in modes
    ]
    peaks = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        peaks.append(int(out.split()[-1]) / 2**20)
    plain, lean, stored = peaks
    assert stored > plain + 100, (stored, plain)  # the probe can tell checkpointing apart
    assert lean < plain + 25, (lean, plain)  # FlopCounterMode: about +75


def test_a_failed_case_keeps_its_figures_and_a_lost_device_ends_the_run(tmp_path, monkeypatch):
    """What the H100 did on 2026-11-28: a kernel fault in FLUX's backward, after which every CUDA call raises. The
    JSON keeps the failure with what the case had measured, and no later case is started on the broken context."""
    g = gpu_check()
    started = []

    def faulting(name, strategy, args, bench, log, plans, partial):
        started.append(name)
        partial["peak_memory_bytes"] = 123
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(g, "check", faulting)
    monkeypatch.setattr(g, "load_benchmark", lambda: None)
    monkeypatch.setattr(g, "release_memory", lambda: False)  # as torch.cuda.empty_cache raising on that context
    argv = ["--out", str(tmp_path / "out"), "--workdir", str(tmp_path / "work"), "--tiny", "--peak-tflops", "1"]
    assert g.main(argv) == 1
    report = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert started == ["flux"] and not report["cases"]
    (failure,) = report["failed"]
    assert failure["family"] == "flux" and failure["measured"] == {"peak_memory_bytes": 123}
    assert "illegal memory access" in failure["error"] and "device_lost" in report
