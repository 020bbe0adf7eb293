"""train.objective: the forward-process objectives (awm, nft, rwr) against their derivations, and in the trainer.

Unit level: each loss's gradient at the sampling policy equals its closed form (AWM and NFT: A times the
gradient of the matching loss; RWR: the weighted matching loss). Trainer level, on the tiny SD3 pipeline
with deterministic rollouts (noise level 0, which only these objectives allow): one training pass raises
the matching log-likelihood of high-advantage samples relative to low-advantage ones,
Σ_i A_i·(ℓ_new − ℓ_old) > 0 at the same noise, the first-order guarantee of a policy-improvement step.
Zero-advantage samples are skipped without changing the gradient.
"""

import json
from pathlib import Path

import pytest
import torch

from ddpo_grpo.losses import awm_surrogate, nft_loss, rwr_loss
from tests.conftest import sampled

pytestmark = pytest.mark.usefixtures("one_thread")


def _tensors(b=4, shape=(2, 3, 3)):
    gen = torch.Generator().manual_seed(0)
    pred = torch.randn(b, *shape, generator=gen, requires_grad=True)
    target = torch.randn(b, *shape, generator=gen)
    adv = torch.tensor([1.5, -0.5, 0.0, 3.0])
    return pred, target, adv


def test_awm_gradient_at_the_sampling_policy_is_advantage_times_matching_gradient():
    pred, target, adv = _tensors()
    loss, info = awm_surrogate(pred, target, adv, old_pred=pred.detach(), dims=18, clip_range=0.2)
    loss.sum().backward()
    d = pred[0].numel()
    expected = 2 * adv.view(-1, 1, 1, 1) * (pred.detach() - target) / d  # ∇ of −A·ℓ, ℓ = −mean (f − y)²
    torch.testing.assert_close(pred.grad, expected)
    assert torch.equal(info["ratio"], torch.ones(4))


def test_nft_at_the_sampling_policy_pushes_by_the_clipped_advantage():
    """At f = v_old both implicit policies equal v_old, so the gradient is (2r − 1)·A_max·∇ℓ = clip(A)·∇ℓ."""
    pred, target, adv = _tensors()
    scale = torch.tensor([0.2, 0.5, 0.7, 0.9])
    loss, info = nft_loss(pred, target, adv, old_pred=pred.detach(), scale=scale, options={"beta": 1.0, "adv_max": 2.0})
    loss.sum().backward()
    s = scale.view(-1, 1, 1, 1)
    err = s * (pred.detach() - target)
    weight = err.reshape(4, -1).abs().mean(dim=1).view(-1, 1, 1, 1)
    grad_l = 2 * s * err / weight / pred[0].numel()  # ∇_f mean (s(f − y))² / sg(mean |s(f − y)|)
    expected = adv.clamp(-2, 2).view(-1, 1, 1, 1) * grad_l
    torch.testing.assert_close(pred.grad, expected)
    assert info["r"].tolist() == [0.875, 0.375, 0.5, 1.0]
    assert loss[2] > 0  # a zero advantage still regularises towards v_old away from this point (nonzero loss)


def test_rwr_is_the_weighted_matching_loss():
    pred, target, adv = _tensors()
    weights = torch.tensor([0.5, 1.0, 1.5, 1.0])
    loss, info = rwr_loss(pred, target, adv, options={"weights": weights})
    mse = (pred.detach() - target).square().reshape(4, -1).mean(dim=1)
    torch.testing.assert_close(loss.detach(), weights * mse)
    torch.testing.assert_close(info["matching_loss"], mse)


def _tiny_config(tmp_path, model_dir, objective, **overrides):
    from config.quickstart import tiny

    config = tiny()
    config.logdir = str(tmp_path / "logs")
    config.run_name = objective
    config.pretrained.model = model_dir
    config.num_epochs = 1
    config.sample.num_steps = 4
    config.sample.batch_size = 4
    config.sample.num_batches_per_epoch = 2
    config.sample.group_size = 4
    config.sample.noise_level = 0.0  # deterministic rollouts: legal for the forward-process objectives
    config.train.objective = objective
    config.train.batch_size = 4
    config.train.learning_rate = 1e-3
    config.train.forward_timesteps = 2
    config.logging.progress = False
    config.logging.image_freq = 0
    for key, value in overrides.items():
        node = config
        *path, last = key.split(".")
        for part in path:
            node = node[part]
        node[last] = value
    return config


def _matching_loglik(trainer, rollout):
    """ℓ_i = −mean over the updater's noise levels of the matching loss of final sample i (current weights)."""
    upd = trainer.update
    x0 = rollout.latents[:, -1]
    index = torch.arange(len(rollout))
    total = torch.zeros(len(rollout))
    with torch.no_grad():
        for k in range(trainer.config.train.forward_timesteps):
            t, noised = trainer.policy.forward_process(x0, upd.u[:, k], upd._noise(index, k, x0.shape[1:], "cpu"))
            pred = trainer.policy.predict(trainer.policy.denoiser, noised.x_t, t, rollout.cond, 1.0)
            total -= (pred - noised.target).square().reshape(len(rollout), -1).mean(dim=1)
    return total / trainer.config.train.forward_timesteps


@pytest.mark.parametrize("objective", ["awm", "nft", "rwr"])
def test_one_pass_favours_high_advantage_samples(objective, tmp_path, tiny_dirs):
    from ddpo_grpo.trainer import Trainer

    trainer = Trainer(_tiny_config(tmp_path, tiny_dirs["sd3"], objective))
    ep, scores = sampled(trainer)
    rollout = ep.rollout
    advantages, _ = trainer.advantage_phase(ep, scores)
    trainer.update.prepare(0, rollout, advantages)
    before = _matching_loglik(trainer, rollout)
    out = trainer.update_phase(ep, advantages)  # prepares again with the same seeds: the same noise
    after = _matching_loglik(trainer, rollout)
    gain = float((advantages.cpu() * (after - before)).sum())
    assert gain > 0, gain
    assert out["train/matching_loss"] > 0 and out["train/grad_norm"] > 0


def test_nft_one_pass_on_the_instructpix2pix_adapter(tmp_path):
    """The same first-order guarantee on the image-conditioned adapter (config/edit.py's objective): DDIM η = 0
    rollouts of source-image rows, the source latent in the condition, PSNR against each row's ground truth."""
    import numpy as np

    from ddpo_grpo.tiny import BUILDERS
    from ddpo_grpo.trainer import Trainer

    BUILDERS["ip2p"](tmp_path / "ip2p")
    rng = np.random.default_rng(0)
    cleans = [rng.random((3, 32, 32)).round(3) for _ in range(4)]
    rows = [
        {"prompt": "restore the image", "source_image": (c * 0.5).tolist(), "ground_truth": c.tolist()} for c in cleans
    ]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = _tiny_config(tmp_path, str(tmp_path / "ip2p"), "nft", **{"sample.noise_level": 0.0})
    config.prompts.source = str(tmp_path / "rows.jsonl")
    config.reward.fns = {"psnr": 1.0}
    trainer = Trainer(config)
    ep, scores = sampled(trainer)
    rollout = ep.rollout
    advantages, _ = trainer.advantage_phase(ep, scores)
    assert rollout.cond["image_latents"].shape == rollout.latents[:, -1].shape  # the source latent, per sample
    trainer.update.prepare(0, rollout, advantages)
    before = _matching_loglik(trainer, rollout)
    out = trainer.update_phase(ep, advantages)
    after = _matching_loglik(trainer, rollout)
    assert float((advantages.cpu() * (after - before)).sum()) > 0
    assert out["train/matching_loss"] > 0 and out["train/grad_norm"] > 0


def test_forward_objective_trains_end_to_end_on_deterministic_rollouts(tmp_path, tiny_dirs):
    from ddpo_grpo.trainer import Trainer

    config = _tiny_config(tmp_path, tiny_dirs["sd3"], "nft", num_epochs=2)
    Trainer(config).run()
    rows = [json.loads(line) for line in (Path(config.logdir) / "nft" / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1]
    assert all(r["train/matching_loss"] > 0 and r["train/drift"] >= 0 for r in rows)
    assert (Path(config.logdir) / "nft" / "final" / "pytorch_lora_weights.safetensors").is_file()


def test_zero_noise_stays_refused_for_grpo(tmp_path, tiny_dirs):
    from ddpo_grpo.trainer import Trainer
    from foundation.errors import ConfigError

    with pytest.raises(ConfigError, match="sample.noise_level"):
        Trainer(_tiny_config(tmp_path, tiny_dirs["sd3"], "grpo"))


def test_zero_advantage_samples_are_skipped_without_changing_the_gradient(tmp_path, tiny_dirs, monkeypatch):
    from ddpo_grpo import updates
    from ddpo_grpo.trainer import Trainer

    config = _tiny_config(tmp_path, tiny_dirs["sd3"], "grpo", **{"sample.noise_level": 0.7})
    trainer = Trainer(config)
    rollout = trainer.sample_phase(0)[0].rollout
    advantages = torch.tensor([1.0, 0.0, -2.0, 0.0, 0.5, 0.0, 0.0, 1.5])

    def grads(skip: bool):
        monkeypatch.setattr(updates, "ADVANTAGE_LINEAR", ("grpo", "awm") if skip else ())
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.update.prepare(0, rollout, advantages)
        result = trainer.update.minibatch(
            rollout, advantages, torch.arange(len(rollout)), sync=True, weight=1.0, check=False
        )
        return {k: p.grad.clone() for k, p in trainer.params.items()}, result.counts["skipped_samples"]

    full, none_skipped = grads(False)
    skipped, count = grads(True)
    assert none_skipped == 0 and count == 4
    for name in full:  # the same sum over fewer terms: equal up to float reordering, relative to the gradient's scale
        scale = full[name].abs().max().item()
        torch.testing.assert_close(skipped[name], full[name], rtol=1e-5, atol=1e-5 * scale)
