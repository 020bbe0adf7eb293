"""A run's output handed on: final/ carries the run's own sampling settings (final/sampling.json, the schema of a
shipped model's), which scripts/sample.py and evaluate.py use on final/ or on a copy of it moved anywhere, and say so;
a run saved by an older version (fields added since missing from its config.json, fields since removed in it)
resumes with --config.resume_from alone. Real tiny runs through scripts/train.py."""

import io
import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from ddpo_grpo.run_sampling import SAMPLING_KEYS
from ddpo_grpo.sampling_cli import MODEL_SAMPLING_FILE
from tests.conftest import REPO, load_script, run_captured

pytestmark = pytest.mark.usefixtures("one_thread")
train_script = load_script("train")

#: the run's evaluation settings, none of them sample.py's or the tiny pipeline's defaults
EVAL_STEPS, GUIDANCE, RESOLUTION = 3, 3.5, 32


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_dirs):
    """{"lora": run directory, "full": run directory}: 1-epoch tiny SD3 runs, LoRA and full fine-tune."""
    root = tmp_path_factory.mktemp("handover")
    found = {}
    for kind, extra in (("lora", []), ("full", ["--config.train.use_lora=False"])):
        argv = [
            "train.py",
            f"--config={REPO / 'config' / 'quickstart.py'}:tiny",
            f"--config.pretrained.model={tiny_dirs['sd3']}",
            f"--config.logdir={root / 'logs'}",
            f"--config.run_name={kind}",
            "--config.num_epochs=1",
            "--config.sample.num_steps=2",
            f"--config.sample.eval_num_steps={EVAL_STEPS}",
            f"--config.sample.guidance_scale={GUIDANCE}",
            f"--config.sample.resolution={RESOLUTION}",
            "--config.logging.progress=False",
            *extra,
        ]
        rc, _, err = run_captured(train_script, argv)
        assert rc == 0, err[-2000:]
        found[kind] = root / "logs" / kind
    return found


@pytest.mark.parametrize("kind", ["lora", "full"])
def test_final_carries_the_sampling_settings_of_the_run(runs, kind):
    run = runs[kind]
    config = json.loads((run / "config.json").read_text())
    written = json.loads((run / "final" / MODEL_SAMPLING_FILE).read_text())
    s = config["sample"]
    assert written == {
        "num_steps": s["eval_num_steps"],
        "guidance_scale": s["guidance_scale"],
        "max_sequence_length": s["max_sequence_length"],
        "resolution": s["resolution"],
        "kernel": "flow_grpo",  # the config's "" resolved: SD3's default kernel
        "negative_prompt": s["negative_prompt"],
        "num_frames": s["num_frames"],
    }
    assert (written["num_steps"], written["guidance_scale"], written["resolution"]) == (EVAL_STEPS, GUIDANCE, 32)
    assert set(written) <= set(SAMPLING_KEYS)  # the schema of a shipped model's sampling.json
    manifest = json.loads((run / "final" / "ddpo_grpo_final.json").read_text())
    assert manifest["kind"] == kind and "sampling" not in manifest  # one file holds the settings


def _bare_copy(runs, kind, tmp_path) -> Path:
    """final/ copied to a directory with no run beside it."""
    copy = tmp_path / "elsewhere" / "model"
    shutil.copytree(runs[kind] / "final", copy)
    return copy


@pytest.mark.parametrize("kind", ["lora", "full"])
def test_sample_on_a_moved_copy_of_final_uses_the_runs_settings(runs, kind, tmp_path):
    copy = _bare_copy(runs, kind, tmp_path)
    (tmp_path / "p.txt").write_text("a red circle\n")
    argv = ["--model", str(copy), "--prompts", str(tmp_path / "p.txt"), "--out", str(tmp_path / "out")]
    rc, out, err = run_captured(load_script("sample"), [*argv, "--device", "cpu"])
    assert rc == 0, err[-2000:]
    line = next(x for x in out.splitlines() if x.startswith("sampling settings:"))
    assert f"num_steps={EVAL_STEPS} (run)" in line and f"guidance_scale={GUIDANCE} (run)" in line, line
    assert f"resolution={RESOLUTION} (run)" in line and "kernel='flow_grpo' (run)" in line, line
    assert line.endswith(f"run settings from {copy / MODEL_SAMPLING_FILE}"), line
    with Image.open(tmp_path / "out" / "00000.png") as im:
        assert im.size == (RESOLUTION, RESOLUTION)


def test_evaluate_on_a_moved_copy_of_final_uses_the_runs_settings(runs, tmp_path):
    copy = _bare_copy(runs, "lora", tmp_path)
    argv = ["--model", str(copy), "--limit", "2", "--out", str(tmp_path / "eval"), "--device", "cpu"]
    rc, out, err = run_captured(load_script("evaluate"), argv)
    assert rc == 0, err[-2000:]
    sampling = json.loads((tmp_path / "eval" / "eval.json").read_text())["sampling"]
    assert sampling == {
        **json.loads((copy / MODEL_SAMPLING_FILE).read_text()),
        "image_guidance_scale": None,
        "guidance_scale_2": None,
    }
    assert sampling["num_steps"] == EVAL_STEPS and sampling["guidance_scale"] == GUIDANCE
    assert f"run settings from {copy / MODEL_SAMPLING_FILE}" in out


# ---- resuming a run saved by an older version ------------------------------------------------------------------


def test_a_run_saved_by_an_older_version_resumes_with_resume_from_alone(runs, tmp_path):
    """config.json without fields added since (eval.hacking_hold_z, train.adv_clip_max: the code before this fix
    stopped with an AttributeError) and with fields since removed (a section's and a top-level one): the run
    continues, the missing fields at their defaults, the others named and dropped."""
    run = tmp_path / "old"
    shutil.copytree(runs["lora"], run)
    saved = json.loads((run / "config.json").read_text())
    del saved["eval"]["hacking_hold_z"], saved["train"]["adv_clip_max"]  # (both at base's default in this run)
    saved["sample"]["old_knob"] = 3
    saved["legacy_flag"] = True
    (run / "config.json").write_text(json.dumps(saved))
    argv = ["train.py", f"--config.resume_from={run}", "--config.num_epochs=2", "--config.logging.progress=False"]
    rc, out, err = run_captured(train_script, argv)
    assert rc == 0, err[-2000:]
    source = run / "config.json"
    added = "eval.hacking_hold_z, train.adv_clip_max"
    assert f"fields added since this run was saved take their defaults ({source}): {added}\n" in out
    assert f"saved fields this version no longer has, ignored ({source}): sample.old_knob, legacy_flag\n" in out
    assert "continuing at epoch 1" in out
    now = json.loads((run / "config.json").read_text())
    assert now["eval"]["hacking_hold_z"] == 1.0 and now["train"]["adv_clip_max"] == 5.0
    assert "old_knob" not in now["sample"] and "legacy_flag" not in now
    assert [json.loads(r)["epoch"] for r in (run / "metrics.jsonl").read_text().splitlines()] == [0, 1]


def test_a_deprecated_field_is_kept_and_named_a_dict_field_is_one_value():
    """A saved deprecated name (config_checks.DEPRECATED: still a field of this version) stays, and the start-up's
    deprecation line names its replacement; a dict-valued field is one value (no default reward joins reward.fns)."""
    from ml_collections import ConfigDict

    from ddpo_grpo.config_checks import deprecations
    from ddpo_grpo.run_dir import upgrade_saved

    out = io.StringIO()
    saved = {"sample": {"sde_type": "dance"}, "reward": {"fns": {"mine": 1.0}}}
    defaults = {"sample": {"kernel": "", "sde_type": None, "eta": None}, "reward": {"fns": {"jpeg": 1.0}}, "seed": 0}
    upgraded = upgrade_saved(saved, defaults, "config.json", out)
    assert upgraded == {
        "sample": {"kernel": "", "sde_type": "dance", "eta": None},
        "reward": {"fns": {"mine": 1.0}},
        "seed": 0,
    }
    assert out.getvalue() == (
        "fields added since this run was saved take their defaults (config.json): sample.kernel, sample.eta, seed\n"
    )
    assert [line.split(" is ")[0] for line in deprecations(ConfigDict(upgraded))] == [
        "deprecated: sample.sde_type='dance'"
    ]
