"""train.sampler_decay_*: the forward objectives' lagging sampling policy (DiffusionNFT's soft update).

θ_s ← d_n·θ_s + (1 − d_n)·θ after every epoch, d_n = min(max, rate·max(0, n − flat)); θ_s draws the
rollouts and is the "nft" loss's v_old; it is checkpointed and resumed exactly; GRPO refuses it.
"""

import pytest
import torch

from ddpo_grpo.weights import LaggingSampler
from tests.conftest import sampled
from tests.test_objectives import _tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")


def test_decay_schedule_and_soft_update():
    w = torch.nn.Parameter(torch.tensor([1.0, 2.0]))
    sampler = LaggingSampler({"w": w}, rate=0.01, max_decay=0.5, flat=10)
    assert [sampler.decay_at(n) for n in (0, 10, 30, 200)] == [0.0, 0.0, pytest.approx(0.2), 0.5]
    with torch.no_grad():
        w.copy_(torch.tensor([3.0, 6.0]))
    assert sampler.update(30) == pytest.approx(0.2)
    torch.testing.assert_close(sampler.shadow["w"], 0.2 * torch.tensor([1.0, 2.0]) + 0.8 * torch.tensor([3.0, 6.0]))
    assert sampler.update(5) == 0.0  # d = 0: a hard copy
    torch.testing.assert_close(sampler.shadow["w"], torch.tensor([3.0, 6.0]))


def _lagging(tmp_path, model_dir, **overrides):
    fields = {"train.sampler_decay_rate": 0.2, "train.sampler_decay_max": 0.95, "train.sampler_decay_flat": 0}
    return _tiny_config(tmp_path, model_dir, "nft", **{**fields, **overrides})


def test_rollouts_come_from_the_sampler_and_it_is_the_loss_anchor(tmp_path, tiny_dirs):
    from ddpo_grpo.trainer import Trainer

    plain = Trainer(_tiny_config(tmp_path / "a", tiny_dirs["sd3"], "nft"))
    reference = plain.sample_phase(0)[0].rollout
    trainer = Trainer(_lagging(tmp_path / "b", tiny_dirs["sd3"]))
    with torch.no_grad():  # move θ far from θ_s (still the initial weights): the rollouts must not change
        for p in trainer.params.values():
            p.add_(0.5)
    ep, scores = sampled(trainer)
    torch.testing.assert_close(ep.rollout.latents, reference.latents)
    sampler, trainer.sampler = trainer.sampler, None  # without it the moved θ samples, and differs
    assert not torch.allclose(trainer.sample_phase(0)[0].rollout.latents, reference.latents)
    trainer.sampler = sampler
    advantages, _ = trainer.advantage_phase(ep, scores)
    trainer.update.prepare(0, ep.rollout, advantages)
    assert trainer.update.old is trainer.sampler.shadow


def test_soft_update_per_epoch_and_exact_resume(tmp_path, tiny_dirs):
    from ddpo_grpo import checkpoint as ckpt
    from ddpo_grpo.trainer import Trainer
    from ddpo_grpo.weights import snapshot

    config = _lagging(tmp_path / "a", tiny_dirs["sd3"], num_epochs=2, save_freq=1)
    straight = Trainer(config)
    initial = snapshot(straight.params)
    straight.run()
    checkpoints = sorted((straight.run_dir / "checkpoints").iterdir())
    saved = [ckpt.load_checkpoint(c) for c in checkpoints]
    expected = initial
    for c in saved:  # θ_s(e) = d·θ_s(e−1) + (1 − d)·θ(e), d from the optimizer steps so far
        d = straight.sampler.decay_at(c["state"]["global_step"])
        model = c["tensors"]["model"]
        expected = {k: d * expected[k] + (1 - d) * model[k] for k in expected}
        for k in expected:
            torch.testing.assert_close(c["tensors"]["sampler"][k], expected[k])
    decays = [straight.sampler.decay_at(c["state"]["global_step"]) for c in saved]
    assert decays == [pytest.approx(0.4), pytest.approx(0.8)]  # 2 steps per epoch: real mixes, not copies
    first = Trainer(_lagging(tmp_path / "b", tiny_dirs["sd3"], num_epochs=1, save_freq=1))
    first.run()
    resumed = Trainer(
        _lagging(tmp_path / "b", tiny_dirs["sd3"], num_epochs=2, resume_from=str(first.run_dir), run_name="")
    )
    assert resumed.start_epoch == 1
    resumed.run()
    for k, v in straight.sampler.shadow.items():
        torch.testing.assert_close(resumed.sampler.shadow[k], v)
    for k, p in straight.params.items():
        torch.testing.assert_close(resumed.params[k], p)


def test_grpo_refuses_a_lagging_sampler(tmp_path, tiny_dirs):
    from ddpo_grpo.trainer import Trainer
    from foundation.errors import ConfigError

    config = _lagging(tmp_path, tiny_dirs["sd3"], **{"sample.noise_level": 0.7})
    config.train.objective = "grpo"
    with pytest.raises(ConfigError, match="train.sampler_decay_rate"):
        Trainer(config)
