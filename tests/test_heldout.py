"""Held-out evaluation during a run (ddpo_grpo/heldout.py): several scorers on the same images, paired with the
untrained model, and the reward-hacking warning."""

import json

import numpy as np
import pytest
import torch

from tests.conftest import REPO, load_script

ROWS = [{"prompt": f"p{i}", "task": t} for t in ("a", "b") for i in range(12)]


def _redness(samples, prompts, metadata):
    x = samples.float()
    return (x[:, 0] - 0.5 * (x[:, 1] + x[:, 2])).mean(dim=(1, 2)).numpy(), {}


def _blueness(samples, prompts, metadata):
    x = samples.float()
    return (x[:, 2] - 0.5 * (x[:, 0] + x[:, 1])).mean(dim=(1, 2)).numpy(), {"task": [m["task"] for m in metadata]}


def _config(tmp_path, **eval_fields):
    from config.quickstart import tiny

    config = tiny()
    config.eval.freq, config.eval.group_by = 1, "task"
    config.eval.prompts = str(tmp_path / "rows.jsonl")
    for key, value in eval_fields.items():
        config.eval[key] = value
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return config


def _sampler(redder: float):
    """A deterministic 'model' whose samples get redder by ``redder`` (per sample noise fixed by the row)."""

    def sample(rows, reward, max_samples=0, **kwargs):
        from ddpo_grpo.evaluation import score

        gen = torch.Generator().manual_seed(0)
        images = torch.rand(len(rows), 3, 8, 8, generator=gen) * 0.5
        images[:, 0] += redder
        return score(images, rows, reward, kwargs.get("group_by", "")), images[:0], []

    return sample


def test_scorer_names_and_their_kwargs():
    from ddpo_grpo.heldout import scorer_kwargs, scorer_names

    assert scorer_names("shapes, shapes_detector,") == ["shapes", "shapes_detector"]
    assert scorer_kwargs(["shapes"], {"score": "strict"}) == {"shapes": {"score": "strict"}}
    both = scorer_kwargs(["shapes", "det"], {"shapes": {"score": "strict"}})
    assert both == {"shapes": {"score": "strict"}, "det": {}}
    with pytest.raises(ValueError, match="eval.reward_kwargs.*keyed by name"):
        scorer_kwargs(["shapes", "det"], {"score": "strict"})
    import ml_collections  # a config's nested dicts arrive as ConfigDicts (config/motion.py:physics)

    nested = ml_collections.ConfigDict({"kw": {"shapes": {"score": "strict"}, "det": {"x": 1}}}).kw
    assert scorer_kwargs(["shapes", "det"], nested) == {"shapes": {"score": "strict"}, "det": {"x": 1}}


def test_paired_gains_and_the_warning_when_only_the_training_reward_rises(tmp_path):
    from ddpo_grpo.heldout import HeldOut

    config = _config(tmp_path)
    held = HeldOut(config, {"blue": _blueness}, _redness, ["red"], tmp_path / "run")
    before = held(_sampler(0.0))
    assert "eval/score" in before and "eval.train/score" in before and "paired/hacking_warning" not in before
    assert (tmp_path / "run" / "report" / "eval_before.json").is_file()  # kept for a resumed run
    after = held(_sampler(0.1))
    # redness +0.1 exactly on every sample; blueness −0.05
    assert after["paired/eval.train/score/diff"] == pytest.approx(0.1, abs=1e-6)
    assert after["paired/eval/score/diff"] == pytest.approx(-0.05, abs=1e-6) and after["paired/eval/score/b/se"] < 1e-6
    assert after["paired/hacking_warning"] == 1
    assert held.warning.startswith("warning: the training reward rose on held-out prompts") and "'blue'" in held.warning
    assert "paired difference (train score)" in held.report()


def test_no_warning_when_the_held_out_scorer_rises_too_or_is_a_training_reward(tmp_path):
    from ddpo_grpo.heldout import HeldOut

    def also_red(samples, prompts, metadata):
        return _redness(samples, prompts, metadata)[0] + 1.0, {}

    held = HeldOut(_config(tmp_path / "a"), {"red2": also_red}, _redness, ["red"], tmp_path / "a" / "run")
    held(_sampler(0.0))
    assert held(_sampler(0.1))["paired/hacking_warning"] == 0 and held.warning is None
    # the training reward itself as the evaluation scorer is not a held-out scorer
    held = HeldOut(_config(tmp_path / "b"), {"red": _blueness}, _redness, ["red"], tmp_path / "b" / "run")
    held(_sampler(0.0))
    assert held(_sampler(0.1))["paired/hacking_warning"] == 0
    # resumed: the untrained model's values come back from the run directory
    again = HeldOut(_config(tmp_path / "b"), {"red": _blueness}, _redness, ["red"], tmp_path / "b" / "run")
    assert again(_sampler(0.1))["paired/eval.train/score/diff"] == pytest.approx(0.1, abs=1e-6)


def test_a_run_logs_every_scorer_and_the_paired_gains(tmp_path, tiny_dirs, capsys):
    """Through the trainer: two scorers of eval.reward, the training reward on the same images, paired keys."""
    train = load_script("train")
    (tmp_path / "r.py").write_text(
        "import numpy as np\n\n"
        "def blue(samples, prompts, metadata):\n"
        "    x = samples.float()\n"
        "    return (x[:, 2] - x[:, 0]).mean(dim=(1, 2)).numpy(), {'task': [m['task'] for m in metadata]}\n"
    )
    config = _config(tmp_path)
    argv = [
        "train.py",
        f"--config={REPO / 'config' / 'quickstart.py'}:tiny",
        f"--config.pretrained.model={tiny_dirs['sd3']}",
        f"--config.logdir={tmp_path / 'logs'}",
        "--config.run_name=h",
        "--config.num_epochs=2",
        "--config.sample.num_steps=2",
        "--config.logging.progress=False",
        "--config.eval.freq=1",
        f"--config.eval.prompts={config.eval.prompts}",
        "--config.eval.group_by=task",
        f"--config.reward.sources={{'blue': '{tmp_path / 'r.py'}:blue'}}",
        "--config.eval.reward=jpeg_compressibility,blue",
    ]
    assert train.main(argv) == 0
    rows = [json.loads(line) for line in (tmp_path / "logs" / "h" / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    for key in ("eval/score", "eval.blue/task_mean/score", "eval.train/score", "paired/eval.blue/score/diff"):
        assert np.isfinite(last[key]), key
    assert last["paired/hacking_warning"] in (0, 1)
    assert "held-out, paired with the untrained model" in capsys.readouterr().out


@pytest.mark.slow  # ~1 min: the shipped ShapesWorld model trained on redness; result recorded in docs/reward_hacking.md
def test_a_deliberately_hackable_reward_raises_the_warning_on_the_shipped_model(tmp_path, capsys):
    (tmp_path / "red.py").write_text(
        "def red(samples, prompts, metadata):\n"
        "    x = samples.float()\n"
        "    return (x[:, 0] - 0.5 * (x[:, 1] + x[:, 2])).mean(dim=(1, 2)).numpy(), {}\n"
    )
    argv = ["train.py", f"--config={REPO / 'config' / 'shapes.py'}:sd3_nft", f"--config.logdir={tmp_path}"]
    argv += ["--config.num_epochs=4", "--config.eval.freq=2", "--config.eval.per_group=8", "--config.probe.freq=0"]
    argv += [f"--config.reward.sources={{'red': '{tmp_path / 'red.py'}:red'}}", "--config.reward.fns={'red': 1.0}"]
    argv += [
        "--config.reward.kwargs={}",
        "--config.eval.reward=shapes",
        "--config.eval.reward_kwargs={'score': 'strict'}",
    ]
    argv += ["--config.sample.batch_size=16", "--config.sample.num_batches_per_epoch=2", "--config.train.batch_size=16"]
    argv += ["--config.train.gradient_accumulation_steps=1", "--config.logging.tracker=none"]
    assert load_script("train").main(argv) == 0
    assert "warning: the training reward rose on held-out prompts" in capsys.readouterr().out
