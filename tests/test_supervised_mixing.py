"""Supervised-loss mixing in the trainer (ddpo_grpo/supervised.py): the staged schedule, the term's gradient
against a hand computation, rows without ground truth, the consistency term, and init_from's key report."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_ip2p(tmp_path_factory):
    from ddpo_grpo.tiny import BUILDERS

    path = tmp_path_factory.mktemp("ip2p") / "model"
    BUILDERS["ip2p"](path)
    return str(path)


def _rows_file(tmp_path, n=8, with_truth=6):
    """Restoration rows with array images: degraded = blurred noise, ground truth for the first ``with_truth``."""
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        clean = rng.random((3, 32, 32)).round(3)
        row = {
            "prompt": "restore the image",
            "id": f"r{i}",
            "source_image": (clean * 0.5 + 0.25).tolist(),
            "degradation": "blur:1",
        }
        if i < with_truth:
            row["ground_truth"] = clean.tolist()
        rows.append(row)
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _config(tmp_path, model, rows, **overrides):
    from config.quickstart import tiny

    c = tiny()
    c.logdir, c.run_name = str(tmp_path / "logs"), "sup"
    c.pretrained.model = model
    c.num_epochs = 3
    c.sample.num_steps, c.sample.batch_size, c.sample.num_batches_per_epoch, c.sample.group_size = 3, 4, 2, 4
    c.sample.noise_level = 1.0  # DDIM η
    c.train.batch_size = 4
    c.prompts.source = str(rows)
    c.reward.fns = {"psnr": 1.0}
    c.train.sup_weight, c.train.sup_schedule, c.train.sup_warmup_epochs, c.train.sup_ramp_epochs = 1.0, "staged", 1, 1
    c.train.sup_floor = 0.25
    c.logging.progress = False
    c.logging.image_freq = 0
    for key, value in overrides.items():
        if "." not in key:
            c[key] = value
            continue
        section, name = key.split(".")
        c[section][name] = value
    return c


def test_staged_schedule_supervised_only_then_mixed(tmp_path, tiny_ip2p):
    from ddpo_grpo.trainer import Trainer

    config = _config(
        tmp_path,
        tiny_ip2p,
        _rows_file(tmp_path, n=4, with_truth=2),
        **{"train.consistency_weight": 0.5, "train.degradation": "row"},
    )
    trainer = Trainer(config)
    trainer.run()
    rows = [json.loads(line) for line in (tmp_path / "logs" / "sup" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["train/lambda_sup"], r["train/lambda_pg"]) for r in rows] == [(1.0, 0.0), (0.625, 0.5), (0.25, 1.0)]
    assert "reward/mean" not in rows[0] and "reward/mean" in rows[1]  # epoch 0: supervised only, no sampling
    for r in rows:
        assert r["train/sup_loss"] > 0 and r["train/consistency_loss"] >= 0
    # the epoch's samples whose row has no ground truth are skipped for the supervised term and counted
    for epoch, r in enumerate(rows):
        ep = trainer.epoch_rows(epoch)
        assert r["train/sup_skipped"] == sum("ground_truth" not in ep.rows[g] for g, _ in ep.items)
    assert sum(r["train/sup_skipped"] for r in rows) > 0


@pytest.mark.slow  # exact resume runs in the default suite in tests/test_train.py and tests/test_adapter_kit.py
def test_staged_run_resumes_exactly(tmp_path, tiny_ip2p):
    """Stopped after epoch 1 (the hand-over, supervised and GRPO mixed) and resumed: the same weights as straight
    through. The supervised term's noise derives from (epoch, inner epoch, minibatch), not a per-run counter."""
    from ddpo_grpo import checkpoint as ckpt
    from ddpo_grpo.trainer import Trainer

    rows = _rows_file(tmp_path, n=4, with_truth=3)
    straight = _config(tmp_path / "a", tiny_ip2p, rows)
    Trainer(straight).run()
    first = _config(tmp_path / "b", tiny_ip2p, rows, num_epochs=2)
    Trainer(first).run()
    resumed = _config(tmp_path / "b", tiny_ip2p, rows)
    resumed.run_name, resumed.resume_from = "", str(Path(first.logdir) / first.run_name)
    Trainer(resumed).run()
    a = ckpt.load_checkpoint(Path(straight.logdir) / "sup")["tensors"]["model"]
    b = ckpt.load_checkpoint(Path(first.logdir) / "sup")["tensors"]["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_supervised_gradient_matches_a_hand_computation(tmp_path, tiny_ip2p):
    from ddpo_grpo.seeding import derive_seed
    from ddpo_grpo.trainer import Trainer
    from ddpo_grpo.updates import U_EPS

    trainer = Trainer(_config(tmp_path, tiny_ip2p, _rows_file(tmp_path, n=4, with_truth=3)))
    rows = [dict(r) for r in trainer.rows]
    term, policy = trainer.supervised, trainer.policy
    trainer.optimizer.zero_grad(set_to_none=True)
    term.backward(rows, lam_sup=2.0, epoch=5, key=(1, 8), sync=True)
    got = {k: p.grad.clone() for k, p in trainer.params.items()}

    gen = torch.Generator().manual_seed(derive_seed(trainer.config.seed, 5, 0, 6, 1, 8))
    batch = policy.supervised_batch(rows, key="ground_truth", generator=gen)
    assert batch.skipped == 1 and batch.index.tolist() == [0, 1, 2]
    u = torch.rand(3, generator=gen).clamp(U_EPS, 1 - U_EPS)
    noise = torch.randn(batch.x0.shape, generator=gen)
    t, noised = policy.forward_process(batch.x0, u, noise)
    pred = policy.predict(policy.denoiser, noised.x_t, t, batch.cond, 1.0)
    loss = 2.0 * (pred - noised.target).square().reshape(3, -1).mean(dim=1).mean()
    names = list(trainer.params)
    expected = torch.autograd.grad(loss, [trainer.params[n] for n in names])
    for name, g in zip(names, expected):
        torch.testing.assert_close(got[name], g, rtol=1e-5, atol=1e-8)


def test_init_from_reports_keys_and_refuses_a_mismatch_unless_not_strict(tmp_path, tiny_ip2p, capsys):
    from ddpo_grpo.trainer import Trainer
    from foundation.errors import ConfigError

    rows = _rows_file(tmp_path)
    first = _config(tmp_path / "a", tiny_ip2p, rows, **{"train.sup_weight": 0.0, "train.sup_floor": 0.0})
    first.num_epochs = 1
    Trainer(first).run()
    run = Path(first.logdir) / first.run_name
    other_rank = _config(
        tmp_path / "b",
        tiny_ip2p,
        rows,
        **{"train.sup_weight": 0.0, "train.sup_floor": 0.0, "train.lora_rank": 4, "pretrained.init_from": str(run)},
    )
    with pytest.raises(ConfigError, match="init_strict=False"):
        Trainer(other_rank)
    other_rank.pretrained.init_strict = False
    Trainer(other_rank)
    assert "of another shape" in capsys.readouterr().out
