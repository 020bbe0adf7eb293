"""fp16 loss scaling (optim.OptimizerStep with a torch.amp.GradScaler; wiring.loss_scaling): an overflowing step
is skipped and halves the scale, the next step trains, the logged gradient norm is the unscaled one, the scale
grows after its interval and resumes with the run.

accelerate neither autocasts nor scales under ``mixed_precision="fp16"`` on CPU (its ``native_amp`` stays off, and
the tiny pipeline's fp16 weights then meet float32 inputs: the run fails at its first forward). Our
``wiring.loss_scaling`` turns accelerate's autocast on with float16 on CPU and gives it a GradScaler, so these
CPU processes run the fp16 path GPUs run: accelerate's ``backward`` scales the loss, our step does the rest.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tests.processes import spawn

# ---- one process: the algorithm ---------------------------------------------------------------------------------


def _stepper(model, growth_interval=2000):
    from ddpo_grpo.guard import FiniteGuard
    from ddpo_grpo.optim import OptimizerStep

    scaler = torch.amp.GradScaler("cpu", growth_interval=growth_interval)
    acc = SimpleNamespace(scaler=scaler, clip_grad_norm_=torch.nn.utils.clip_grad_norm_)
    t = SimpleNamespace(learning_rate=0.1, warmup_steps=0, max_grad_norm=1e9, grad_norm_ratio=0.0)
    params = dict(model.named_parameters())
    optimizer = torch.optim.SGD(params.values(), lr=0.1)
    return OptimizerStep(optimizer, params, acc, FiniteGuard(max_consecutive_skips=1), t), scaler


def _backward(model, scaler, x, overflow=False):
    loss = model(x).pow(2).mean()
    scaler.scale(loss * (float("inf") if overflow else 1.0)).backward()


def test_overflow_skips_halves_and_the_next_step_trains_with_the_unscaled_norm():
    torch.manual_seed(0)
    model, x = torch.nn.Linear(4, 3), torch.randn(5, 4)
    plain = torch.nn.Linear(4, 3)
    plain.load_state_dict(model.state_dict())
    plain(x).pow(2).mean().backward()
    true_norm = float(torch.nn.utils.get_total_norm([p.grad for p in plain.parameters()]))
    step, scaler = _stepper(model, growth_interval=2)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}

    _backward(model, scaler, x, overflow=True)
    assert not math.isfinite(step(0))  # skipped: no update, gradient dropped, the scale halved
    assert scaler.get_scale() == 2.0**15 and step.global_step == 0 and step.guard.consecutive == 0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())

    _backward(model, scaler, x)  # the old DDP path raised here: unscale_() twice without update()
    assert step(0) == pytest.approx(true_norm, rel=1e-6)  # unscaled (s = 2^15 is exact in float32)
    assert step.global_step == 1 and not torch.equal(before["weight"], model.weight.detach())
    assert step.metrics()["train/skipped_steps"] == 1 and step.metrics()["train/loss_scale"] == 2.0**15

    _backward(model, scaler, x)
    step(0)
    assert scaler.get_scale() == 2.0**16  # two applied steps in a row (growth_interval=2): doubled

    resumed, resumed_scaler = _stepper(torch.nn.Linear(4, 3))  # exact resume: the scale and its streak
    resumed.load_state_dict(json.loads(json.dumps(step.state_dict())))
    assert resumed_scaler.get_scale() == 2.0**16 and resumed_scaler.state_dict() == scaler.state_dict()


def test_overflow_at_a_scale_of_one_counts_toward_the_guard():
    from ddpo_grpo.guard import TrainingStopped

    model = torch.nn.Linear(4, 3)
    step, scaler = _stepper(model)
    scaler.load_state_dict({**scaler.state_dict(), "scale": 1.0})
    _backward(model, scaler, torch.randn(5, 4), overflow=True)
    with pytest.raises(TrainingStopped, match="1 optimizer steps in a row had a non-finite gradient"):
        step(0)


# ---- two processes, the trainer, DDP and FSDP -------------------------------------------------------------------


class _Recorder:
    """Around the trainer's OptimizerStep: forces an overflow on rank 1 at the first step; records every step."""

    def __init__(self, step, rank, strategy):
        self.step, self.rank, self.strategy, self.calls = step, rank, strategy, []

    def __getattr__(self, name):
        return getattr(self.step, name)

    def __call__(self, epoch):
        from ddpo_grpo.sharding import full, local

        params = list(self.step.params.values())
        if not self.calls and self.rank == 1 and self.strategy == "fsdp":  # one element of rank 1's shard only
            grad = next(local(p.grad) for p in params if local(p.grad).numel())
            grad.view(-1)[0] = float("inf")
        raw = float(torch.sqrt(sum(full(p.grad).double().pow(2).sum() for p in params)))  # the scaled gradient
        scale = self.step.scaler.get_scale()
        norm = self.step(epoch)
        self.calls.append(
            {"scale": scale, "raw": raw, "norm": norm, "after": self.step.scaler.get_scale(), "n": self.global_step}
        )
        return norm


def _fp16_runs(rank: int, root: str) -> None:
    from ddpo_grpo.trainer import Trainer
    from tests.test_scale import _config

    for strategy in ("ddp", "fsdp"):
        fields = dict(num_epochs=1, sample__num_batches_per_epoch=1, mixed_precision="fp16")
        trainer = Trainer(_config("", Path(root), strategy, distributed__strategy=strategy, **fields))
        trainer.step = recorder = _Recorder(trainer.step, rank, strategy)
        if rank == 1 and strategy == "ddp":  # an overflow in rank 1's first backward, before DDP's all-reduce
            backward, calls = trainer.acc.backward, []

            def overflowing(loss, backward=backward, calls=calls, **kw):
                calls.append(1)
                return backward(loss * float("inf") if len(calls) == 1 else loss, **kw)

            trainer.acc.backward = overflowing
        trainer.run()
        Path(root, f"{strategy}_rank{rank}.json").write_text(json.dumps(recorder.calls))


@pytest.mark.slow  # two processes, two runs each (≈ 2 min on the loaded 2-core test machine)
def test_fp16_overflow_under_ddp_and_fsdp_on_two_processes(tmp_path):
    spawn(_fp16_runs, str(tmp_path))
    for strategy in ("ddp", "fsdp"):
        calls = [json.loads((tmp_path / f"{strategy}_rank{r}.json").read_text()) for r in (0, 1)]
        assert calls[0] == calls[1], strategy  # every process decided the same, step by step
        first, second = calls[0][:2]
        assert not math.isfinite(first["norm"]) and first["n"] == 0  # skipped on both processes
        assert (first["scale"], first["after"]) == (2.0**16, 2.0**15)  # the scale halved
        assert math.isfinite(second["norm"]) and second["n"] == 1 and second["after"] == 2.0**15  # it trains
        assert second["norm"] == pytest.approx(second["raw"] / 2.0**15, rel=1e-5)  # unscaled before the norm
        row = json.loads((tmp_path / strategy / "metrics.jsonl").read_text().splitlines()[0])
        applied = [c["norm"] for c in calls[0] if math.isfinite(c["norm"])]
        assert row["train/grad_norm"] == pytest.approx(sum(applied) / len(applied), rel=1e-6)  # logged unscaled
        assert row["train/skipped_steps"] == 1 and row["train/loss_scale"] == 2.0**15
        state = json.loads((tmp_path / strategy / "checkpoints" / "epoch_000000" / "state.json").read_text())
        assert state["loss_scale"]["scale"] == 2.0**15 and state["loss_scale"]["_growth_tracker"] == len(applied)
