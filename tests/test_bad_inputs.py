"""The bad-input battery: every refusal of scripts/train.py is one message naming what and how to fix it.

Table-driven: each case is a command line (on the tiny config), the exit status it must give and the words its
message must contain. Refusals are exit status 2 with no traceback, checked before any model is loaded, so
none of them may create the run directory. Then the NaN cases (exit status 1, nothing non-finite saved), the
resume cases (a corrupt newest checkpoint falls back to the previous one; another LoRA rank is explained) and
the other scripts' early refusals.
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from tests.conftest import load_script

REPO = Path(__file__).resolve().parents[1]
TINY = f"--config={REPO / 'config' / 'quickstart.py'}:tiny"
train_script = load_script("train")

# (case, extra arguments, exit status, words the message must contain); "{tmp}" is the test's directory
CASES = [
    ("unknown field", ["--config.train.lr=1"], 2, ["train has no field 'lr'"]),
    ("misspelt field", ["--config.train.learning_rat=1"], 2, ["learning_rate"]),
    ("unparsable value", ["--config.train.learning_rate=abc"], 2, ["learning_rate", "abc"]),
    ("unknown experiment", [f"--config={REPO / 'config' / 'sd3.py'}:nope"], 2, ["no experiment 'nope'"]),
    ("missing config file", ["--config={tmp}/none.py"], 2, ["no such file"]),
    ("unknown option", ["--fast"], 2, ["unknown option '--fast'"]),
    ("negative learning rate", ["--config.train.learning_rate=-1"], 2, ["train.learning_rate"]),
    ("group of one", ["--config.sample.group_size=1"], 2, ["sample.group_size"]),
    ("images not whole groups", ["--config.sample.group_size=3"], 2, ["sample.group_size"]),
    ("minibatch not dividing", ["--config.train.batch_size=3"], 2, ["train.batch_size"]),
    (
        "accumulation not dividing",
        ["--config.train.gradient_accumulation_steps=3"],
        2,
        ["train.gradient_accumulation_steps"],
    ),
    ("unknown kernel", ["--config.sample.kernel=ddpx"], 2, ["sample.kernel"]),
    ("unknown deprecated kernel", ["--config.sample.sde_type=ddpx"], 2, ["sample.sde_type"]),
    ("unknown advantage mode", ["--config.train.adv_mode=rank"], 2, ["train.adv_mode"]),
    ("unknown strategy", ["--config.distributed.strategy=zero3"], 2, ["distributed.strategy"]),
    ("cpu offload without fsdp", ["--config.distributed.cpu_offload=True"], 2, ["distributed.cpu_offload", "fsdp"]),
    ("unknown store dtype", ["--config.sample.store_dtype=int8"], 2, ["sample.store_dtype"]),
    ("eta out of range", ["--config.sample.eta=2"], 2, ["sample.eta"]),
    ("negative noise level", ["--config.sample.noise_level=-1"], 2, ["sample.noise_level"]),
    (
        "cps noise above one",
        ["--config.sample.kernel=cps", "--config.sample.noise_level=2"],
        2,
        ["sample.noise_level"],
    ),
    ("zero timestep fraction", ["--config.train.timestep_fraction=0"], 2, ["train.timestep_fraction"]),
    ("zero clip range", ["--config.train.clip_range=0"], 2, ["train.clip_range"]),
    ("negative beta", ["--config.train.beta=-1"], 2, ["train.beta"]),
    ("unknown precision", ["--config.mixed_precision=fp8"], 2, ["mixed_precision"]),
    ("unknown tracker", ["--config.logging.tracker=mlflow"], 2, ["logging.tracker"]),
    ("negative epochs", ["--config.num_epochs=-1"], 2, ["num_epochs"]),
    ("window longer than schedule", ["--config.sample.sde_window_size=20"], 2, ["sample.sde_window_size"]),
    ("no rewards", ["--config.reward.fns={}"], 2, ["reward.fns"]),
    ("unknown reward", ["--config.reward.fns={'pickscor': 1.0}"], 2, ["unknown reward 'pickscor'", "pickscore"]),
    (
        "missing reward file",
        ["--config.reward.sources={'mine': 'nope.py:fn'}", "--config.reward.fns={'mine': 1.0}"],
        2,
        ["nope.py", "does not exist"],
    ),
    (
        "reward weight not a number",
        ["--config.reward.fns={'jpeg_compressibility': 'heavy'}"],
        2,
        ["jpeg_compressibility", "not a number"],
    ),
    ("kwargs of an unused reward", ["--config.reward.kwargs={'aesthetic': {}}"], 2, ["reward.kwargs", "aesthetic"]),
    (
        "negative physics weight",
        [
            "--config.reward.fns={'motion_physics': 1.0}",
            "--config.reward.kwargs={'motion_physics': {'lambda_floating': -1.0}}",
        ],
        2,
        ["lambda_floating = -1.0 is negative", "reward.kwargs['motion_physics']['lambda_floating']"],
    ),
    ("missing prompt file", ["--config.prompts.source={tmp}/prompts.txt"], 2, ["prompts.source", "prompts.txt"]),
    ("malformed prompt row", ["--config.prompts.source={tmp}/bad.jsonl"], 2, ["bad.jsonl line 2", "invalid JSON"]),
    ("stratify by a missing field", ["--config.prompts.stratify_by=task"], 2, ["prompts.stratify_by", "task"]),
    (
        "missing model directory",
        ["--config.pretrained.model={tmp}/model"],
        2,
        ["pretrained.model", "no such directory"],
    ),
    ("model is a file", ["--config.pretrained.model={tmp}/bad.jsonl"], 2, ["pretrained.model", "is a file"]),
    ("directory that is no pipeline", ["--config.pretrained.model={tmp}"], 2, ["pretrained.model", "model_index.json"]),
    (
        "hub id not cached offline",
        ["--config.pretrained.model=someone/not-a-model"],
        2,
        ["pretrained.model", "HF_HUB_OFFLINE"],
    ),
    ("unknown tiny model", ["--config.pretrained.tiny=sd9"], 2, ["pretrained.tiny"]),
    ("run name escaping logdir", ["--config.run_name=../escaped"], 2, ["run_name", "plain directory name"]),
    ("absolute run name", ["--config.run_name=/tmp/escaped"], 2, ["run_name"]),
    ("missing checkpoint", ["--config.resume_from={tmp}/gone"], 2, ["resume_from", "does not exist"]),
    (
        "run without a checkpoint yet",
        ["--config.resume_from={tmp}/fresh_run"],
        2,
        ["resume_from", "no complete checkpoints"],
    ),
    ("rerun into an existing run", ["--config.run_name=existing"], 2, ["already holds a run", "resume_from"]),
    ("balanced eval without groups", ["--config.eval.freq=1", "--config.eval.per_group=4"], 2, ["eval.group_by"]),
    (
        "missing eval prompts",
        ["--config.eval.freq=1", "--config.eval.prompts={tmp}/held_out.txt"],
        2,
        ["eval.prompts", "held_out.txt"],
    ),
    ("unknown eval reward", ["--config.eval.freq=1", "--config.eval.reward=judge"], 2, ["eval.reward", "judge"]),
]


def _setup(tmp: Path) -> None:
    (tmp / "bad.jsonl").write_text('{"prompt": "a"}\n{"prompt": \n')
    (tmp / "fresh_run").mkdir()
    (tmp / "logs" / "existing" / "final").mkdir(parents=True)  # a finished run's result
    (tmp / "logs" / "existing" / "metrics.jsonl").write_text('{"epoch": 0}\n')


def _argv(tmp: Path, extra: list[str], run_name: str = "r") -> list[str]:
    base = [
        "train.py",
        TINY,
        f"--config.logdir={tmp / 'logs'}",
        f"--config.run_name={run_name}",
        "--config.logging.progress=False",
    ]
    return base + [a.replace("{tmp}", str(tmp)) for a in extra]


@pytest.mark.parametrize("case,extra,status,words", CASES, ids=[c[0] for c in CASES])
def test_refused_in_one_message_before_anything_is_loaded(case, extra, status, words, tmp_path, capsys):
    _setup(tmp_path)
    assert train_script.main(_argv(tmp_path, extra)) == status
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("error: "), err
    for word in words:
        assert word in err, (word, err)
    assert not (tmp_path / "logs" / "r").exists()  # refused before the run directory was made
    assert not (tmp_path / "logs" / "escaped").exists() and not (tmp_path / "escaped").exists()


@pytest.mark.parametrize(
    "extra", [["--config.distributed.strategy=fsdp"], ["--config.train.gradient_checkpointing=True"]]
)
def test_blocks_to_shard_must_exist_and_are_checked_before_the_run_directory(tmp_path, capsys, extra):
    """Known only once the model is loaded (its module classes), but still before anything is written."""
    _setup(tmp_path)
    assert train_script.main(_argv(tmp_path, [*extra, "--config.distributed.shard_blocks=('NoSuchBlock',)"])) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: distributed.shard_blocks:") and "JointTransformerBlock" in last, last
    assert not (tmp_path / "logs" / "r").exists()


def test_debug_shows_the_traceback(tmp_path):
    from foundation.errors import ConfigError

    with pytest.raises(ConfigError, match="train.learning_rate"):
        train_script.main(_argv(tmp_path, ["--config.train.learning_rate=-1", "--debug"]))


# ---- NaN: nothing non-finite is trained on, saved or exported --------------------------------------------------


def _tiny_run(tmp_path, tiny_dirs, *extra, run_name="r"):
    args = [
        "--config.pretrained.model=" + tiny_dirs["sd3"],
        "--config.num_epochs=3",
        "--config.sample.num_steps=2",
        "--config.logging.image_freq=0",
        *extra,
    ]
    return train_script.main(_argv(tmp_path, args, run_name))


def _all_saved_tensors_finite(run: Path) -> bool:
    files = list(run.rglob("*.safetensors"))
    return all(bool(torch.isfinite(t).all()) for f in files for t in load_file(str(f)).values())


@pytest.mark.parametrize("optimizer", ["adamw", "sgd"])
def test_huge_learning_rate_stops_with_the_cause_and_saves_nothing_non_finite(optimizer, tmp_path, tiny_dirs, capsys):
    code = _tiny_run(tmp_path, tiny_dirs, "--config.train.learning_rate=1e12", f"--config.train.optimizer={optimizer}")
    err = capsys.readouterr().err
    last = err.strip().splitlines()[-1]  # (after the model-loading progress bars)
    assert code == 1 and last.startswith("stopped: epoch 0: ") and "Traceback" not in err, err
    assert "learning rate" in last
    run = tmp_path / "logs" / "r"
    assert not (run / "final").exists()
    assert _all_saved_tensors_finite(run)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(np.isfinite(r["reward/mean"]) for r in rows)


def test_reward_nan_for_every_sample_stops_naming_the_reward(tmp_path, tiny_dirs, capsys):
    (tmp_path / "nan_reward.py").write_text(
        "import numpy as np\n\ndef score(samples, prompts, metadata):\n    return np.full(len(prompts), np.nan), {}\n"
    )
    with pytest.warns(RuntimeWarning, match="every reward is NaN.*never"):
        code = _tiny_run(
            tmp_path,
            tiny_dirs,
            f"--config.reward.sources={{'never': '{tmp_path}/nan_reward.py:score'}}",
            "--config.reward.fns={'never': 1.0}",
            "--config.train.max_degenerate_epochs=2",
        )
    err = capsys.readouterr().err
    assert code == 1 and "2 epochs in a row taught nothing" in err and "never" in err, err
    assert not (tmp_path / "logs" / "r" / "final").exists()


def test_infinite_reward_names_reward_sample_and_prompt(tmp_path, tiny_dirs, capsys):
    (tmp_path / "inf_reward.py").write_text(
        "import numpy as np\n\ndef score(samples, prompts, metadata):\n"
        "    s = np.zeros(len(prompts)); s[1] = np.inf\n    return s, {}\n"
    )
    code = _tiny_run(
        tmp_path,
        tiny_dirs,
        f"--config.reward.sources={{'huge': '{tmp_path}/inf_reward.py:score'}}",
        "--config.reward.fns={'huge': 1.0}",
    )
    err = capsys.readouterr().err
    assert code == 2 and "reward 'huge' returned inf for sample 1 (prompt" in err, err


# ---- resume -----------------------------------------------------------------------------------------------------


def test_resume_falls_back_past_a_corrupt_checkpoint_and_explains_another_rank(tmp_path, tiny_dirs, capsys):
    assert _tiny_run(tmp_path, tiny_dirs, "--config.num_epochs=2") == 0
    run = tmp_path / "logs" / "r"
    newest = run / "checkpoints" / "epoch_000001"
    model = newest / "model.safetensors"
    model.write_bytes(model.read_bytes()[:-10])  # a crash mid-copy, a full disk
    capsys.readouterr()
    code = _tiny_run(tmp_path, tiny_dirs, "--config.num_epochs=3", f"--config.resume_from={run}", run_name="")
    out = capsys.readouterr().out
    assert code == 0
    assert "model.safetensors is truncated" in out and "falling back to the previous checkpoint epoch_000000" in out
    assert "continuing at epoch 1" in out
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [0, 1, 2]  # the replayed epoch's old row moved aside

    code = _tiny_run(
        tmp_path,
        tiny_dirs,
        "--config.num_epochs=4",
        f"--config.resume_from={run}",
        "--config.train.lora_rank=4",
        run_name="",
    )
    err = capsys.readouterr().err
    assert code == 2 and "train.lora_rank=4 (the checkpoint's run: 8)" in err and "Traceback" not in err, err


# ---- the other scripts refuse early too --------------------------------------------------------------------------


def test_sample_and_evaluate_refuse_a_file_as_output_before_loading(tmp_path, capsys):
    out = tmp_path / "a_file"
    out.write_text("x")
    for name in ("sample", "evaluate"):
        script = load_script(name)
        extra = ["--prompts", "simple"] if name == "sample" else []
        with pytest.raises(SystemExit) as exc:
            script.main(["--model", str(tmp_path / "missing"), "--out", str(out), *extra])
        assert exc.value.code == 2
        assert "is a file" in capsys.readouterr().err


def test_evaluate_refuses_when_no_sample_is_applicable(tmp_path, tiny_dirs, capsys):
    prompts = tmp_path / "cats.txt"
    prompts.write_text("a cat\na dog\n")
    with pytest.raises(SystemExit) as exc:
        load_script("evaluate").main(
            [
                "--model",
                tiny_dirs["sd3"],
                "--prompts",
                str(prompts),
                "--out",
                str(tmp_path / "o"),
                "--resolution",
                "32",
                "--num_steps",
                "2",
                "--max_sequence_length",
                "8",
                "--device",
                "cpu",
            ]
        )
    assert exc.value.code == 2
    assert "scored none of the 2 samples" in capsys.readouterr().err


def test_an_sde_window_on_deterministic_steps_is_named(tmp_path, capsys):
    """A DDPM-type kernel's last step has std 0: a window placed only there trains nothing. The run stops at its
    first rollout with the field and the fix, not with the loss's "needs at least one valid transition"."""
    argv = [
        "train.py",
        f"--config={REPO / 'config' / 'motion.py'}:motion_tiny",
        f"--config.logdir={tmp_path}",
        "--config.num_epochs=1",
        "--config.sample.sde_window_size=1",
        "--config.sample.sde_window_range=(3, 3)",
    ]
    status = train_script.main(argv)
    err = capsys.readouterr().err
    assert status == 2, err[-2000:]
    assert "sample.sde_window_range=(3, 3)" in err and "no stochastic transition" in err and "start ≤ 2" in err
    assert "Traceback" not in err
