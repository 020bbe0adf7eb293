"""The paired probe (ddpo_grpo/probe.py) and the per-group training reward.

With a learning rate of 0 the policy never changes, so a truly paired probe (fixed prompts, initial noise and
SDE noise) must measure a gain of exactly 0, every time; with training it moves, and its standard error is
that of the paired differences.
"""

import json
from pathlib import Path

import numpy as np
import pytest

from ddpo_grpo.probe import PairedProbe
from ddpo_grpo.prompts import PromptSampler

pytestmark = pytest.mark.usefixtures("one_thread")


def _config(tmp_path, model_dir, **overrides):
    from config.quickstart import tiny

    config = tiny()
    config.logdir = str(tmp_path / "logs")
    config.run_name = "probe"
    config.pretrained.model = model_dir
    config.num_epochs = 2
    config.sample.num_steps = 3
    config.sample.batch_size = 4
    config.sample.num_batches_per_epoch = 2
    config.train.batch_size = 4
    config.prompts.source = "shapes_train"
    config.reward.fns = {"shapes": 1.0}
    config.reward.kwargs = {"shapes": {"score": "partial"}}
    config.eval.group_by = "task"
    config.probe.freq = 1
    config.probe.prompts = 3
    config.probe.group_size = 2
    config.logging.progress = False
    config.logging.image_freq = 0
    for key, value in overrides.items():
        section, name = key.split(".")
        config[section][name] = value
    return config


def _rows(config):
    path = Path(config.logdir) / config.run_name / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_probe_is_exactly_paired_when_nothing_changes(tmp_path, tiny_dirs):
    from ddpo_grpo.trainer import Trainer

    config = _config(tmp_path, tiny_dirs["sd3"], **{"train.learning_rate": 0.0})
    Trainer(config).run()
    rows = _rows(config)
    assert [r["probe/diff"] for r in rows] == [0.0, 0.0] and [r["probe/diff_se"] for r in rows] == [0.0, 0.0]
    before = json.loads((Path(config.logdir) / "probe" / "report" / "probe_before.json").read_text())["rewards"]
    assert len(before) == 6 and rows[0]["probe/reward"] == pytest.approx(np.mean(before))
    # the training reward per task of the prompt rows
    assert any(k.startswith("reward/task/") for k in rows[0])


def test_probe_moves_with_training_and_reports_a_standard_error(tmp_path, tiny_dirs):
    from ddpo_grpo.trainer import Trainer

    config = _config(
        tmp_path, tiny_dirs["sd3"], **{"train.learning_rate": 3e-2, "prompts.source": "simple", "eval.group_by": ""}
    )
    config.reward.fns = {"redness": 1.0}  # continuous: a random model's judge score is flat 0 and 6 JPEG sizes may tie
    config.reward.kwargs = {}
    Trainer(config).run()
    rows = _rows(config)
    assert rows[-1]["probe/diff"] != 0.0 and rows[-1]["probe/diff_se"] > 0.0


def test_probe_leaves_training_unchanged(tmp_path, tiny_dirs):
    """The probe draws from its own generators: a run with it trains bit for bit as a run without it."""
    from ddpo_grpo.trainer import Trainer

    runs = {}
    for freq in (0, 1):
        config = _config(tmp_path / str(freq), tiny_dirs["sd3"], **{"train.learning_rate": 3e-2, "probe.freq": freq})
        config.reward.fns = {
            "redness": 1.0
        }  # continuous: a random model's judge score is flat 0 and 6 JPEG sizes may tie
        config.reward.kwargs = {}
        Trainer(config).run()
        runs[freq] = [
            {k: v for k, v in r.items() if k.startswith(("reward/", "train/", "adv/"))} for r in _rows(config)
        ]
    assert runs[0] == runs[1] and runs[0][-1]["train/grad_norm"] > 0


def test_probe_metrics_are_the_paired_mean_and_its_standard_error(tmp_path):
    rows = [{"prompt": f"p{i}"} for i in range(5)]
    probe = PairedProbe(tmp_path, PromptSampler(rows, seed=0), num_prompts=2, group_size=2, seed=0)
    assert len(probe.rows) == 4 and probe.rows[0] == probe.rows[1]  # groups of the same prompt
    probe.record_before(np.array([0.1, 0.2, 0.3, 0.4]))
    m = probe.metrics(np.array([0.2, 0.2, 0.5, 0.4]))
    diff = np.array([0.1, 0.0, 0.2, 0.0])
    assert m["probe/diff"] == pytest.approx(diff.mean())
    assert m["probe/diff_se"] == pytest.approx(diff.std(ddof=1) / 2)
    again = PairedProbe(tmp_path, PromptSampler(rows, seed=0), num_prompts=2, group_size=2, seed=0)
    assert again.before.tolist() == [0.1, 0.2, 0.3, 0.4]  # kept for a resumed run
