"""Rule-based rewards of language-model responses (reward_models.verifiable) and string solutions in per_sample."""

import numpy as np
import pytest

from reward_models import REGISTRY, build_reward, load_reward
from reward_models.verifiable.label_match import score_label
from reward_models.verifiable.math_answer import extract_answer, normalize, score_math
from reward_models.verifiable.text_match import normalize_text, score_text


@pytest.mark.parametrize(
    "response, truth, score",
    [
        ("3 + 4 = 7, so 7 * 6 = 42.\n#### 42", "42", 1.0),
        ("#### 1,234", "1234", 1.0),
        ("The total is $1,234.00.", "1234", 1.0),
        ("#### -5", "-5", 1.0),
        ("#### 5", "-5", 0.0),
        ("so the answer is \\boxed{\\frac{3}{4}}", "0.75", 1.0),
        ("\\boxed{\\dfrac{1}{3}}", "1/3", 1.0),
        ("\\boxed{0.33}", "1/3", 0.0),
        ("first 12, then 7 apples", "7", 1.0),
        ("she has 3/4 of a pie left", "0.75", 1.0),
        ("I do not know.", "7", 0.0),
        ("#### 12\nthen more text 13", "12", 1.0),  # #### wins over a later number
        ("\\boxed{x^{2}+1} and 5", "x^{2} + 1", 1.0),  # non-numeric: normalised strings
        ("#### 72", "Natalia sold 48/2 = 24 clips.\n48+24 = 72\n#### 72", 1.0),  # raw GSM8K ground truth
        ("#### 42.", 42, 1.0),
    ],
)
def test_math_answers(response, truth, score):
    assert score_math(response, truth)[0] == score


def test_math_extraction_and_format():
    assert extract_answer("a \\boxed{\\frac{1}{2}} b \\boxed{3}") == "3"
    assert extract_answer("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert extract_answer("no digits here") is None
    assert normalize(" $1,000.$ ") == "1000"
    assert score_math("#### 42", "41")[1]["format"] == 1.0  # well formed, wrong
    assert score_math("it is 42", "42")[1]["format"] == 0.0  # right, but no #### line
    assert score_math("#### forty", "40")[1]["format"] == 0.0


def test_text_match_squad_normalisation():
    assert normalize_text("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_text("An apple, a day") == "apple day"
    assert score_text("Let me think.\nThe answer is: the Paris.", "Paris")[0] == 1.0
    assert score_text("<answer>Lyon</answer>", ["Paris", "lyon"])[0] == 1.0
    assert score_text("Paris is the capital", "Paris")[0] == 0.0
    assert score_text("   ", "Paris") == (0.0, {"format": 0.0})


def test_label_match():
    assert score_label("The review praises the food.\nLabel: **Positive**.", "positive")[0] == 1.0
    assert score_label("positive -- it praises the food", ["neutral", "positive"])[0] == 1.0
    assert score_label("not positive", "positive")[0] == 0.0
    assert score_label("", "positive") == (0.0, {"format": 0.0})


def test_routing_table_and_info():
    reward = load_reward("verifiable")
    rows = [
        {"data_source": "arithmetic", "ground_truth": "42"},
        {"data_source": "openai/gsm8k", "reward_model": {"ground_truth": "7", "style": "rule"}},  # verl layout
        {"data_source": "trivia", "ground_truth": ["Paris"]},
        {"data_source": "classification", "ground_truth": "spam"},
    ]
    samples = ["#### 42", "so 7", "Paris", "ham"]
    scores, info = reward(samples, [""] * 4, rows)
    assert scores.tolist() == [1.0, 1.0, 1.0, 0.0]
    assert info["task"] == ["arithmetic", "openai/gsm8k", "trivia", "classification"]
    assert info["format"].tolist() == [1.0, 0.0, 1.0, 1.0]
    assert np.isnan(info["tests_passed"]).all() and info["unrouted"] == 0
    assert "verifiable" in REGISTRY


def test_unknown_source_and_missing_ground_truth_one_line():
    reward = load_reward("verifiable")
    with pytest.raises(ValueError, match=r"row 1 has data_source 'poetry', which no scorer handles; known: .*gsm8k"):
        reward(["#### 1", "x"], ["", ""], [{"data_source": "math", "ground_truth": "1"}, {"data_source": "poetry"}])
    with pytest.raises(ValueError, match=r"row 0 \(data_source 'gsm8k'\) has no ground_truth"):
        reward(["#### 1"], [""], [{"data_source": "gsm8k"}])
    lenient = load_reward("verifiable", unknown="nan", routes={"poetry": "text"})
    scores, info = lenient(["rose", "x"], ["", ""], [{"data_source": "poetry", "ground_truth": "Rose"}, {}])
    assert scores[0] == 1.0 and np.isnan(scores[1]) and info["unrouted"] == 1
    with pytest.raises(TypeError, match="scores text responses"):
        reward(np.zeros((1, 3, 4, 4), dtype=np.float32), [""], [{"data_source": "math", "ground_truth": "1"}])


def test_per_sample_scorer_receives_strings(tmp_path):
    """A verl compute_score file scores solution_str as the response string (images stay PIL images)."""
    path = tmp_path / "score.py"
    path.write_text(
        "SEEN = []\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    SEEN.append(solution_str)\n"
        "    assert isinstance(solution_str, str), type(solution_str)\n"
        "    return float(solution_str.strip().endswith(str(ground_truth)))\n"
        "def batched(samples, prompts, metadata):\n"
        "    assert isinstance(samples, list) and all(isinstance(s, str) for s in samples)\n"
        "    return [len(s) for s in samples], {}\n"
        "REWARDS = {'a': compute_score, 'b': batched}\n"
    )
    reward = build_reward({"mine": 1.0}, sources={"mine": f"{path}:compute_score"})
    rows = [{"data_source": "x", "ground_truth": "42"}, {"data_source": "x", "reward_model": {"ground_truth": "7"}}]
    per, _ = reward(["#### 42", "#### 8"], ["p0", "p1"], rows)
    assert per["mine"].tolist() == [1.0, 0.0]
    routed = load_reward(f"{path}:REWARDS")
    scores, info = routed(
        ["#### 42", "abc", "zz"],
        ["", "", ""],
        [{"data_source": "a", "ground_truth": "42"}, {"data_source": "b"}, {"data_source": "b"}],
    )
    assert scores.tolist() == [1.0, 3.0, 2.0] and info["routed"] == {"a": 1, "b": 2}
