"""ddpo_grpo/evaluation.py and scripts/evaluate.py: deterministic evaluation by any reward, per group.

The scoring path is checked with the ShapesWorld judge (the ``shapes`` reward) on clean renders (strict 1
on every task) and on renders of the wrong prompts (lower), and with a world-free reward (its score as
the metric, groups from the rows); the sampling path with a stand-in sampler (seeds, noise level,
batching, order); the script end to end on the tiny random pipelines (a random model scores ~0: only
the mechanics are checked there).
"""

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from ddpo_grpo import rollout as rollout_lib
from ddpo_grpo.evaluation import eval_items, evaluate, image_seed, score
from ddpo_grpo.image_grids import save_grid
from ddpo_grpo.policies import FINAL_MANIFEST
from ddpo_grpo.prompts import load_prompts
from reward_models import load_reward
from tests.conftest import load_script
from tests.entry_points_kit import checkout_entry_points  # noqa: F401  (a fixture: the checkout's plug-ins)
from worlds.shapes import TASKS, render_prompt

REPO = Path(__file__).resolve().parents[1]
FAST = ["--resolution", "32", "--num_steps", "3", "--max_sequence_length", "8", "--device", "cpu"]


evaluate_script = load_script("evaluate")


pytestmark = pytest.mark.usefixtures("one_thread", "checkout_entry_points")


def _rows_per_task(n: int) -> list[dict]:
    """The first ``n`` shapes_test rows of each task, task by task."""
    rows = load_prompts("shapes_test")
    return [r for task in TASKS for r in [x for x in rows if x["task"] == task][:n]]


def _as_tensor(images: list[np.ndarray]) -> torch.Tensor:
    """uint8 [H, W, 3] arrays -> float [N, 3, H, W] in [0, 1], as the sampler returns images."""
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).float() / 255.0


JUDGE = load_reward("shapes", score="strict")


def score_images(images, rows):
    """The ShapesWorld judge's evaluation metrics of uint8 renders (or a float tensor), grouped by task."""
    images = images if isinstance(images, torch.Tensor) else _as_tensor(list(images))
    rows = [r if isinstance(r, dict) else {"prompt": r} for r in rows]
    return score(images, rows, JUDGE, group_by="task")


@pytest.fixture(scope="module")
def mixed_prompts(tmp_path_factory):
    """A .jsonl of 8 shapes_test rows, 2 per task (metadata included)."""
    path = tmp_path_factory.mktemp("prompts") / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows_per_task(2)))
    return path


# ------------------------------------------------------------------ scoring (no model)


def test_clean_renders_score_one_and_wrong_renders_lower():
    rows = _rows_per_task(3)
    renders = [render_prompt(r, seed=i) for i, r in enumerate(rows)]  # uint8 [64, 64, 3] each
    metrics = score_images(_as_tensor(renders), rows)
    assert metrics["eval/strict"] == metrics["eval/partial"] == 1.0
    for task in TASKS:
        assert metrics[f"eval/strict/{task}"] == metrics[f"eval/partial/{task}"] == 1.0
        assert metrics[f"eval/num_samples/{task}"] == 3
    assert metrics["eval/num_samples"] == 12 and metrics["eval/not_applicable"] == 0
    assert [k.split("/")[-1] for k in metrics if k.startswith("eval/num_samples/")] == list(TASKS)  # first-seen order

    big = [np.repeat(np.repeat(im, 2, axis=0), 2, axis=1) for im in renders]  # a 128-px generator's output
    assert score_images(_as_tensor(big), rows)["eval/strict"] == 1.0  # the judge shrinks to 64 px

    wrong = score_images(renders[1:] + renders[:1], rows)  # each image judged against the next row's prompt
    assert wrong["eval/strict"] < 0.5 and wrong["eval/partial"] < 1.0
    for task in TASKS:
        assert wrong[f"eval/strict/{task}"] < 1.0
        assert 0.0 <= wrong[f"eval/partial/{task}"] < 1.0


def test_prompts_outside_the_grammar_are_not_applicable():
    white = np.full((64, 64, 3), 255, dtype=np.uint8)
    rows = [
        {"prompt": "a cat"},
        {"prompt": "a red circle"},  # no metadata: the prompt is parsed
        "a blue square",  # a bare prompt string
        {"prompt": "a red circle", "task": "bogus", "objects": []},  # broken metadata
    ]
    images = [white, render_prompt("a red circle", seed=0), render_prompt("a blue square", seed=1), white]
    m = score_images(images, rows)
    assert m["eval/num_samples"] == 4 and m["eval/not_applicable"] == 2
    assert m["eval/strict"] == m["eval/strict/single_object"] == 1.0
    assert m["eval/num_samples/single_object"] == 2
    assert not any(k.startswith("eval/strict/") and k != "eval/strict/single_object" for k in m)

    none = score_images([white], [{"prompt": "a cat"}])
    assert math.isnan(none["eval/strict"]) and math.isnan(none["eval/partial"])
    assert math.isnan(none["eval/task_mean/strict"])
    assert none["eval/not_applicable"] == 1 and none["eval/num_samples"] == 1

    with pytest.raises(ValueError, match="2 samples for 1 rows"):
        score_images([white, white], [{"prompt": "a red circle"}])


def test_any_reward_scores_and_rows_give_the_groups():
    """A reward without per-sample info is evaluated by its score; groups come from the rows' field."""

    def brightness(samples, prompts, metadata):
        scores = samples.mean(dim=(1, 2, 3)).numpy()
        scores[[m.get("skip", False) for m in metadata]] = np.nan
        return scores, {"note": "batch diagnostics are not metrics"}

    samples = torch.stack([torch.full((3, 4, 4), v) for v in (0.0, 1.0, 0.5, 0.25, 0.75)])
    rows = [
        {"prompt": "a", "kind": "x"},
        {"prompt": "b", "kind": "x"},
        {"prompt": "c", "kind": "y"},
        {"prompt": "d", "kind": "y", "skip": True},
        {"prompt": "e"},
    ]
    m = score(samples, rows, brightness, group_by="kind")
    assert m["eval/score"] == pytest.approx((0.0 + 1.0 + 0.5 + 0.75) / 4)
    assert m["eval/score/x"] == 0.5 and m["eval/score/y"] == 0.5 and m["eval/num_samples/y"] == 1
    assert m["eval/kind_mean/score"] == 0.5  # groups x and y; the row without a field is in no group
    assert m["eval/not_applicable"] == 1 and m["eval/num_samples"] == 5
    assert "eval/note" not in m
    assert set(score(samples, rows, brightness)) == {"eval/score", "eval/num_samples", "eval/not_applicable"}


def test_task_mean_weights_tasks_equally():
    """eval/task_mean/* is the plain mean of the per-task accuracies, not of the images."""
    rows = [
        r
        for task in ("single_object", "position")
        for r in [x for x in load_prompts("shapes_test") if x["task"] == task][:3]
    ]
    rows = rows[:1] + rows[3:]  # 1 single-object row, 3 position rows
    right = [render_prompt(r, seed=0) for r in rows]
    images = right[:1] + [np.full_like(right[0], 255)] * 3  # the single object right, the positions blank
    m = score_images(images, rows)
    assert m["eval/strict/single_object"] == 1.0 and m["eval/strict/position"] == 0.0
    assert m["eval/strict"] == 0.25 and m["eval/task_mean/strict"] == 0.5


def test_eval_items_task_balanced():
    rows = _rows_per_task(3)[:3] + _rows_per_task(3)[3:5]  # 3 single-object rows, 2 counting rows
    assert eval_items(rows, per_prompt=2) == [(i, k) for i in range(5) for k in range(2)]
    items = eval_items(rows, per_group=4, group_by="task")
    # each task's rows in order, cycled; pass r uses sample index r: no (row, sample) pair repeats
    assert items == [(0, 0), (1, 0), (2, 0), (0, 1), (3, 0), (4, 0), (3, 1), (4, 1)]
    # per_prompt K with per_group N: N / K rows of each group, K consecutive samples each (pass@k's samples)
    items = eval_items(rows, per_prompt=2, per_group=4, group_by="task")
    assert items == [(0, 0), (0, 1), (1, 0), (1, 1), (3, 0), (3, 1), (4, 0), (4, 1)]
    items = eval_items(rows, per_prompt=2, per_group=8, group_by="task")  # 3 rows cycled: row 0 again, new seeds
    assert items[:8] == [(0, 0), (0, 1), (1, 0), (1, 1), (2, 0), (2, 1), (0, 2), (0, 3)]
    assert len(set(items)) == len(items) == 16
    with pytest.raises(ValueError, match="per_group must be >= 0"):
        eval_items(rows, per_group=-1, group_by="task")


# ------------------------------------------------------------------ sampling loop (stand-in sampler)


def test_evaluate_seeds_batches_and_scores(monkeypatch):
    calls = []

    def fake_sample_rollout(
        policy, model, rows, *, seeds, num_steps, guidance_scale, noise_level, negative_prompt, autocast, **kwargs
    ):
        calls.append(
            SimpleNamespace(
                model=model,
                seeds=list(seeds),
                num_steps=num_steps,
                guidance_scale=guidance_scale,
                noise_level=noise_level,
                negative_prompt=negative_prompt,
                kwargs=kwargs,
            )
        )
        # the "model" draws a perfect scene for its prompt, from its initial-noise seed
        return SimpleNamespace(samples=_as_tensor([render_prompt(r, seed=s) for r, s in zip(rows, seeds)]))

    monkeypatch.setattr(rollout_lib, "sample_rollout", fake_sample_rollout)
    denoiser = torch.nn.Linear(1, 1).train()
    policy = SimpleNamespace(denoiser=denoiser)
    rows = _rows_per_task(2)  # 8 prompts

    metrics, images, captions = evaluate(
        policy,
        rows,
        JUDGE,
        num_steps=5,
        guidance_scale=3.0,
        per_prompt=2,
        group_by="task",
        seed=7,
        batch_size=3,
        negative_prompt="blurry",
        max_samples=5,
    )
    assert [len(c.seeds) for c in calls] == [3, 3, 3, 3, 3, 1]
    assert [s for c in calls for s in c.seeds] == [image_seed(7, i, k) for i in range(8) for k in range(2)]
    assert all(c.noise_level == 0.0 and c.num_steps == 5 and c.guidance_scale == 3.0 for c in calls)
    assert all(c.negative_prompt == "blurry" and c.model is denoiser for c in calls)
    assert denoiser.training  # put in eval mode while sampling, restored afterwards

    assert metrics["eval/strict"] == 1.0 and metrics["eval/num_samples"] == 16
    assert all(metrics[f"eval/num_samples/{t}"] == 4 for t in TASKS)
    assert images.shape == (5, 3, 64, 64)  # only the first max_images are kept; all are scored
    assert captions == [rows[i]["prompt"] for i in (0, 0, 1, 1, 2)]
    expected = render_prompt(rows[1], seed=image_seed(7, 1, 1))
    np.testing.assert_array_equal((images[3] * 255).round().byte().permute(1, 2, 0).numpy(), expected)

    calls.clear()
    other = torch.nn.Linear(1, 1)
    metrics_other, images_all, _ = evaluate(
        policy, rows[:2], None, num_steps=2, guidance_scale=1.0, seed=7, model=other
    )
    assert all(c.model is other for c in calls) and images_all.shape[0] == 2 and metrics_other == {}
    assert [s for c in calls for s in c.seeds] == [image_seed(7, 0, 0), image_seed(7, 1, 0)]  # batch-independent seeds


def test_seed_function_is_shared_with_sample_script():
    assert load_script("sample").image_seed is image_seed


def test_save_grid(tmp_path):
    images = torch.rand(5, 3, 8, 8)
    path = tmp_path / "sub" / "grid.png"
    save_grid(images, [f"p{i}" for i in range(5)], str(path), nrow=2)
    with Image.open(path) as im:
        assert im.size == (2 * 130 + 2, 3 * 130 + 2) and im.mode == "RGB"  # 2 per row, 3 rows, 8-px images x16
        assert json.loads(im.text["captions"]) == [f"p{i}" for i in range(5)]
    assert [p.name for p in path.parent.iterdir()] == ["grid.png"]  # no temporary file left
    with pytest.raises(ValueError, match="captions"):
        save_grid(images, ["only one"], str(path))


# ------------------------------------------------------------------ the script on tiny random pipelines


def test_script_writes_eval_json_and_grid_deterministically(tiny_dirs, mixed_prompts, tmp_path, capsys):
    def run(out):
        argv = [
            "--model",
            tiny_dirs["sd3"],
            "--prompts",
            str(mixed_prompts),
            "--limit",
            "8",
            "--out",
            str(out),
            "--batch_size",
            "3",
            *FAST,
        ]
        assert evaluate_script.main(argv) == 0
        return json.loads((out / "eval.json").read_text())

    first = run(tmp_path / "a")
    metrics = first["metrics"]
    for task in TASKS:
        for key in ("strict", "partial"):
            assert 0.0 <= metrics[f"eval/{key}/{task}"] <= 1.0
        assert metrics[f"eval/num_samples/{task}"] == 2
    assert 0.0 <= metrics["eval/strict"] <= metrics["eval/partial"] <= 1.0
    assert metrics["eval/num_samples"] == 8 and metrics["eval/not_applicable"] == 0
    assert first["model"] == str(Path(tiny_dirs["sd3"]).resolve()) and first["num_prompts"] == 8
    assert first["args"]["limit"] == 8 and first["args"]["num_steps"] == 3 and first["resolution"] == 32

    with Image.open(tmp_path / "a" / "grid.png") as im:
        assert im.size == (6 + 8 * (160 + 6), 6 + 160 + 3 * 16 + 12)  # 8 tiles of 32 px enlarged 5x, one row, each
        # with its prompt and its shapes verdict under it (3 lines of 16 px: test_evaluate_grid.py)
        assert json.loads(im.text["captions"]) == [r["prompt"] for r in _rows_per_task(2)]
    table = capsys.readouterr().out
    assert "task" in table and "strict" in table and all(task in table for task in TASKS)

    assert run(tmp_path / "b")["metrics"] == metrics  # deterministic
    assert (tmp_path / "a" / "grid.png").read_bytes() == (tmp_path / "b" / "grid.png").read_bytes()


def test_script_default_prompts_limit_and_sd(tiny_dirs, tmp_path):
    out = tmp_path / "sd"
    assert evaluate_script.main(["--model", tiny_dirs["sd"], "--limit", "4", "--out", str(out), *FAST]) == 0
    data = json.loads((out / "eval.json").read_text())
    assert data["args"]["prompts"] == "shapes_test" and data["num_prompts"] == 4
    assert data["pipeline_class"] == "StableDiffusionPipeline"
    # shapes_test starts with its 3 single-object prompts, then counting
    assert data["metrics"]["eval/num_samples/single_object"] == 3 and data["metrics"]["eval/num_samples/counting"] == 1
    assert (out / "grid.png").is_file()


def test_default_out_and_clear_errors(tiny_dirs, tmp_path, capsys):
    assert evaluate_script.default_out(str(tmp_path)) == Path("eval") / tmp_path.name  # a pipeline: not inside it
    assert evaluate_script.default_out("org/some-model") == Path("eval") / "some-model"
    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "final" / FINAL_MANIFEST).write_text("{}")
    assert evaluate_script.default_out(str(run)) == evaluate_script.default_out(str(run / "final")) == run / "eval"

    with pytest.raises(SystemExit) as exc:
        evaluate_script.main(["--model", tiny_dirs["sd"], "--limit", "0", "--out", str(tmp_path / "o")])
    assert exc.value.code == 2 and "--limit" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        evaluate_script.main(["--model", str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2 and "--model" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "extra,words",
    [
        (["--guidance_scale", "nan"], ["--guidance_scale", "finite"]),
        (["--out", "{tmp}/a_file/inside"], ["--out", "is a file"]),
        (["--group_by", "colour"], ["--group_by 'colour'", "task"]),  # no row or reward label of that name
        (["--prompts", "{tmp}/outside.txt"], ["scored none", "--prompts"]),  # the judge applies to none of them
    ],
    ids=["nan guidance", "out under a file", "unknown group field", "reward scores nothing"],
)
def test_bad_input_is_refused_before_anything_is_written(tiny_dirs, mixed_prompts, tmp_path, capsys, extra, words):
    (tmp_path / "a_file").write_text("")
    (tmp_path / "outside.txt").write_text("a cat\na dog\n")
    extra = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    out = ["--out", str(tmp_path / "o")] if "--out" not in extra else []
    with pytest.raises(SystemExit) as exc:
        evaluate_script.main(["--model", tiny_dirs["sd3"], "--prompts", str(mixed_prompts), *out, *FAST, *extra])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and all(w in err for w in words), err
    assert not (tmp_path / "o").exists() and not (tmp_path / "a_file").is_dir()


def test_eval_table_rows_and_task_mean():
    from ddpo_grpo.report import eval_table

    rows = _rows_per_task(1)
    after = score_images([render_prompt(r, seed=0) for r in rows], rows)
    blank = [np.full((64, 64, 3), 255, np.uint8)] * len(rows)
    before = score_images(blank, rows)
    lines = eval_table(before, after, "task").splitlines()
    assert [line.split()[0] for line in lines] == ["task", *TASKS, "all", "task"]
    assert lines[-1].split()[:4] == ["task", "mean", "4", "0.000"] and lines[-1].split()[4] == "1.000"
    assert len(eval_table(None, after, "task").splitlines()) == len(lines)


# ------------------------------------------------------------------ a motion pipeline


def test_script_on_a_motion_pipeline_reports_judge_and_physics(tmp_path, capsys):
    """Defaults switch to MotionWorld (motion_test, strict motion_judge); physics metrics per task; set metrics slot."""
    from worlds.motion.tiny import build_tiny_mdm

    model = tmp_path / "mdm"
    build_tiny_mdm(model)
    out = tmp_path / "eval"
    argv = [
        "--model",
        str(model),
        "--out",
        str(out),
        "--per_group",
        "3",
        "--num_steps",
        "3",
        "--guidance_scale",
        "2.5",
        "--kernel",
        "ddim",
        "--device",
        "cpu",
    ]
    assert evaluate_script.main(argv) == 0
    data = json.loads((out / "eval.json").read_text())
    assert data["args"]["prompts"] == "motion_test" and data["args"]["reward"] == "motion_judge"
    metrics = data["metrics"]
    for task in ("simultaneous", "sequence"):
        assert metrics[f"eval/num_samples/{task}"] == 3 and 0.0 <= metrics[f"eval/strict/{task}"] <= 1.0
        for key in ("skate", "jerk", "penetration", "bone_drift", "physics"):
            assert math.isfinite(metrics[f"eval/{key}/{task}"])
    assert 0.0 <= metrics["eval/task_mean/physics"] <= 1.0
    assert isinstance(data["set_metrics"], dict)  # the text–motion evaluator's numbers, when installed
    with Image.open(out / "grid.png") as im:
        assert len(json.loads(im.text["captions"])) == 6
    table = capsys.readouterr().out
    assert "sequence" in table and "physics" in table
    with pytest.raises(SystemExit) as exc:
        evaluate_script.main(argv[:4] + ["--kernel", "euler"])
    assert exc.value.code == 2


def test_motion_table_with_standard_errors_and_compare(tmp_path, capsys):
    """A motion pipeline's eval.json "table": the HumanML3D set metrics, judge per task and physics, each with an SE,
    and with --compare base | model | paired difference (worlds/motion/table.py; self-pairing: test_motion_table)."""
    from worlds.motion.tiny import build_tiny_mdm

    model, other = tmp_path / "mdm", tmp_path / "mdm1"
    build_tiny_mdm(model)
    build_tiny_mdm(other, seed=1)
    args = ["--per_group", "0", "--limit", "3", "--per_prompt", "2", "--num_steps", "2", "--guidance_scale", "2.5"]
    args += ["--kernel", "ddim", "--device", "cpu", "--model", str(model), "--out", str(tmp_path / "ev")]
    assert evaluate_script.main([*args, "--compare", str(other)]) == 0
    rows = json.loads((tmp_path / "ev" / "eval.json").read_text())["table"]["rows"]
    for key in ("r_precision_top1", "r_precision_top3", "fid", "mm_dist", "diversity", "multimodality"):
        cells = rows[key]
        assert {"base", "model", "diff"} <= set(cells) and cells["model"]["se"] >= 0.0, key
        assert abs(cells["diff"]["value"] - (cells["model"]["value"] - cells["base"]["value"])) < 1e-9, key
    assert rows["multimodality"]["model"]["texts"] == 3  # two samples of each prompt
    for key in ("strict/task_mean", "partial/task_mean", "skate", "max_penetration", "floating", "jerk", "sane"):
        assert math.isfinite(rows[key]["model"]["value"]) and "diff" in rows[key], key
    assert rows["jerk"]["diff"]["value"] != 0.0 and rows["jerk"]["diff"]["se"] > 0.0
    assert {"bone_cv_thigh", "bone_cv_shin", "bone_cv_upper_arm", "bone_cv_max"} <= set(rows)
    printed = capsys.readouterr().out
    for label in ("R-precision top-1", "MM-Dist", "MultiModality", "floating (m)", "bone-length CV, shin", "± "):
        assert label in printed, label


# ------------------------------------------------------------------ several scorers, --compare


def test_script_several_rewards_and_paired_compare(tiny_dirs, mixed_prompts, tmp_path, capsys):
    """Two rewards score the same samples; --compare pairs the model with BASE on the same prompts and noises:
    against itself every difference is exactly 0, against another model the paired means are the two evaluations'."""
    base = ["--prompts", str(mixed_prompts), "--limit", "8", "--batch_size", "3", *FAST]
    rewards = ["--reward", "shapes", "--reward", "jpeg_compressibility"]

    def run(out, compare, *extra):
        argv = ["--model", tiny_dirs["sd3"], "--out", str(out), "--compare", compare, *rewards, *base, *extra]
        assert evaluate_script.main(argv) == 0
        return json.loads((out / "eval.json").read_text())

    same = run(tmp_path / "same", tiny_dirs["sd3"])
    assert set(same["scorers"]) == {"shapes", "jpeg_compressibility"}
    assert same["metrics"] == same["scorers"]["shapes"] and same["args"]["reward"] == "shapes,jpeg_compressibility"
    assert same["compare"]["scorers"] == same["scorers"]
    for name, metric in (("shapes", "strict"), ("shapes", "partial"), ("jpeg_compressibility", "score")):
        for cell in same["compare"]["paired"][name][metric].values():
            assert (cell["diff"], cell["up"], cell["down"]) == (0.0, 0, 0) and cell["se"] in (0.0, None)
    assert set(same["compare"]["paired"]["shapes"]["strict"]) == {*TASKS, "all", "task_mean"}
    printed = capsys.readouterr().out
    assert "paired difference (shapes strict), after − before, in points:" in printed
    assert (
        "paired difference (jpeg_compressibility score)" in printed and (tmp_path / "same" / "grid_base.png").is_file()
    )

    other = run(tmp_path / "other", tiny_dirs["sd"], "--reward_kwargs", '{"shapes": {"score": "partial"}}')
    jpeg = other["compare"]["paired"]["jpeg_compressibility"]["score"]
    assert jpeg["all"]["after"] == pytest.approx(other["scorers"]["jpeg_compressibility"]["eval/score"])
    assert jpeg["all"]["before"] == pytest.approx(other["compare"]["scorers"]["jpeg_compressibility"]["eval/score"])
    assert jpeg["all"]["diff"] == pytest.approx(jpeg["all"]["after"] - jpeg["all"]["before"])
    assert jpeg["all"]["n"] == 8 and jpeg["all"]["up"] + jpeg["all"]["down"] == 8 and jpeg["all"]["se"] > 0
    mean = jpeg["task_mean"]
    assert mean["diff"] == pytest.approx(np.mean([jpeg[t]["diff"] for t in TASKS]))
    assert mean["se"] == pytest.approx(math.sqrt(sum(jpeg[t]["se"] ** 2 for t in TASKS)) / 4)


def test_script_compares_two_scorers_on_the_same_images(tiny_dirs, mixed_prompts, tmp_path, capsys):
    """With several scorers of the same metrics (the judge and the independent detector), the first is paired with
    each other on the model's images, and with --compare their per-image gains are paired too (0 against itself)."""
    from worlds.shapes.detector import reward  # noqa: F401  (registers shapes_detector, as its entry point does)

    out = tmp_path / "two"
    argv = ["--model", tiny_dirs["sd3"], "--out", str(out), "--compare", tiny_dirs["sd3"]]
    argv += ["--reward", "shapes,shapes_detector", "--prompts", str(mixed_prompts), "--limit", "8", *FAST]
    assert evaluate_script.main(argv) == 0
    got = json.loads((out / "eval.json").read_text())
    cell = got["between_scorers"]["shapes_detector"]["strict"]["all"]
    judged, detected = got["scorers"]["shapes"]["eval/strict"], got["scorers"]["shapes_detector"]["eval/strict"]
    assert cell["after"] == pytest.approx(judged) and cell["before"] == pytest.approx(detected)
    assert cell["diff"] == pytest.approx(judged - detected)
    for table in got["compare"]["between_scorers"]["shapes_detector"].values():
        assert all(c["diff"] == 0.0 and (c["up"], c["down"]) == (0, 0) for c in table.values())
    printed = capsys.readouterr().out
    assert "strict, shapes − shapes_detector on the same images" in printed and "after = " not in printed


def test_reward_flags_are_checked(tiny_dirs, tmp_path, capsys):
    argv = ["--model", tiny_dirs["sd3"], "--prompts", "shapes_test", "--out", str(tmp_path / "o"), *FAST]
    for extra, message in (
        (["--reward", "shapes,,jpeg_compressibility"], "empty reward name"),
        (
            ["--reward", "shapes,jpeg_compressibility", "--reward_kwargs", '{"score": "partial"}'],
            "reward name -> kwargs",
        ),
        (["--compare", str(tmp_path / "missing")], "--compare"),
    ):
        with pytest.raises(SystemExit) as exc:
            evaluate_script.main(argv + extra)
        assert exc.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
