"""Failures a newcomer meets in the first hour (issue 33), each one line without a traceback, a non-zero exit
status (2 for bad input, 130 for Ctrl-C) and nothing left behind: a tracker whose package is missing, a reward
whose weights are not cached, an image-editing model given rows without source images, Ctrl-C during training
(the exact resume command, and the checkpoint it names resumes), and a world's reward.kwargs following the
rewards a command line chooses."""

import shlex
import sys
from pathlib import Path

import pytest

from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = str(REPO / "config" / "quickstart.py")
TINY = f"--config={QUICKSTART}:tiny"
train_script = load_script("train")


def _argv(tmp: Path, *extra: str) -> list[str]:
    return [
        "scripts/train.py",
        TINY,
        f"--config.logdir={tmp / 'logs'}",
        "--config.run_name=r",
        "--config.logging.progress=False",
        *extra,
    ]


def _one_line(err: str, prefix: str = "error: ") -> str:
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if prefix in line]
    assert len(lines) == 1, err
    return lines[0]


# ---- 1. a tracker whose package is not installed: refused before the run directory -----------------------------


def test_missing_tracker_package_is_refused_before_the_run_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # `import tensorboard` fails, as without the package
    assert train_script.main(_argv(tmp_path, "--config.logging.tracker=tensorboard")) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("error: "), err
    assert "logging.tracker='tensorboard'" in err and "pip install tensorboard" in err, err
    assert not (tmp_path / "logs").exists()  # nothing written: no run directory, no empty tracker folder


# ---- 2. a reward whose weights are not in the hub cache ---------------------------------------------------------


def test_serve_reward_without_cached_weights_names_the_model_and_how_to_get_it(tmp_path, monkeypatch, capsys):
    import logging

    from huggingface_hub import constants

    monkeypatch.setattr(logging, "basicConfig", lambda **kw: None)  # keep pytest's logging as it is
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache, offline (conftest: HF_HUB_OFFLINE=1)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    with pytest.raises(SystemExit) as exc:
        load_script("serve_reward").main(["--reward", "pickscore", "--port", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for word in ("'pickscore'", "yuvalkirstain/PickScore_v1", "hf download", "HF_HOME", str(tmp_path / "hf")):
        assert word in err, (word, err)


# ---- 3. an image-editing model given rows without source images -------------------------------------------------


@pytest.mark.parametrize("script", ["evaluate", "sample"])
def test_an_editing_model_on_text_prompts_names_a_source_with_images(script, tmp_path, capsys):
    from ddpo_grpo.tiny import BUILDERS

    model = tmp_path / "ip2p"
    BUILDERS["ip2p"](model)
    prompts = tmp_path / "text.txt"
    prompts.write_text("a red square\na blue circle\n")
    argv = ["--model", str(model), "--prompts", str(prompts), "--out", str(tmp_path / "o"), "--num_steps", "2"]
    argv += ["--reward", "jpeg_compressibility", "--device", "cpu"] if script == "evaluate" else []
    with pytest.raises(SystemExit) as exc:
        load_script(script).main(argv)
    assert exc.value.code == 2
    line = _one_line(capsys.readouterr().err)
    for word in ("--prompts", "row 0", "'source_image'", "edits a source image", "--prompts shapes_edit_test"):
        assert word in line, (word, line)
    assert not (tmp_path / "o").exists()


# ---- 4. Ctrl-C during training ----------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["update", "saving"])
def test_ctrl_c_stops_cleanly_with_the_resume_command_that_works(where, tmp_path, tiny_dirs, monkeypatch, capsys):
    """Ctrl-C in epoch 1's update, or while epoch 1's checkpoint is moved into place (its files written): the line
    names epoch 0's checkpoint, no half-written one is left, and the printed command resumes and finishes."""
    from ddpo_grpo.checkpoint import files
    from ddpo_grpo.trainer import Trainer

    argv = _argv(
        tmp_path,
        "--config.pretrained.model=" + tiny_dirs["sd3"],
        "--config.num_epochs=2",
        "--config.sample.num_steps=2",
        "--config.sample.num_batches_per_epoch=1",
        "--config.logging.image_freq=0",
    )
    update, move = Trainer.update_phase, files.move_into_place

    def interrupted_in_epoch_1(self, ep, *args, **kwargs):
        if ep.index == 1:
            raise KeyboardInterrupt
        return update(self, ep, *args, **kwargs)

    def interrupted_saving_epoch_1(tmp, final):
        if final.name == "epoch_000001":
            raise KeyboardInterrupt
        return move(tmp, final)

    if where == "update":
        monkeypatch.setattr(Trainer, "update_phase", interrupted_in_epoch_1)
    else:
        monkeypatch.setattr(files, "move_into_place", interrupted_saving_epoch_1)
    monkeypatch.setattr(sys, "argv", argv)
    assert train_script.main(argv) == 130
    run = tmp_path / "logs" / "r"
    line = _one_line(capsys.readouterr().err, "interrupted")
    checkpoint = run / "checkpoints" / "epoch_000000"  # epoch 0's, complete
    assert line.startswith(f"interrupted at epoch 1; the last checkpoint is {checkpoint}; resume with: "), line
    assert line.endswith("(exit status 130)") and "resume with: python scripts/train.py " in line, line
    command = shlex.split(line.split("resume with: ", 1)[1].removesuffix(" (exit status 130)"))
    assert command[:2] == ["python", "scripts/train.py"] and command[-1] == f"--config.resume_from={run}"
    assert command[2:-1] == argv[1:]  # the run's own command line, resume_from added
    assert not (run / "final").exists() and list((run / "checkpoints").iterdir()) == [checkpoint]

    monkeypatch.setattr(Trainer, "update_phase", update)
    monkeypatch.setattr(files, "move_into_place", move)
    assert train_script.main(command[1:]) == 0  # the command as printed resumes from the checkpoint and finishes
    assert "resumed" in capsys.readouterr().out.lower()
    assert (run / "final").is_dir()


# ---- 5. a world's reward.kwargs follow the rewards ---------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [
        ["--config.reward.fns={'pickscore': 1.0, 'aesthetic': 0.1}"],  # README
        ["--config.reward.sources={'red': 'my_reward.py:redness'}", "--config.reward.fns={'red': 1.0}"],  # rewards.md
    ],
    ids=["readme", "rewards_md"],
)
def test_the_default_configs_reward_kwargs_follow_the_rewards_chosen(overrides, capsys):
    from ddpo_grpo.cli import load_config
    from ddpo_grpo.config_checks import validate

    assert dict(load_config(["train.py"], QUICKSTART).reward.kwargs)  # the world's own kwargs (shapes)
    config = load_config(["train.py", *overrides], QUICKSTART)
    assert dict(config.reward.kwargs) == {}
    assert "reward.kwargs for ['shapes'] (the config's own) dropped" in capsys.readouterr().out
    validate(config)  # no complaint about reward.kwargs


def test_reward_kwargs_the_user_sets_for_a_reward_not_trained_is_refused_saying_what_to_do(tmp_path, capsys):
    argv = _argv(tmp_path, "--config.reward.fns={'jpeg_compressibility': 1.0}", "--config.reward.kwargs={'shapes': {}}")
    assert train_script.main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("error: "), err
    assert "reward.kwargs has entries ['shapes']" in err and "add those rewards to reward.fns" in err, err
    assert not (tmp_path / "logs").exists()
