"""The update diagnostics (ddpo_grpo/update_diagnostics.py): the noise-scale estimator recovers a known B_noise,
minibatches keep groups whole, and the script measures a real run end to end (with the KL anchor's pull at a
checkpoint, where the policy has left the reference)."""

import json

import pytest
import torch

from ddpo_grpo.update_diagnostics import anchor_pull, group_minibatches, noise_scale
from tests.test_objectives import _tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("b_noise", [4.0, 400.0])
def test_noise_scale_recovers_a_known_noise_scale(b_noise):
    # per-sample gradients G + ε, ε ~ N(0, s² I) in d dims: tr Σ = d s², so B_noise = d s² / |G|²
    d, b, m = 200, 8, 400
    gen = torch.Generator().manual_seed(0)
    signal = torch.randn(d, generator=gen)
    s = (b_noise * float(signal.square().sum()) / d) ** 0.5
    grads = [signal + s * torch.randn(b, d, generator=gen).mean(0) for _ in range(m)]
    out = noise_scale(grads, batch_size=b, step_samples=64)
    assert out["b_noise"] == pytest.approx(b_noise, rel=0.15)
    assert abs(out["b_noise"] - b_noise) < 3 * out["b_noise_se"] + 0.05 * b_noise
    assert out["signal_fraction"] == pytest.approx(1 / (1 + b_noise / 64), rel=0.1)
    assert out["cosine"] == pytest.approx(1 / (1 + b_noise / b), rel=0.15)


def test_pure_noise_has_no_signal_and_too_few_minibatches_are_refused():
    gen = torch.Generator().manual_seed(1)
    grads = [torch.randn(500, generator=gen) for _ in range(60)]
    out = noise_scale(grads, batch_size=4, step_samples=16)
    assert abs(out["cosine"]) < 3 * out["cosine_se"]  # no common direction, within its interval
    assert out["signal_fraction"] < 0.2
    with pytest.raises(ValueError, match="at least 3"):
        noise_scale(grads[:2], batch_size=4, step_samples=16)


def test_anchor_pull_separates_the_two_terms():
    pol, kl = torch.tensor([1.0, 0.0]), torch.tensor([-0.5, 0.0])
    out = anchor_pull([pol + kl, pol + kl], [kl, kl])
    assert out["policy_grad_norm"] == pytest.approx(1.0)
    assert out["kl_grad_norm"] == pytest.approx(0.5)
    assert out["policy_kl_cosine"] == pytest.approx(-1.0)


def test_minibatches_keep_groups_whole():
    items = [(g, m) for g in range(5) for m in range(4)]
    batches = group_minibatches(items, 8, torch.Generator().manual_seed(0))
    assert len(batches) == 2  # 5 groups of 4 in minibatches of 2 groups: the fifth is left out
    for index in batches:
        groups = [items[i][0] for i in index.tolist()]
        assert len(set(groups)) == 2 and all(groups.count(g) == 4 for g in set(groups))
    with pytest.raises(ValueError, match="train.batch_size=6 must be a multiple of sample.group_size=4"):
        group_minibatches(items, 6, torch.Generator())


def test_the_script_measures_a_run_and_its_checkpoint(tmp_path, tiny_dirs):
    from ddpo_grpo.trainer import Trainer
    from scripts.diagnose_updates import main

    # groups of 2, minibatches of one group, one optimizer step per epoch of 8 samples: a small step lowers the loss
    sizes = {"sample.noise_level": 1.0, "sample.group_size": 2, "train.batch_size": 2, "train.beta": 0.5}
    config = _tiny_config(
        tmp_path,
        tiny_dirs["sd3"],
        "grpo",
        **sizes,
        **{"train.learning_rate": 1e-3, "train.gradient_accumulation_steps": 4},
    )
    run = Trainer(config).run().parent  # one epoch, its checkpoint saved
    out = tmp_path / "diag.json"
    before = sorted((p.name, p.stat().st_mtime_ns) for p in run.rglob("*"))
    assert main(["--checkpoint", str(run), "--epochs", "2", "--out", str(out)]) == 0
    assert sorted((p.name, p.stat().st_mtime_ns) for p in run.rglob("*")) == before  # the run is only read
    result = json.loads(out.read_text())
    assert result["noise"]["minibatches"] == 8  # 2 epochs of 8 samples in minibatches of one group of 2
    anchor = result["anchor"]
    assert anchor["kl_grad_norm"] > 0 and anchor["policy_grad_norm"] > 0  # the policy has left the reference
    step = result["step"]
    assert step["optimizer_steps"] == 1 and step["step_norm"] > 0
    assert step["in_sample_gain"] > 0  # the update lowered the loss it was taking the gradient of
