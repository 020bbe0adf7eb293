"""experiments/trl_side_by_side.py end to end for two steps on a tiny Qwen2 (skips without TRL, as in CI)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("trl")
pytest.importorskip("datasets")

from trl_kit import tiny_qwen2, tiny_tokenizer  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "trl_side_by_side.py"


def _script():
    spec = importlib.util.spec_from_file_location("trl_side_by_side", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_math_score_reads_the_last_final_answer():
    score = _script().math_score
    assert score("1 + 2 = 3 #### 3", "3") == 1.0
    assert score("#### 4 then #### 3", "3.0") == 1.0
    assert score("#### 1,234", "1234") == 1.0
    assert score("3", "3") == 0.0  # no "####"
    assert score("#### 4", "3") == 0.0
    assert score("#### -2", "-2") == 1.0


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_trains_two_steps_and_writes_accuracy(tmp_path, one_thread, beta):
    model_dir = tmp_path / "model"
    tiny_qwen2().save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    rows = [{"prompt": f"what is {a} + {b} =", "ground_truth": str(a + b), "data_source": "math"} for a, b in
            [(1, 2), (3, 4), (2, 2), (5, 1)]]  # fmt: skip
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]))
    (tmp_path / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[2:]))
    out = tmp_path / "trl.json"
    argv = ["--model", str(model_dir), "--train", str(tmp_path / "train.jsonl"), "--heldout",
            str(tmp_path / "heldout.jsonl"), "--out", str(out), "--samples", "16", "--group", "4",
            "--prompts-per-step", "2", "--max-completion-length", "6", "--beta", str(beta), "--lr", "1e-3"]  # fmt: skip
    _script().main(argv)
    result = json.loads(out.read_text())
    assert result["steps"] == 2 and result["responses_generated"] == 16
    assert result["train_wall_s"] > 0
    for phase in ("base", "final"):
        assert set(result[phase]) == {"greedy", "sampled_t1", "greedy_length", "sampled_length"}
        assert 0.0 <= result[phase]["greedy"] <= 1.0 and 0 < result[phase]["greedy_length"] <= 6
    assert len([e for e in result["log"] if "reward" in e]) == 2
