"""End-to-end and trainer-level tests on tiny pipelines (CPU, seconds each)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.conftest import REPO, sampled

REQUIRED_KEYS = {
    "epoch",
    "global_step",
    "reward/mean",
    "reward/std",
    "adv/mean",
    "adv/std",
    "train/loss",
    "train/policy_loss",
    "train/kl",
    "train/approx_kl",
    "train/clipfrac",
    "train/ratio_mean",
    "train/grad_norm",
    "train/logp_mismatch",
    "perf/sample_s",
    "perf/train_s",
    "adv/frac_zero_std",
    "train/inner_epochs_run",
}


def _config(tmp_path, model_dir, **overrides):
    from config.quickstart import tiny

    config = tiny()
    config.logdir = str(tmp_path / "logs")
    config.run_name = "run"
    config.pretrained.model = model_dir
    config.num_epochs = 2
    config.sample.num_steps = 4
    config.sample.batch_size = 4
    config.sample.num_batches_per_epoch = 2
    config.sample.group_size = 4
    config.train.batch_size = 2
    config.train.learning_rate = 3e-3
    config.logging.progress = False
    config.logging.image_freq = 0
    for key, value in overrides.items():
        node = config
        *path, leaf = key.split(".")
        for part in path:
            node = node[part]
        node[leaf] = value
    return config


def _run(config):
    from ddpo_grpo.trainer import Trainer

    trainer = Trainer(config)
    trainer.run()
    return trainer


def _metrics(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


# SD3 through train.py in the default suite: tests/test_scale.py's and test_two_processes_with_torchrun's launches
@pytest.mark.parametrize("kind", [pytest.param("sd3", marks=pytest.mark.slow), "sd"])
def test_train_script_end_to_end(tmp_path, tiny_dirs, kind):
    """scripts/train.py for 2 epochs: metrics contract, on-policy check, final/ loads in plain diffusers."""
    import diffusers

    logdir = tmp_path / "logs"
    cmd = [
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        f"--config={REPO / 'config' / 'quickstart.py'}:tiny",
        f"--config.pretrained.model={tiny_dirs[kind]}",
        f"--config.logdir={logdir}",
        "--config.run_name=e2e",
        "--config.num_epochs=2",
        "--config.sample.num_steps=4",
        "--config.logging.image_freq=1",
        "--config.logging.progress=False",
        "--config.train.num_inner_epochs=2",
        "--config.eval.freq=1",
        "--config.eval.limit=4",
        "--config.eval.prompts=shapes_test",
        "--config.eval.reward=shapes",
        "--config.eval.group_by=task",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = logdir / "e2e"
    rows = _metrics(run)
    assert [r["epoch"] for r in rows] == [0, 1]
    for row in rows:
        assert REQUIRED_KEYS <= set(row), REQUIRED_KEYS - set(row)
        assert row["train/logp_mismatch"] <= 1e-4
        assert row["train/inner_epochs_run"] == 2
        assert row["train/kl"] is None  # beta = 0: no reference forward, nothing to report
        assert abs(row["adv/mean"]) < 1e-5
        assert 0.0 <= row["eval/strict"] <= row["eval/partial"] <= 1.0 and row["eval/num_samples"] == 4
    assert rows[1]["global_step"] == 2 * 4 * 2  # 2 epochs × 4 minibatches × 2 inner epochs
    assert (run / "samples" / "epoch_00000.png").is_file()
    for name in ("before_after.png", "metrics.png", "before.json"):
        assert (run / "report" / name).is_file(), name
    before = json.loads((run / "report" / "before.json").read_text())["metrics"]
    assert before["eval/num_samples"] == 4  # evaluated before the first update too
    from PIL import Image

    with Image.open(run / "report" / "before_after.png") as grid:  # captioned with each prompt and its task
        captions = json.loads(grid.text["captions"])
    assert captions and all(c.endswith("]") and "[" in c for c in captions), captions
    assert "held-out evaluation" in proc.stdout and "\nall " in proc.stdout  # the before/after table
    assert (run / "checkpoints").is_dir()

    final = run / "final"
    assert (final / "pytorch_lora_weights.safetensors").is_file()
    cls = {"sd3": diffusers.StableDiffusion3Pipeline, "sd": diffusers.StableDiffusionPipeline}[kind]
    extra = {"text_encoder_3": None, "tokenizer_3": None} if kind == "sd3" else {}
    call = {"max_sequence_length": 8} if kind == "sd3" else {}
    pipe = cls.from_pretrained(tiny_dirs[kind], **extra)
    latents = torch.randn(1, 4, 8, 8, generator=torch.Generator().manual_seed(0))
    kwargs = dict(num_inference_steps=3, height=32, width=32, output_type="pt", latents=latents, **call)
    before = pipe("a red circle", **kwargs).images
    pipe.load_lora_weights(str(final))
    after = pipe("a red circle", **kwargs).images
    assert (before - after).abs().max() > 0  # the trained adapter is loaded and changes the output


def test_every_n_epochs_means_after_n_epochs_of_training(tmp_path, tiny_dirs):
    """eval.freq / logging.image_freq / save_freq = 2 over 3 epochs: after epochs 1 and 2 (the last), not
    after epoch 0 (one update in, which the "before" evaluation would only approximate)."""
    config = _config(
        tmp_path,
        tiny_dirs["sd3"],
        num_epochs=3,
        save_freq=2,
        **{"eval.freq": 2, "eval.limit": 2, "logging.image_freq": 2, "logging.tracker": "none"},
    )
    trainer = _run(config)
    rows = _metrics(trainer.run_dir)
    assert [r["epoch"] for r in rows if "eval/score" in r] == [1, 2]  # the training reward's score (jpeg)
    grids = sorted(p.name for p in (trainer.run_dir / "samples").glob("*.png"))
    assert grids == ["epoch_00001.png", "epoch_00002.png"]
    assert sorted(p.name for p in (trainer.run_dir / "checkpoints").iterdir()) == ["epoch_000001", "epoch_000002"]
    before = json.loads((trainer.run_dir / "report" / "before.json").read_text())["metrics"]
    assert before["eval/num_samples"] == 2  # the untrained model's evaluation


def test_exact_resume(tmp_path, tiny_dirs):
    """2 epochs straight == 1 epoch + resume for 1 more: same weights, same metrics."""
    straight = _run(_config(tmp_path / "a", tiny_dirs["sd3"]))
    first = _run(_config(tmp_path / "b", tiny_dirs["sd3"], num_epochs=1))
    # a crash after logging epoch 1 but before its checkpoint: the resumed run replays epoch 1
    stale = '{"epoch": 1, "global_step": 2, "reward/mean": 123.0}\n{"epoch": 2, "glob'
    with open(first.run_dir / "metrics.jsonl", "a") as f:
        f.write(stale)
    resumed = _run(_config(tmp_path / "b", tiny_dirs["sd3"], resume_from=str(first.run_dir), run_name=""))
    assert resumed.run_dir == first.run_dir and resumed.start_epoch == 1
    for name, p in straight.params.items():
        assert torch.equal(p, resumed.params[name]), name
    a, b = _metrics(straight.run_dir), _metrics(resumed.run_dir)
    assert [r["epoch"] for r in b] == [0, 1]  # one row per epoch: the stale row and the torn line moved aside
    assert (first.run_dir / "metrics.superseded.jsonl").read_text() == stale + "\n"
    for key in ("reward/mean", "train/loss", "train/approx_kl", "train/grad_norm"):
        assert a[1][key] == b[1][key], key


def test_full_finetune_with_kl_and_ema_exports_pipeline(tmp_path, tiny_dirs):
    import diffusers

    trainer = _run(
        _config(
            tmp_path,
            tiny_dirs["sd"],
            **{
                "train.use_lora": False,
                "train.beta": 0.1,
                "train.kl_estimator": "k3",
                "train.ema": True,
                "train.reference_update": "hard",
                "train.reference_update_freq": 1,
                "num_epochs": 2,
                "train.learning_rate": 1e-4,
            },
        )
    )
    rows = _metrics(trainer.run_dir)
    assert all(r["train/kl"] is not None and r["train/kl"] > 0 for r in rows)  # the policy moved away
    final = trainer.run_dir / "final"
    pipe = diffusers.StableDiffusionPipeline.from_pretrained(str(final))
    ema = trainer.ema.shadow
    for name, p in pipe.unet.named_parameters():
        torch.testing.assert_close(p.detach(), ema[name])  # exported weights are the EMA weights


def test_kl_to_reference_is_zero_while_policy_is_unchanged(tmp_path, tiny_dirs):
    """lr = 0: the policy stays at the (swapped-in) reference weights, so every KL estimate is 0."""
    trainer = _run(
        _config(
            tmp_path,
            tiny_dirs["sd3"],
            **{
                "num_epochs": 1,
                "train.learning_rate": 0.0,
                "train.beta": 0.5,
                "train.reference_update": "soft",
                "train.reference_update_freq": 1,
            },
        )
    )
    row = _metrics(trainer.run_dir)[0]
    assert row["train/kl"] == 0.0 and row["train/approx_kl"] == 0.0 and row["train/ratio_mean"] == 1.0


def test_kl_threshold_stops_inner_epochs(tmp_path, tiny_dirs):
    common = {"train.num_inner_epochs": 3, "num_epochs": 1, "train.learning_rate": 1e-2, "train.clip_range": 0.2}
    stopped = _run(_config(tmp_path / "a", tiny_dirs["sd3"], **common, **{"train.kl_threshold": 1e-12}))
    full = _run(_config(tmp_path / "b", tiny_dirs["sd3"], **common))
    assert _metrics(stopped.run_dir)[0]["train/inner_epochs_run"] == 1
    assert _metrics(full.run_dir)[0]["train/inner_epochs_run"] == 3


def test_invalid_config_names_field(tmp_path, tiny_dirs):
    from ddpo_grpo.config_checks import ConfigError

    with pytest.raises(ConfigError, match="sample.group_size"):
        _run(_config(tmp_path, tiny_dirs["sd3"], **{"sample.group_size": 3}))


def test_two_processes_with_torchrun(tmp_path, tiny_dirs):
    """2 CPU processes (gloo): groups span processes, rewards are gathered, one metrics file, one final/."""
    logdir = tmp_path / "logs"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(REPO / "scripts" / "train.py"),
        f"--config={REPO / 'config' / 'quickstart.py'}:tiny",
        f"--config.pretrained.model={tiny_dirs['sd3']}",
        f"--config.logdir={logdir}",
        "--config.run_name=ddp",
        "--config.num_epochs=2",
        "--config.sample.num_steps=3",
        "--config.sample.num_batches_per_epoch=1",
        "--config.sample.group_size=8",
        "--config.logging.progress=False",
        "--config.logging.image_freq=0",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "num_processes: 2" in proc.stdout and "images_per_epoch: 16" in proc.stdout
    rows = _metrics(logdir / "ddp")
    assert [r["epoch"] for r in rows] == [0, 1]  # written by the main process only
    assert rows[0]["adv/num_groups"] == 2  # 16 images / group_size 8, each group spread over both processes
    assert all(r["train/logp_mismatch"] <= 1e-4 for r in rows)
    assert (logdir / "ddp" / "final" / "pytorch_lora_weights.safetensors").is_file()


def test_update_moves_log_probs_toward_positive_advantages(tmp_path, tiny_dirs):
    """One training pass raises the log-prob of high-advantage transitions relative to low-advantage
    ones: Σ_i A_i·(log π_new − log π_old) > 0, the first-order guarantee of a policy-gradient step."""
    from ddpo_grpo.rollout import transition_inputs
    from ddpo_grpo.trainer import Trainer

    config = _config(
        tmp_path, tiny_dirs["sd3"], **{"num_epochs": 1, "train.learning_rate": 1e-3, "train.clip_range": 1.0}
    )
    trainer = Trainer(config)
    ep, scores = sampled(trainer)
    advantages, _ = trainer.advantage_phase(ep, scores)
    trainer.update_phase(ep, advantages)
    rollout = ep.rollout
    gain = 0.0
    with torch.no_grad():
        for k in range(rollout.train_steps.shape[1]):
            x, t, x_next, args, levels, j, valid = transition_inputs(rollout, k)
            out = trainer.policy.predict(trainer.policy.denoiser, x, t, rollout.cond, config.sample.guidance_scale)
            new = trainer.policy.step(out, x, args, levels, prev_sample=x_next).log_prob
            old = rollout.log_probs[torch.arange(len(rollout)), j]
            gain += float((advantages * (new - old)).sum())
    assert gain > 0


def test_group_members_share_initial_noise_when_asked(tmp_path, tiny_dirs):
    from ddpo_grpo.trainer import Trainer

    config = _config(
        tmp_path, tiny_dirs["sd3"], **{"sample.share_group_noise": True, "sample.num_batches_per_epoch": 1}
    )
    rollout = Trainer(config).sample_phase(0)[0].rollout
    x0 = rollout.latents[:, 0]  # [4, C, h, w]: one group of 4
    assert all(torch.equal(x0[0], x0[i]) for i in range(1, 4))
    assert not torch.equal(rollout.latents[0, -1], rollout.latents[1, -1])  # SDE noise still differs


@pytest.mark.parametrize("shared", [True, False])
def test_repeated_prompt_groups_with_shared_noise_stay_apart(tmp_path, tiny_dirs, shared):
    """The trainer keys the stat tracker by group when groups share initial noise (advantages.group_keys)."""
    from ddpo_grpo.trainer import Trainer

    trainer = Trainer(_config(tmp_path, tiny_dirs["sd3"], **{"sample.share_group_noise": shared}))
    rows = trainer.epoch_rows(0).rows
    trainer.prompt_sampler.draw = lambda epoch, n, round_index=0: [rows[0]] * n  # both groups draw one prompt
    ep = trainer.sample_phase(0)[0]
    per_reward = {"jpeg_compressibility": np.array([1.0] * 4 + [0.0] * 4)}  # group 0 all 1, group 1 all 0
    advantages, stats = trainer.advantage_phase(ep, per_reward)
    assert stats["adv/num_groups"] == (2 if shared else 1)
    if shared:
        assert torch.all(advantages == 0)
    else:
        assert torch.all(advantages[:4] > 0) and torch.all(advantages[4:] < 0)


def test_async_reward_scoring_gives_the_same_scores(tmp_path, tiny_dirs):
    from ddpo_grpo.trainer import Trainer

    scores = {}
    for workers in (0, 2):
        config = _config(tmp_path / str(workers), tiny_dirs["sd3"], **{"reward.num_workers": workers})
        scores[workers] = sampled(Trainer(config))[1]["jpeg_compressibility"]
    assert len(scores[0]) == 8
    np.testing.assert_array_equal(scores[0], scores[2])


def test_zero_noise_is_refused_with_the_field_name(tmp_path, tiny_dirs):
    with pytest.raises(ValueError, match="sample.noise_level=0.0: with no noise"):
        _run(_config(tmp_path, tiny_dirs["sd"], **{"sample.noise_level": 0.0}))
    with pytest.raises(ValueError, match="sample.noise_level=0.0: with no noise"):  # the deprecated name, one release
        _run(_config(tmp_path, tiny_dirs["sd"], **{"sample.eta": 0.0}))


@pytest.mark.parametrize("name", ["quickstart", pytest.param("grpo", marks=pytest.mark.slow)])
def test_quickstart_one_shortened_epoch(tmp_path, capsys, name):
    """The default config (shipped ShapesWorld SD, shapes reward, DiffusionNFT, LoRA) and its GRPO twin (SDE
    window), shrunk to one epoch of 4 images and a 4-image held-out evaluation: each trains, evaluates
    before/after and reports."""
    from config.quickstart import get_config
    from worlds.shapes.detector import reward  # noqa: F401  (registers shapes_detector, as its entry point does)

    config = get_config(name)
    config.logdir = str(tmp_path / "logs")
    config.run_name = "quick"
    config.num_epochs = 1
    config.sample.num_steps = 4
    config.sample.eval_num_steps = 3
    config.sample.batch_size = 4
    config.sample.num_batches_per_epoch = 1
    config.sample.group_size = 4
    config.train.batch_size = 4
    config.train.gradient_accumulation_steps = 1
    config.eval.per_group = 1
    config.logging.progress = False
    _run(config)
    (row,) = _metrics(tmp_path / "logs" / "quick")
    if name == "grpo":
        assert row["train/logp_mismatch"] <= 1e-4
    else:  # a forward-process objective: no transition log-probs, a matching loss
        assert row["train/logp_mismatch"] is None and math.isfinite(row["train/matching_loss"])
    assert row["eval/num_samples"] == 4
    assert all(row[f"eval/num_samples/{t}"] == 1 for t in ("single_object", "counting", "two_object", "position"))
    assert 0.0 <= row["eval/task_mean/strict"] <= row["eval/task_mean/partial"] <= 1.0
    assert 0.0 <= row["reward/mean"] <= 1.0  # partial judge score of the train prompts
    out = capsys.readouterr().out
    assert "held-out evaluation" in out and "task mean" in out
    assert (tmp_path / "logs" / "quick" / "final" / "pytorch_lora_weights.safetensors").is_file()


def test_sgd_optimizer_steps_along_the_gradient(tmp_path, tiny_dirs):
    """train.optimizer="sgd": one optimizer step moves the weights by exactly −lr × (accumulated gradient)."""
    from ddpo_grpo.trainer import Trainer

    config = _config(
        tmp_path,
        tiny_dirs["sd3"],
        **{
            "train.optimizer": "sgd",
            "train.learning_rate": 50.0,
            "train.batch_size": 8,
            "train.gradient_accumulation_steps": 1,
            "num_epochs": 1,
            "sample.batch_size": 8,
            "sample.num_batches_per_epoch": 1,
        },
    )
    trainer = Trainer(config)
    assert isinstance(
        trainer.optimizer.optimizer if hasattr(trainer.optimizer, "optimizer") else trainer.optimizer, torch.optim.SGD
    )
    before = {k: p.detach().clone() for k, p in trainer.params.items()}
    captured = {}
    step = trainer.optimizer.step

    def spy():  # the gradient as the optimizer sees it (after clipping)
        captured.update({k: p.grad.detach().clone() for k, p in trainer.params.items()})
        step()

    trainer.optimizer.step = spy
    trainer.run()
    moved = 0
    for k, p in trainer.params.items():
        torch.testing.assert_close(p.detach(), before[k] - 50.0 * captured[k], rtol=1e-5, atol=1e-7)
        moved += int((p.detach() != before[k]).any())
    assert moved > 0


def test_relative_gradient_clip_acts_on_spikes_after_its_warm_up(tmp_path, tiny_dirs):
    """train.grad_norm_ratio caps a step's gradient norm at ratio × the median of the recent steps' norms: with a
    ratio below 1 most steps are clipped once 5 norms are known, none before; the absolute cap alone never acts."""
    config = _config(tmp_path, tiny_dirs["sd3"], num_epochs=3, **{"train.grad_norm_ratio": 0.5})
    rows = _metrics(_run(config).run_dir)
    clipped = [r["train/grad_clipped"] for r in rows]  # 4 optimizer steps per epoch
    assert clipped[0] == 0 and clipped[1] >= 2 and clipped[2] >= 3, clipped
    off = _config(tmp_path / "off", tiny_dirs["sd3"], num_epochs=2, **{"train.grad_norm_ratio": 0.0})
    assert all(r["train/grad_clipped"] == 0 for r in _metrics(_run(off).run_dir))
