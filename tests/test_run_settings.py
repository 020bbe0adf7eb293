"""A run's own sampling settings (ddpo_grpo/cli.py): read from final/ddpo_grpo_final.json's "sampling", else from the
newest checkpoint's config, else none; scripts/sample.py and scripts/evaluate.py use them unless a flag overrides
them, and print which they used. The manifests and state files here are written by hand."""

import io
import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from ddpo_grpo.cli import UsageError
from ddpo_grpo.run_sampling import SAMPLING_KEYS, run_sampling_settings
from ddpo_grpo.sampling_cli import resolve_settings
from tests.conftest import load_script

pytestmark = pytest.mark.usefixtures("one_thread")

SAMPLING = {
    "num_steps": 3,
    "guidance_scale": 2.0,
    "max_sequence_length": 8,
    "resolution": 32,
    "kernel": "",
    "negative_prompt": "",
    "image_guidance_scale": 1.5,
    "num_frames": 0,
}


def _state(run: Path, epoch: int, sample: dict) -> None:
    ckpt = run / "checkpoints" / f"epoch_{epoch:06d}"
    ckpt.mkdir(parents=True)
    (ckpt / "state.json").write_text(json.dumps({"epoch": epoch, "config": {"seed": 0, "sample": sample}}))


def _run(tmp_path: Path, manifest: dict | None) -> Path:
    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "final" / "ddpo_grpo_final.json").write_text(json.dumps(manifest if manifest is not None else {}))
    return run


def test_manifest_sampling_wins(tmp_path):
    run = _run(tmp_path, {"kind": "lora", "base_model": "x", "sampling": {**SAMPLING, "unrelated": 1}})
    _state(run, 3, {"eval_num_steps": 99})
    for model in (run, run / "final"):
        got, source = run_sampling_settings(str(model))
        assert got == SAMPLING and source.endswith("final/ddpo_grpo_final.json")


def test_newest_checkpoint_config_is_the_fallback(tmp_path):
    run = _run(tmp_path, {"kind": "lora", "base_model": "x"})  # an older run: no "sampling"
    _state(run, 4, {"eval_num_steps": 12, "num_steps": 10})
    _state(
        run,
        16,
        {
            "eval_num_steps": 20,
            "num_steps": 10,
            "guidance_scale": 4.5,
            "max_sequence_length": 8,
            "resolution": 64,
            "kernel": "",
            "negative_prompt": "",
            "image_guidance_scale": 1.5,
            "num_frames": 5,
            "guidance_scale_2": 3.0,
        },
    )
    got, source = run_sampling_settings(str(run / "final"))
    assert got == {
        "num_steps": 20,
        "guidance_scale": 4.5,
        "max_sequence_length": 8,
        "resolution": 64,
        "kernel": "",
        "negative_prompt": "",
        "image_guidance_scale": 1.5,
        "num_frames": 5,
        "guidance_scale_2": 3.0,
    }
    assert source.endswith("epoch_000016/state.json") and set(got) == set(SAMPLING_KEYS)


def test_not_a_run_or_nothing_recorded(tmp_path):
    assert run_sampling_settings(str(tmp_path)) == ({}, "")  # a plain directory
    assert run_sampling_settings("org/some-model") == ({}, "")
    assert run_sampling_settings(str(_run(tmp_path, {"kind": "full"}))) == ({}, "")


def test_unreadable_manifest_is_named(tmp_path):
    run = _run(tmp_path, None)
    (run / "final" / "ddpo_grpo_final.json").write_text("{not json")
    with pytest.raises(UsageError, match="ddpo_grpo_final.json"):
        run_sampling_settings(str(run))


def test_flags_override_and_the_sources_are_printed(tmp_path):
    run = _run(tmp_path, {"kind": "full", "sampling": {"num_steps": 20, "guidance_scale": 3.0}})
    args = SimpleNamespace(num_steps=None, guidance_scale=7.0, max_sequence_length=None)  # no resolution flag here
    out = io.StringIO()
    used = resolve_settings(args, str(run), {"num_steps": 40, "guidance_scale": 4.5, "max_sequence_length": 77}, out)
    assert used == {"num_steps": 20, "guidance_scale": 7.0, "max_sequence_length": 77}
    assert (args.num_steps, args.guidance_scale, args.max_sequence_length) == (20, 7.0, 77)
    line = out.getvalue().strip()
    assert line.startswith(
        "sampling settings: num_steps=20 (run), guidance_scale=7.0 (flag), max_sequence_length=77 (default)"
    )
    assert line.endswith("final/ddpo_grpo_final.json")


def test_guidance_scale_2_reaches_the_policy_and_is_refused_on_one_transformer(tmp_path, capsys):
    """--guidance_scale_2 (a run's sample.guidance_scale_2) is handed to the adapter: a Wan with one transformer
    refuses it in one line naming the flag."""
    from ddpo_grpo.tiny import build_tiny_wan

    build_tiny_wan(tmp_path / "wan")
    sample = load_script("sample")
    args = ["--model", str(tmp_path / "wan"), "--prompts", "simple", "--out", str(tmp_path / "a"), "--device", "cpu"]
    with pytest.raises(SystemExit):
        sample.main([*args, "--num_steps", "2", "--guidance_scale_2", "3.0"])
    assert "--guidance_scale_2 3.0: sample.guidance_scale_2=3.0" in capsys.readouterr().err


@pytest.fixture(scope="module")
def full_run(tmp_path_factory, tiny_dirs):
    """A full-fine-tune run's output: a copy of the tiny SD3 pipeline as final/, its manifest carrying "sampling"."""
    run = tmp_path_factory.mktemp("runs") / "run"
    shutil.copytree(tiny_dirs["sd3"], run / "final")
    manifest = {"kind": "full", "pipeline_class": "StableDiffusion3Pipeline", "sampling": SAMPLING}
    (run / "final" / "ddpo_grpo_final.json").write_text(json.dumps(manifest))
    return run


def test_sample_script_follows_the_run(full_run, tmp_path, capsys):
    sample = load_script("sample")
    args = ["--model", str(full_run), "--prompts", "simple", "--out", str(tmp_path / "a"), "--device", "cpu"]
    assert sample.main(args) == 0
    printed = capsys.readouterr().out
    assert (
        "num_steps=3 (run)" in printed and "resolution=32 (run)" in printed and "max_sequence_length=8 (run)" in printed
    )
    with Image.open(tmp_path / "a" / "00000.png") as im:
        assert im.size == (32, 32)  # the run's resolution, not the pipeline's native one
    first = np.asarray(Image.open(tmp_path / "a" / "00000.png"))
    # the same settings given as flags draw the same image; another step count another one
    flags = ["--num_steps", "3", "--guidance_scale", "2.0", "--max_sequence_length", "8", "--resolution", "32"]
    assert sample.main([*args[:5], str(tmp_path / "b"), *args[6:], *flags]) == 0
    assert np.array_equal(np.asarray(Image.open(tmp_path / "b" / "00000.png")), first)
    assert sample.main([*args[:5], str(tmp_path / "c"), *args[6:], "--num_steps", "4"]) == 0
    assert "num_steps=4 (flag)" in capsys.readouterr().out
    assert not np.array_equal(np.asarray(Image.open(tmp_path / "c" / "00000.png")), first)


def test_evaluate_script_follows_the_run(full_run, tmp_path, capsys):
    evaluate = load_script("evaluate")
    out = tmp_path / "eval"
    assert (
        evaluate.main(["--model", str(full_run / "final"), "--limit", "2", "--out", str(out), "--device", "cpu"]) == 0
    )
    data = json.loads((out / "eval.json").read_text())
    assert data["sampling"] == {**SAMPLING, "guidance_scale_2": None} and data["resolution"] == 32  # (not in the run)
    assert data["args"]["num_steps"] == 3 and data["args"]["per_group"] == 0  # --limit: every limited prompt once
    assert "num_steps=3 (run)" in capsys.readouterr().out


def test_a_text_length_of_zero_is_the_models_own(tmp_path):
    """sample.max_sequence_length = 0 means the pipeline's default: final/ records the length the policy resolved,
    and a 0 that an older manifest or a checkpoint's config holds is no setting (scripts/evaluate.py on a motion run
    refused it as --max_sequence_length 0; docs/experiments/2026-11-26-motion.md)."""
    from ddpo_grpo.checkpoint.run_state import final_manifest
    from tests.test_doc_commands import REPO

    run = _run(tmp_path, {"kind": "full", "sampling": {**SAMPLING, "max_sequence_length": 0}})
    _state(run, 1, {"eval_num_steps": 12, "max_sequence_length": 0})
    got, _ = run_sampling_settings(str(run))
    assert "max_sequence_length" not in got and got["num_steps"] == 3
    (run / "final" / "ddpo_grpo_final.json").write_text(json.dumps({"kind": "full"}))  # no "sampling": the config's
    assert run_sampling_settings(str(run))[0] == {"num_steps": 12}

    from config.base import get_config
    from ddpo_grpo.policies import build_policy, load_pipeline

    config = get_config()
    config.train.use_lora, config.sample.max_sequence_length = False, 0
    policy = build_policy(load_pipeline(str(REPO / "worlds" / "shapes" / "models" / "sd3")), max_sequence_length=0)
    assert final_manifest(config, policy, "m")["sampling"]["max_sequence_length"] == 256  # SD3's own default
