"""Runs that describe themselves: config.json and command.txt at the top of the run directory, --print_config (a dry
run), --help's options, resume_from alone restoring the saved config (overrides only where RESUME_SAFE says), the
start-up lines' resolved sampling settings and measured duration, and docs/outputs.md's list checked against the
files a real (tiny, 2-epoch) run writes."""

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, load_script, run_captured

pytestmark = pytest.mark.usefixtures("one_thread")
train_script = load_script("train")


def _argv(root: Path, model: str, *extra: str) -> list[str]:
    return [
        "train.py",
        f"--config={REPO / 'config' / 'quickstart.py'}:tiny",
        f"--config.pretrained.model={model}",
        f"--config.logdir={root / 'logs'}",
        "--config.run_name=run",
        "--config.num_epochs=2",
        "--config.sample.num_steps=2",
        "--config.logging.progress=False",
        *extra,
    ]


def _main(argv: list[str]) -> tuple[int, str, str]:
    return run_captured(train_script, argv)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_dirs):
    """A 2-epoch tiny LoRA run through scripts/train.py: (run directory, argv, stdout)."""
    root = tmp_path_factory.mktemp("described")
    argv = _argv(root, tiny_dirs["sd3"])
    rc, out, err = _main(argv)
    assert rc == 0, err[-2000:]
    return root / "logs" / "run", argv, out


def test_the_run_directory_holds_its_config_and_command(tiny_run):
    from ddpo_grpo.cli import load_config

    run, argv, _ = tiny_run
    expected = json.loads(load_config(argv, train_script.DEFAULT_CONFIG).to_json())
    assert json.loads((run / "config.json").read_text()) == expected
    assert (run / "command.txt").read_text() == shlex.join(["python", *argv]) + "\n"


def test_startup_prints_resolved_sampling_settings_and_a_measured_duration(tiny_run):
    _, _, out = tiny_run
    settings = [line for line in out.splitlines() if line.startswith("sampling settings:")]
    assert settings == [
        "sampling settings: resolution=32, kernel=flow_grpo, noise_level=0.7, steps=2 (evaluation 16), guidance=4.5"
    ]  # the tiny SD3's native side and the family's default kernel, not the config's 0 / ""
    assert "about 11 min" not in out and "expected duration: measured after the first epoch (2 epochs" in out
    first = next(line for line in out.splitlines() if line.startswith("epoch 0:"))
    assert re.search(r"\(epoch 0 took \d+ s; at this pace about \d+ s for 2 epochs, \d+ s to go\)$", first), first
    assert next(line for line in out.splitlines() if line.startswith("epoch 1:")).endswith("(about 0 s to go)")


# ---- docs/outputs.md: the list of what a run writes, against a real run -----------------------------------------

#: the brackets of docs/outputs.md's list: whether the condition holds for the tiny run (an unknown one fails)
CONDITIONS = {
    "always": True,
    "lora": True,
    "logging.image_freq": True,  # the last epoch's samples are always written when image_freq > 0
    "train.ema": False,
    "reference copy": False,
    "lagging sampler": False,
    "sharded": False,
    "full fine-tune": False,
    "eval.freq": False,
    "probe.freq": False,
    "resumed after logged epochs": False,
    "restarted": False,
    "tracker wandb": False,
    "tracker tensorboard": False,
}


def documented_outputs() -> list[tuple[list[str], str]]:
    """docs/outputs.md's "What a run writes" list: (paths, condition) per entry."""
    text = (REPO / "docs" / "outputs.md").read_text()
    section = text.split("## What a run writes", 1)[1].split("\n## ", 1)[0]
    entries = section.split("\n- ", 1)[1].split("\n- ")
    found = []
    for entry in entries:
        head, _, rest = entry.partition("[")
        found.append((re.findall(r"`([^`]+)`", head), rest.split("]", 1)[0]))
    return found


def _pattern(path: str) -> re.Pattern:
    regex = re.escape(path).replace("X", r"\d")
    regex = re.sub(r"<[a-z]+>", "[^/]+", regex.replace(r"\<", "<").replace(r"\>", ">"))
    return re.compile(regex + (".*" if path.endswith("/") else ""))


def test_docs_outputs_lists_exactly_what_a_run_writes(tiny_run):
    run, _, _ = tiny_run
    entries = documented_outputs()
    assert len(entries) >= 15 and all(paths for paths, _ in entries)
    unknown = sorted({c for _, c in entries} - set(CONDITIONS))
    assert not unknown, f"docs/outputs.md names conditions this test does not know: {unknown}"
    files = sorted(str(p.relative_to(run)) + ("/" if p.is_dir() else "") for p in run.rglob("*"))
    files = [f for f in files if not f.endswith("/")]  # directories come with their files
    undocumented = [f for f in files if not any(_pattern(p).fullmatch(f) for paths, _ in entries for p in paths)]
    assert not undocumented, f"the run wrote files docs/outputs.md does not list: {undocumented}"
    for paths, condition in entries:
        for path in paths:
            present = any(_pattern(path).fullmatch(f) for f in files)
            assert present == CONDITIONS[condition], (
                f"docs/outputs.md: {path} [{condition}] is {'' if present else 'not '}in the tiny run's directory"
            )


def test_the_list_parser_reads_paths_and_conditions():
    entries = dict((tuple(p), c) for p, c in documented_outputs())
    assert entries[("config.json",)] == "always"
    assert entries[("wandb/", "wandb_run_id")] == "tracker wandb"
    assert _pattern("samples/epoch_XXXXX.png").fullmatch("samples/epoch_00001.png")
    assert not _pattern("samples/epoch_XXXXX.png").fullmatch("samples/epoch_000001.png")
    assert _pattern("previous/<n>/").fullmatch("previous/1/metrics.jsonl")


# ---- --print_config, --help ------------------------------------------------------------------------------------


def test_print_config_prints_the_resolved_config_and_writes_nothing(tmp_path):
    argv = _argv(tmp_path, str(tmp_path / "no-model-needed"), "--config.num_epochs=7", "--print_config")
    rc, out, err = _main(argv)
    assert rc == 0, err
    config = json.loads(out)
    assert config["num_epochs"] == 7 and config["sample"]["num_steps"] == 2 and config["run_name"] == "run"
    assert list(tmp_path.iterdir()) == []  # a dry run: no logdir, no run directory


def test_print_config_reports_a_bad_field_in_one_line(tmp_path):
    rc, out, err = _main(_argv(tmp_path, "m", "--config.num_epoch=3", "--print_config"))
    assert rc == 2 and out == "" and err.count("\n") == 1 and "did you mean 'num_epochs'" in err


def test_help_lists_every_option_before_the_algorithm():
    rc, out, _ = _main(["train.py", "--help"])
    assert rc == 0
    options, algorithm = out.split("Algorithm (one epoch", 1)
    for flag in ("--config FILE", "--config.<field>=<value>", "--config.resume_from=", "--print_config", "--debug"):
        assert sum(line.lstrip().startswith(flag) for line in options.splitlines()) == 1, flag
    assert "PPO clipped surrogate" in algorithm


# ---- resume_from alone -----------------------------------------------------------------------------------------


def _copy(tiny_run, tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(tiny_run[0], run)
    return run


def test_resume_from_alone_continues_with_the_saved_config(tiny_run, tmp_path):
    run = _copy(tiny_run, tmp_path)
    argv = ["train.py", f"--config.resume_from={run}", "--config.num_epochs=3", "--config.logging.progress=False"]
    rc, out, err = _main(argv)
    assert rc == 0, err[-2000:]
    assert "continuing at epoch 2" in out
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1, 2]
    saved = json.loads((run / "config.json").read_text())
    assert saved["num_epochs"] == 3 and saved["sample"]["num_steps"] == 2  # the run's own, not the default file's 4+
    assert saved["pretrained"]["model"] == json.loads((tiny_run[0] / "config.json").read_text())["pretrained"]["model"]
    assert (run / "command.txt").read_text().splitlines()[1] == shlex.join(["python", *argv])


def test_resume_from_alone_refuses_an_unsafe_override_naming_it(tiny_run, tmp_path):
    run = _copy(tiny_run, tmp_path)
    before = sorted(p for p in run.rglob("*"))
    rc, out, err = _main(["train.py", f"--config.resume_from={run}", "--config.train.learning_rate=1e-2"])
    assert rc == 2 and err.count("\n") == 1
    assert err.startswith("error: --config.train.learning_rate: a resumed run keeps its saved value")
    assert "num_epochs, save_freq, logging.*, eval.freq" in err
    assert sorted(p for p in run.rglob("*")) == before


def test_an_older_run_without_config_json_is_restored_from_its_checkpoint(tiny_run, tmp_path):
    run = _copy(tiny_run, tmp_path)
    (run / "config.json").unlink()
    rc, out, err = _main(["train.py", f"--config.resume_from={run}", "--config.save_freq=5", "--print_config"])
    assert rc == 0, err
    config = json.loads(out)
    assert config["sample"]["num_steps"] == 2 and config["save_freq"] == 5 and config["resume_from"] == str(run)


def test_resume_from_a_directory_without_a_run_is_one_line(tmp_path):
    rc, out, err = _main(["train.py", f"--config.resume_from={tmp_path}"])
    assert rc == 2 and err.count("\n") == 1 and "no config.json and no checkpoint there" in err
