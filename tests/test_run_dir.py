"""The run directory's reliability leftovers (ddpo_grpo/run_dir.py), tried as a user meets them: a run killed before
its first checkpoint, a killed checkpoint or final/ write, a reward that scores nothing."""

import json
from pathlib import Path

from tests.conftest import load_script
from tests.test_train import _config

train_script = load_script("train")


def _killed_before_first_checkpoint(run: Path) -> None:
    """What a run killed during its first epoch leaves: its before-evaluation, one metrics row, no checkpoint."""
    (run / "report").mkdir(parents=True)
    (run / "report" / "before.json").write_text('{"captions": [], "metrics": {}}')
    (run / "metrics.jsonl").write_text('{"epoch": 0, "global_step": 0, "reward/mean": 0.5}\n')


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_run_killed_before_its_first_checkpoint_starts_again_both_ways(tmp_path, tiny_dirs, capsys):
    from ddpo_grpo.trainer import Trainer

    for how in ("resume_from", "run_name"):
        config = _config(tmp_path / how, tiny_dirs["sd3"], num_epochs=1)
        run = Path(config.logdir) / config.run_name
        _killed_before_first_checkpoint(run)
        if how == "resume_from":  # "continue it": the run directory, as the refusal message of a new run used to say
            config.run_name, config.resume_from = "", str(run)
        Trainer(config).run()
        out = capsys.readouterr().out
        assert "stopped before its first checkpoint; starting again from epoch 0" in out
        assert [r["epoch"] for r in _rows(run)] == [0] and "reward/mean" in _rows(run)[0]
        kept = run / "previous" / "1"  # the earlier attempt's record, kept aside
        assert json.loads((kept / "metrics.jsonl").read_text()) == {"epoch": 0, "global_step": 0, "reward/mean": 0.5}
        assert (kept / "report" / "before.json").is_file() and (run / "report" / "before.json").is_file()
        assert (run / "final" / "ddpo_grpo_final.json").is_file()


def test_killed_writes_are_cleaned_or_restored_with_a_line(tmp_path, tiny_dirs, capsys):
    from ddpo_grpo.trainer import Trainer

    config = _config(tmp_path, tiny_dirs["sd3"], num_epochs=1)
    Trainer(config).run()
    run = Path(config.logdir) / config.run_name
    (run / "checkpoints" / ".tmp-epoch_000005-4242").mkdir()  # a checkpoint write killed half-way
    (run / ".tmp-final-4242").mkdir()  # a final/ write killed half-way
    (run / "final").rename(run / ".old-final-4242")  # killed between moving final/ aside and moving the new one in
    capsys.readouterr()
    config.run_name, config.resume_from, config.num_epochs = "", str(run), 2
    Trainer(config)
    out = capsys.readouterr().out
    assert "removed" in out and ".tmp-epoch_000005-4242" in out and ".tmp-final-4242" in out
    assert "restored" in out and (run / "final" / "ddpo_grpo_final.json").is_file()
    assert sorted(p.name for p in run.iterdir() if p.name.startswith(".")) == []
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["epoch_000000"]


def test_a_reward_that_scores_nothing_stops_the_run_saying_where_it_ended(tmp_path, tiny_dirs, capsys):
    (tmp_path / "nan_reward.py").write_text(
        "import numpy as np\n\ndef score(samples, prompts, metadata):\n    return np.full(len(prompts), np.nan), {}\n"
    )
    argv = [
        "train.py",
        f"--config={Path(train_script.__file__).parents[1] / 'config' / 'quickstart.py'}:tiny",
        f"--config.pretrained.model={tiny_dirs['sd3']}",
        f"--config.logdir={tmp_path / 'logs'}",
        "--config.run_name=nan",
        "--config.num_epochs=6",
        "--config.sample.num_steps=2",
        "--config.logging.progress=False",
        "--config.train.max_degenerate_epochs=2",
        f"--config.reward.sources={{'mine': '{tmp_path / 'nan_reward.py'}:score'}}",
        "--config.reward.fns={'mine': 1.0}",
    ]
    assert train_script.main(argv) == 1  # a run that stopped itself (scripts/train.py's docstring)
    err = capsys.readouterr().err.splitlines()[-1]  # the last line (progress bars of model loading come first)
    assert err.startswith("stopped: epoch 1: 2 epochs in a row taught nothing: every reward is NaN")
    assert (
        "mine" in err
        and "ended without final/" in err
        and "checkpoints/epoch_000000" in err
        and "(exit status 1)" in err
    )
    run = tmp_path / "logs" / "nan"
    assert not (run / "final").exists() and _rows(run)[-1]["reward/frac_nan"] == 1.0
