"""scripts/evaluate.py and scripts/sample.py on a language model: pass@k (Chen et al.'s estimator, checked against
enumerating the subsets), response lengths, the paired comparison against a base, greedy decoding, index.jsonl of
responses, and a LoRA run's and a full run's final/ evaluated with the run's own settings — on a tiny Qwen2 built from
a config dict (random weights: the mechanics, not the skill, are checked)."""

import itertools
import json
import math
import os
import re
from pathlib import Path

import pytest

from ddpo_grpo.pass_at_k import default_ks, pass_at_k, per_prompt
from tests.conftest import load_script
from tests.lm_kit import build_tiny_lm, write_rows

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
evaluate_script, sample_script, train_script = (load_script(n) for n in ("evaluate", "sample", "train"))
pytestmark = pytest.mark.usefixtures("one_thread")
#: a reward a random model passes about half the time: its response has an even number of characters
EVEN = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return float(len(solution_str) % 2 == 0)\n"
SHORT = ["--max_prompt_length", "16", "--max_response_length", "6", "--device", "cpu"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("lm_eval")
    (root / "even.py").write_text(EVEN)
    return {
        "model": build_tiny_lm(root / "model"),
        "other": build_tiny_lm(root / "other", seed=1),
        "rows": write_rows(root / "rows.json", 5),
        "reward": f"{root / 'even.py'}:compute_score",
        "root": root,
    }


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    """The fraction of the k-subsets of n samples (c of them passing) that hold a passing sample."""
    subsets = list(itertools.combinations([1] * c + [0] * (n - c), k))
    return sum(any(s) for s in subsets) / len(subsets)


def test_pass_at_k_is_exact_on_hand_cases_and_equals_the_subset_average():
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 3 of the 6 pairs hold the one pass
    assert pass_at_k(4, 0, 2) == 0.0 and pass_at_k(4, 4, 2) == 1.0 and pass_at_k(4, 3, 2) == 1.0
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # k = 1: the pass rate
    for n in range(1, 8):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(brute_pass_at_k(n, c, k), abs=1e-12), (n, c, k)
    with pytest.raises(ValueError, match="1 <= k <= n"):
        pass_at_k(2, 1, 3)
    assert default_ks(8) == [1, 2, 4, 8] and default_ks(6) == [1, 2, 4, 6] and default_ks(1) == [1]


def test_per_prompt_counts_scored_samples_only():
    nan = math.nan
    per = per_prompt([1, 0, 0, 0, nan, 1, 1, 0], [0, 0, 0, 0, 1, 1, 1, 1], [1, 2, 4])
    assert (per.prompts, per.n, per.c) == ([0, 1], [4, 3], [1, 2])
    assert per.values["pass@2"] == pytest.approx([0.5, 1.0])
    assert per.values["pass@1"] == pytest.approx([0.25, 2 / 3])
    assert per.values["pass@4"][0] == 1.0 and math.isnan(per.values["pass@4"][1])  # prompt 1: n = 3 < k


def evaluate(world, out, *extra, model=None):
    argv = ["--model", str(model or world["model"]), "--prompts", str(world["rows"]), "--out", str(out)]
    return evaluate_script.main([*argv, "--reward", world["reward"], *SHORT, *extra])


def test_evaluate_reports_pass_at_k_and_lengths_and_writes_them(world, tmp_path, capsys):
    assert evaluate(world, tmp_path / "eval", "--per_prompt", "4") == 0
    printed = capsys.readouterr().out
    assert re.search(r"group\s+prompts\s+pass@1\s+pass@2\s+pass@4\s+length\s+truncated", printed)
    result = json.loads((tmp_path / "eval" / "eval.json").read_text())
    text = result["text"]
    assert text["ks"] == [1, 2, 4] and result["sampling"]["max_response_length"] == 6
    responses = [json.loads(line) for line in (tmp_path / "eval" / "responses.jsonl").read_text().splitlines()]
    assert len(responses) == 20 and not (tmp_path / "eval" / "grid.png").exists()
    for r in responses:  # the reward, the pass and the length as written
        assert r["passed"] == (len(r["response"]) % 2 == 0) and 1 <= r["tokens"] <= 6
    passed = [sum(r["passed"] for r in responses if r["row"] == i) for i in range(5)]
    assert 0 < sum(passed) < 20  # (a random model passes this reward about half the time: a real check)
    for k in (1, 2, 4):
        expected = sum(brute_pass_at_k(4, c, k) for c in passed) / 5
        assert text["summary"]["all"][f"pass@{k}"] == pytest.approx(expected)
        assert text["summary"]["arithmetic"][f"pass@{k}"] == pytest.approx(expected)  # the rows' one data_source
    assert text["summary"]["all"]["pass@1"] == pytest.approx(result["metrics"]["eval/score"])  # = mean over samples
    assert text["summary"]["all"]["length"] == pytest.approx(sum(r["tokens"] for r in responses) / 20)
    assert [p["passed"] for p in text["per_prompt"]] == passed


def test_a_model_compared_with_itself_differs_by_zero(world, tmp_path, capsys):
    assert evaluate(world, tmp_path / "eval", "--per_prompt", "2", "--compare", str(world["model"])) == 0
    text = json.loads((tmp_path / "eval" / "eval.json").read_text())["text"]
    assert set(text["compare"]["paired"]) == {"pass@1", "pass@2", "length", "truncated"}
    for metric, by_group in text["compare"]["paired"].items():
        assert by_group["all"]["diff"] == 0.0 and by_group["all"]["n"] == 5, metric
    printed = capsys.readouterr().out
    assert "paired difference (pass@1, per prompt), model − base, in points" in printed


def test_compare_pairs_per_prompt_with_the_same_seeds(world, tmp_path):
    assert evaluate(world, tmp_path / "a", "--per_prompt", "2", model=world["other"]) == 0
    assert evaluate(world, tmp_path / "b", "--per_prompt", "2", "--compare", str(world["model"])) == 0
    assert (
        evaluate(world, tmp_path / "c", "--per_prompt", "2", "--compare", str(world["model"]), model=world["other"])
        == 0
    )
    alone = json.loads((tmp_path / "a" / "eval.json").read_text())["text"]["per_prompt"]
    base = json.loads((tmp_path / "b" / "eval.json").read_text())["text"]["per_prompt"]
    both = json.loads((tmp_path / "c" / "eval.json").read_text())["text"]
    diffs = [a["pass@1"] - b["pass@1"] for a, b in zip(alone, base)]
    assert both["compare"]["paired"]["pass@1"]["all"]["diff"] == pytest.approx(sum(diffs) / len(diffs))


def test_greedy_ignores_seed_and_temperature(world, tmp_path):
    texts = []
    for i, extra in enumerate((["--seed", "0"], ["--seed", "5", "--temperature", "3"])):
        assert evaluate(world, tmp_path / str(i), "--greedy", *extra) == 0
        lines = (tmp_path / str(i) / "responses.jsonl").read_text().splitlines()
        texts.append([json.loads(line)["response"] for line in lines])
    assert texts[0] == texts[1]
    assert evaluate(world, tmp_path / "s", "--temperature", "3") == 0
    sampled = [json.loads(line)["response"] for line in (tmp_path / "s" / "responses.jsonl").read_text().splitlines()]
    assert sampled != texts[0]


def test_sample_writes_one_response_per_prompt_as_evaluate_draws_them(world, tmp_path):
    out = tmp_path / "samples"
    argv = ["--model", str(world["model"]), "--prompts", str(world["rows"]), "--out", str(out), "--seed", "3"]
    assert sample_script.main([*argv, *SHORT]) == 0
    rows = [json.loads(line) for line in (out / "index.jsonl").read_text().splitlines()]
    prompts = [r["prompt"] for r in json.loads(world["rows"].read_text())]
    assert [r["prompt"] for r in rows] == prompts and sorted(p.name for p in out.iterdir()) == ["index.jsonl"]
    assert all(isinstance(r["response"], str) and 1 <= r["tokens"] <= 6 and "file" not in r for r in rows)
    assert rows[0]["metadata"] == {"ground_truth": "0", "data_source": "arithmetic"}
    assert evaluate(world, tmp_path / "eval", "--seed", "3", "--batch_size", "2") == 0
    lines = (tmp_path / "eval" / "responses.jsonl").read_text().splitlines()
    assert [json.loads(line)["response"] for line in lines] == [r["response"] for r in rows]


@pytest.mark.parametrize(
    "extra, words",
    [
        (
            ["--per_prompt", "2", "--pass_k", "3"],
            r"--pass_at '3': every k must be in 1\.\.2 \(the samples per prompt\)",
        ),
        (["--per_prompt", "2", "--greedy"], "--greedy draws one response per prompt"),
        (["--max_response_length", "200"], "--max_prompt_length / --max_response_length: .*context of 128"),
        (["--temperature", "0"], "--temperature: sample.temperature=0.0 must be > 0"),
        (["--max_prompt_length", "2"], "--prompts .*tokens > sample.max_prompt_length=2"),
    ],
)
def test_bad_input_is_one_line_and_nothing_is_written(world, tmp_path, capsys, extra, words):
    with pytest.raises(SystemExit) as exit_info:
        evaluate(world, tmp_path / "eval", *extra)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err and re.search(words, err), err[-1500:]
    assert not (tmp_path / "eval").exists()


def train(tmp_path, model, rows, *extra) -> Path:
    """A two-step LM run (scripts/train.py in this process): its directory."""
    reward = tmp_path / "even.py"
    reward.write_text(EVEN)
    argv = [
        "scripts/train.py",
        "--config",
        str(ROOT / "config" / "llm.py") + ":grpo",
        f"--config.pretrained.model={model}",
        f"--config.prompts.source={rows}",
        f"--config.reward.sources={{'even': '{reward}:compute_score'}}",
        "--config.reward.fns={'even': 1.0}",
        "--config.num_epochs=1",
        "--config.sample.batch_size=2",
        "--config.sample.group_size=2",
        "--config.sample.num_batches_per_epoch=1",
        "--config.train.batch_size=2",
        "--config.train.gradient_accumulation_steps=1",
        "--config.sample.max_prompt_length=16",
        "--config.sample.max_response_length=5",
        "--config.sample.temperature=0.7",
        "--config.mixed_precision=no",
        "--config.distributed.strategy=ddp",
        "--config.train.gradient_checkpointing=False",
        "--config.train.learning_rate=1e-2",
        f"--config.logdir={tmp_path / 'logs'}",
        "--config.run_name=run",
        "--config.logging.progress=False",
        *extra,
    ]
    assert train_script.main(argv) == 0
    return tmp_path / "logs" / "run"


@pytest.mark.parametrize("lora", [True, False], ids=["lora", "full"])
def test_a_runs_final_evaluates_with_the_runs_settings(world, tmp_path, capsys, lora):
    run = train(tmp_path, world["model"], world["rows"], f"--config.train.use_lora={lora}")
    assert (run / "final" / "adapter_config.json").is_file() == lora
    capsys.readouterr()
    argv = ["--model", str(run / "final"), "--prompts", str(world["rows"]), "--reward", world["reward"]]
    assert evaluate_script.main([*argv, "--device", "cpu", "--compare", str(world["model"])]) == 0
    printed = capsys.readouterr().out
    assert "temperature=0.7 (run)" in printed and "max_response_length=5 (run)" in printed
    result = json.loads((run / "eval" / "eval.json").read_text())  # a run's evaluation goes beside it
    assert result["text"]["summary"]["all"]["prompts/pass@1"] == 5 and "pass@1" in result["text"]["compare"]["paired"]
    lengths = [json.loads(line)["tokens"] for line in (run / "eval" / "responses.jsonl").read_text().splitlines()]
    assert max(lengths) <= 5


def test_text_is_a_core_kind_evaluated_by_verifiable_by_default(world, tmp_path):
    from ddpo_grpo.evaluation_extras import extras_for
    from ddpo_grpo.policies import load_pipeline
    from ddpo_grpo.sample_kinds import kind_of_pipeline, kind_of_samples

    assert kind_of_pipeline(load_pipeline(str(world["model"]))) == "text" and kind_of_samples(["a", "b"]) == "text"
    assert (extras_for("text").reward, extras_for("text").group_by) == ("verifiable", "data_source")
    out = tmp_path / "eval"
    argv = ["--model", str(world["model"]), "--prompts", str(world["rows"]), "--out", str(out), *SHORT]
    assert evaluate_script.main(argv) == 0
    result = json.loads((out / "eval.json").read_text())
    assert (result["args"]["reward"], result["args"]["group_by"]) == ("verifiable", "data_source")
    assert result["metrics"]["eval/score"] == result["text"]["summary"]["arithmetic"]["pass@1"]  # 0: random weights
