"""scripts/sample.py (the CLI contract): PNGs + index.jsonl from a pipeline dir or a run's output."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import load_script
from tests.entry_points_kit import checkout_entry_points  # noqa: F401  (a fixture: the checkout's plug-ins)

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "sample.py"
PROMPTS = ["a red circle", "a blue square", "a green triangle"]
FAST = ["--resolution", "32", "--num_steps", "4", "--max_sequence_length", "8", "--device", "cpu"]


sample_script = load_script("sample")


pytestmark = pytest.mark.usefixtures("one_thread", "checkout_entry_points")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from ddpo_grpo.tiny import build_tiny_sd, build_tiny_sd3

    root = tmp_path_factory.mktemp("models")
    build_tiny_sd3(root / "sd3")
    build_tiny_sd(root / "sd")
    return {"sd3": root / "sd3", "sd": root / "sd"}


@pytest.fixture(scope="module")
def prompts_txt(tmp_path_factory):
    path = tmp_path_factory.mktemp("prompts") / "prompts.txt"
    path.write_text("\n".join(PROMPTS) + "\n")
    return path


def _run(model, prompts, out, *extra, seed=0):
    rc = sample_script.main(
        ["--model", str(model), "--prompts", str(prompts), "--out", str(out), "--seed", str(seed), *FAST, *extra]
    )
    assert rc == 0
    return [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]


def _pixels(out, rows):
    return [np.asarray(Image.open(out / r["file"])) for r in rows]


@pytest.mark.parametrize("family", ["sd3", "sd"])
def test_writes_pngs_and_index_deterministically(models, prompts_txt, tmp_path, family):
    out = tmp_path / "a" / "nested"  # --out is created, parents included
    rows = _run(models[family], prompts_txt, out, "--batch_size", "3")
    assert [r["prompt"] for r in rows] == PROMPTS
    assert [r["file"] for r in rows] == ["00000.png", "00001.png", "00002.png"]
    assert all("metadata" not in r and "index" not in r for r in rows)
    assert sorted(p.name for p in out.glob("*.png")) == [r["file"] for r in rows]
    for r in rows:
        with Image.open(out / r["file"]) as im:
            assert im.size == (32, 32) and im.mode == "RGB"

    # same seed, same batching -> byte-identical files
    again = _run(models[family], prompts_txt, tmp_path / "again", "--batch_size", "3")
    assert again == rows
    for r in rows:
        assert (out / r["file"]).read_bytes() == (tmp_path / "again" / r["file"]).read_bytes()

    # another batch size -> the same images: the noise seed depends only on --seed and the prompt index.
    # Batched float arithmetic may round differently, so allow one 8-bit level on a few pixels.
    other = _run(models[family], prompts_txt, tmp_path / "bs1", "--batch_size", "1")
    assert other == rows
    for a, b in zip(_pixels(out, rows), _pixels(tmp_path / "bs1", other)):
        diff = np.abs(a.astype(int) - b.astype(int))
        assert diff.max() <= 1 and (diff > 0).mean() < 0.01

    pixels = _pixels(out, rows)
    assert not np.array_equal(pixels[0], pixels[1])  # prompts get their own noise
    reseeded = _run(models[family], prompts_txt, tmp_path / "seed1", "--batch_size", "2", seed=1)
    assert not np.array_equal(pixels[0], _pixels(tmp_path / "seed1", reseeded)[0])


def test_lora_run_output_differs_from_base(models, prompts_txt, tmp_path):
    import torch

    from ddpo_grpo.policies import FINAL_MANIFEST, build_policy, load_pipeline

    base = models["sd3"].resolve()
    run_dir = tmp_path / "run"
    final = run_dir / "final"
    final.mkdir(parents=True)
    policy = build_policy(load_pipeline(str(base)), resolution=32, max_sequence_length=8)
    policy.add_lora(rank=4, alpha=4, target_modules=())
    with torch.no_grad():
        perturbed = 0
        for name, p in policy.denoiser.named_parameters():
            if "lora_B" in name:
                p.fill_(0.1)
                perturbed += 1
    assert perturbed > 0
    policy.save_lora(final, policy.denoiser)
    manifest = {"kind": "lora", "base_model": str(base), "pipeline_class": "StableDiffusion3Pipeline"}
    (final / FINAL_MANIFEST).write_text(json.dumps(manifest))

    base_rows = _run(base, prompts_txt, tmp_path / "base")
    run_rows = _run(run_dir, prompts_txt, tmp_path / "from_run")
    final_rows = _run(final, prompts_txt, tmp_path / "from_final")
    assert base_rows == run_rows == final_rows
    base_px = _pixels(tmp_path / "base", base_rows)
    run_px = _pixels(tmp_path / "from_run", run_rows)
    assert any(not np.array_equal(a, b) for a, b in zip(base_px, run_px))
    for a, b in zip(run_px, _pixels(tmp_path / "from_final", final_rows)):
        np.testing.assert_array_equal(a, b)


def test_jsonl_metadata_and_images_per_prompt(models, tmp_path):
    prompts = tmp_path / "rows.jsonl"
    prompts.write_text(
        json.dumps({"prompt": "a red circle", "tag": "single", "count": 1})
        + "\n"
        + json.dumps({"prompt": "a cat"})
        + "\n"
    )
    out = tmp_path / "out"
    rows = _run(models["sd"], prompts, out, "--images_per_prompt", "2", "--batch_size", "3")
    assert [(r["prompt"], r["file"], r["index"]) for r in rows] == [
        ("a red circle", "00000_0.png", 0),
        ("a red circle", "00000_1.png", 1),
        ("a cat", "00001_0.png", 0),
        ("a cat", "00001_1.png", 1),
    ]
    assert rows[0]["metadata"] == rows[1]["metadata"] == {"tag": "single", "count": 1}
    assert "metadata" not in rows[2]
    assert all((out / r["file"]).is_file() for r in rows)
    px = _pixels(out, rows)
    assert not np.array_equal(px[0], px[1])  # two images of one prompt get different noise


def test_stochastic_sampling_is_reproducible(models, prompts_txt, tmp_path):
    a = _run(models["sd3"], prompts_txt, tmp_path / "a", "--noise_level", "0.7")
    b = _run(models["sd3"], prompts_txt, tmp_path / "b", "--noise_level", "0.7")
    ode = _run(models["sd3"], prompts_txt, tmp_path / "ode")
    for x, y in zip(_pixels(tmp_path / "a", a), _pixels(tmp_path / "b", b)):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(_pixels(tmp_path / "a", a)[0], _pixels(tmp_path / "ode", ode)[0])


def test_clear_errors(models, prompts_txt, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        sample_script.main(
            ["--model", str(tmp_path / "missing"), "--prompts", str(prompts_txt), "--out", str(tmp_path / "o")]
        )
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--model" in err and "missing" in err

    (tmp_path / "not_a_model").mkdir()
    with pytest.raises(SystemExit):
        sample_script.main(
            ["--model", str(tmp_path / "not_a_model"), "--prompts", str(prompts_txt), "--out", str(tmp_path / "o")]
        )
    assert "--model" in capsys.readouterr().err

    empty = tmp_path / "empty.txt"
    empty.write_text("\n# only a comment\n")
    with pytest.raises(SystemExit) as exc:
        sample_script.main(["--model", str(models["sd"]), "--prompts", str(empty), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--prompts" in err and "no prompts" in err
    assert not (tmp_path / "o").exists()


def test_cli_subprocess_smoke(models, prompts_txt, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    out = tmp_path / "cli_out"
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--model",
        str(models["sd3"]),
        "--prompts",
        str(prompts_txt),
        "--out",
        str(out),
        "--seed",
        "3",
        *FAST,
    ]
    result = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]
    assert [r["prompt"] for r in rows] == PROMPTS
    assert all((out / r["file"]).is_file() for r in rows)


# ------------------------------------------------------------------ motion pipelines


@pytest.fixture(scope="module")
def tiny_mdm(tmp_path_factory):
    """A tiny random MotionWorld pipeline (the shipped MDM's architecture, 24 frames × 263 features)."""
    from worlds.motion.tiny import build_tiny_mdm

    path = tmp_path_factory.mktemp("motion") / "mdm"
    build_tiny_mdm(path)
    return path


def test_motion_pipeline_writes_npy_gif_and_filmstrip(tiny_mdm, tmp_path):
    prompts = tmp_path / "motion.jsonl"
    rows_in = [
        {"prompt": "a person jumps twice then waves both hands", "task": "sequence"},
        {"prompt": "a person walks forward while raising the left hand"},
    ]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows_in))
    out = tmp_path / "motions"
    argv = [
        "--model",
        str(tiny_mdm),
        "--prompts",
        str(prompts),
        "--out",
        str(out),
        "--num_steps",
        "3",
        "--guidance_scale",
        "2.5",
        "--kernel",
        "ddim",
        "--device",
        "cpu",
    ]
    assert sample_script.main(argv) == 0
    rows = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]
    assert [(r["prompt"], r["file"], r["gif"], r["png"]) for r in rows] == [
        (rows_in[0]["prompt"], "00000.npy", "00000.gif", "00000.png"),
        (rows_in[1]["prompt"], "00001.npy", "00001.gif", "00001.png"),
    ]
    assert rows[0]["metadata"] == {"task": "sequence"} and "seed" in rows[0]
    motion = np.load(out / "00000.npy")
    assert motion.dtype == np.float32 and motion.shape == (24, 263) and np.isfinite(motion).all()
    with Image.open(out / "00000.gif") as gif:
        assert gif.n_frames == 24  # recovered joints: one frame per feature frame
    with Image.open(out / "00000.png") as strip:
        assert strip.mode == "RGB" and strip.width > strip.height
    # deterministic (noise level 0, seeds from (--seed, prompt index)), denormalised features
    again = tmp_path / "again"
    assert sample_script.main([*argv[:5], str(again), *argv[6:]]) == 0
    np.testing.assert_array_equal(np.load(again / "00001.npy"), np.load(out / "00001.npy"))
    # the files hold what the policy decodes (denormalised features), the very samples evaluation draws
    from ddpo_grpo.evaluation import evaluate
    from ddpo_grpo.policies import build_policy, load_pipeline

    policy = build_policy(load_pipeline(str(tiny_mdm)), resolution=0, kernel="ddim")
    _, decoded, _ = evaluate(policy, rows_in, None, num_steps=3, guidance_scale=2.5)
    np.testing.assert_allclose(np.stack([np.load(out / r["file"]) for r in rows]), decoded.numpy(), atol=1e-5)


def test_motion_kernel_flag_is_checked(models, tiny_mdm, prompts_txt, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        sample_script.main(
            [
                "--model",
                str(models["sd"]),
                "--prompts",
                str(prompts_txt),
                "--out",
                str(tmp_path / "o"),
                "--kernel",
                "cps",  # a flow kernel: SD takes ddim / ddpm
                *FAST,
            ]
        )
    assert exc.value.code == 2 and "--kernel 'cps'" in capsys.readouterr().err


def test_a_models_recommended_settings_are_used_unless_a_flag_is_given(tiny_mdm, tmp_path, capsys):
    """A pipeline directory's sampling.json (ddpo_grpo/sampling_cli.py) gives the settings no flag gives, and the
    settings line names them as the model's: the samples equal those drawn with the same settings as flags."""
    import shutil

    model = tmp_path / "mdm"
    shutil.copytree(tiny_mdm, model)
    (model / "sampling.json").write_text(json.dumps({"kernel": "ddim", "num_steps": 3, "guidance_scale": 2.5}))
    (tmp_path / "p.txt").write_text("a person walks forward\n")
    base = ["--model", str(model), "--prompts", str(tmp_path / "p.txt"), "--device", "cpu"]
    assert sample_script.main([*base, "--out", str(tmp_path / "model")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("sampling settings:"))
    assert "num_steps=3 (model), guidance_scale=2.5 (model)" in line and "kernel='ddim' (model)" in line
    assert line.endswith(f"model settings from {model / 'sampling.json'}")
    flags = ["--kernel", "ddim", "--num_steps", "3", "--guidance_scale", "2.5"]
    assert sample_script.main([*base, "--out", str(tmp_path / "flags"), *flags]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "model" / "00000.npy"), np.load(tmp_path / "flags" / "00000.npy"))
    # a flag wins over the model's setting
    assert sample_script.main([*base, "--out", str(tmp_path / "two"), "--num_steps", "2"]) == 0
    assert "num_steps=2 (flag), guidance_scale=2.5 (model)" in capsys.readouterr().out
    assert not np.array_equal(np.load(tmp_path / "two" / "00000.npy"), np.load(tmp_path / "model" / "00000.npy"))


def test_a_bad_sampling_json_is_one_line(tiny_mdm, tmp_path, capsys):
    import shutil

    model = tmp_path / "mdm"
    shutil.copytree(tiny_mdm, model)
    (model / "sampling.json").write_text(json.dumps({"steps": 20}))
    (tmp_path / "p.txt").write_text("a person walks forward\n")
    with pytest.raises(SystemExit) as exc:
        sample_script.main(["--model", str(model), "--prompts", str(tmp_path / "p.txt"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "sampling.json must be a JSON object of sampling settings" in err
    assert "unknown: ['steps']" in err and not (tmp_path / "o").exists()


def test_the_shipped_models_carry_their_worlds_evaluation_settings():
    """Each shipped pipeline's sampling.json holds the settings its world's recipes evaluate with (config/*.py), and
    the package data ships it."""
    from config.edit import get_config as edit_config
    from config.motion import get_config as motion_config
    from config.restore import get_config as restore_config
    from config.shapes import get_config as shapes_config
    from ddpo_grpo.sampling_cli import MODEL_SAMPLING_FILE, model_sampling_settings

    def expected(config, keys):
        s = config.sample
        named = {"num_steps": s.eval_num_steps, "guidance_scale": s.guidance_scale, "kernel": s.kernel}
        named |= {"resolution": s.resolution, "max_sequence_length": s.max_sequence_length}
        named["image_guidance_scale"] = s.image_guidance_scale
        return {k: named[k] for k in keys}

    motion, shapes, restore = motion_config(), shapes_config(), restore_config()
    cases = {
        "worlds/motion/models/mdm": expected(motion, ["kernel", "num_steps", "guidance_scale"]),
        "worlds/shapes/models/sd": expected(
            shapes, ["num_steps", "guidance_scale", "resolution", "max_sequence_length"]
        ),
        "worlds/shapes/models/sd3": expected(
            shapes, ["num_steps", "guidance_scale", "resolution", "max_sequence_length"]
        ),
        "worlds/shapes_i2i/models/ip2p": expected(
            restore, ["num_steps", "guidance_scale", "image_guidance_scale", "resolution"]
        ),
    }
    for model, settings in cases.items():
        found, source = model_sampling_settings(str(REPO / model))
        assert found == settings and source == str(REPO / model / MODEL_SAMPLING_FILE), model
    i2i = ["num_steps", "guidance_scale", "image_guidance_scale", "resolution"]
    assert expected(edit_config(), i2i) == cases["worlds/shapes_i2i/models/ip2p"]  # the editing recipes' too
    assert motion.sample.kernel == "ddim" and cases["worlds/motion/models/mdm"]["num_steps"] == 20
    pyproject = (REPO / "pyproject.toml").read_text()
    for world in ("shapes", "motion", "shapes_i2i"):
        assert re.search(rf'"worlds\.{world}" = \[[^\]]*"models/\*/\*\.json"', pyproject), world
