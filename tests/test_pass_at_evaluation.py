"""pass@k for any world's samples (scripts/evaluate.py --pass_at): the per-prompt estimator against brute force over
k-subsets, group and task means, bootstrap intervals over prompts, the paired comparison, and the script end to end."""

import itertools
import json
import math
from types import SimpleNamespace

import numpy as np
import pytest

from ddpo_grpo.cli import UsageError
from ddpo_grpo.evaluation import Scored
from ddpo_grpo.evaluation_extras import EvaluationExtras
from ddpo_grpo.pass_at_evaluation import MEAN, pass_numbers
from ddpo_grpo.pass_at_k import bootstrap
from tests.conftest import load_script

evaluate_script = load_script("evaluate")
FAST = ["--resolution", "32", "--num_steps", "2", "--max_sequence_length", "8", "--device", "cpu"]


def _sampled(strict: list[float], groups: list[str]):
    scored = Scored({"strict": strict, "partial": [0.5] * len(strict)}, groups, [True] * len(strict))
    scorers = SimpleNamespace(scored={"judge": scored}, values=lambda name: scored.values)
    return SimpleNamespace(scorers=scorers)


def _args(**kw):
    base = dict(pass_at="1,2,4", pass_metric=None, pass_threshold=1.0, per_prompt=4, per_group=0, group_by="task")
    base.update(kw)
    base.setdefault("seed", 0)
    return SimpleNamespace(**base)


def _brute(values: list[float], k: int) -> float:
    subsets = list(itertools.combinations(values, k))
    return sum(any(v >= 1 for v in s) for s in subsets) / len(subsets)


def test_pass_at_k_per_prompt_group_and_task_mean_match_brute_force():
    rng = np.random.default_rng(3)
    rows = [{"prompt": f"p{i}", "task": "a" if i < 3 else "b"} for i in range(5)]  # 3 prompts of a, 2 of b
    strict = rng.integers(0, 2, size=5 * 4).astype(float).tolist()  # 4 samples per prompt, in prompt order
    groups = [rows[j // 4]["task"] for j in range(20)]
    numbers, _ = pass_numbers(
        _sampled(strict, groups), None, _args(), rows, "judge", EvaluationExtras(pass_metric="strict")
    )
    per = {p["row"]: p for p in numbers["per_prompt"]}
    for i in range(5):
        mine = strict[4 * i : 4 * i + 4]
        assert per[i]["n"] == 4 and per[i]["passed"] == sum(mine)
        for k in (1, 2, 4):
            assert per[i][f"pass@{k}"] == pytest.approx(_brute(mine, k), abs=1e-12)
    s = numbers["summary"]
    for k in (1, 2, 4):
        name = f"pass@{k}"
        a = np.mean([per[i][name] for i in range(3)])
        b = np.mean([per[i][name] for i in range(3, 5)])
        assert s["a"][name] == pytest.approx(a) and s["b"][name] == pytest.approx(b)
        assert s[MEAN][name] == pytest.approx((a + b) / 2)  # each task weighs the same
        assert s["all"][name] == pytest.approx(np.mean([per[i][name] for i in range(5)]))
        lo, hi = s[MEAN][f"ci/{name}"]
        assert lo <= s[MEAN][name] <= hi
    assert s[MEAN]["pass@1"] <= s[MEAN]["pass@2"] <= s[MEAN]["pass@4"]


def test_compare_pairs_prompt_by_prompt_and_a_model_against_itself_differs_by_zero():
    rows = [{"prompt": f"p{i}", "task": "t"} for i in range(6)]
    base = [0.0, 0.0, 1.0, 0.0] * 6
    better = [1.0, 0.0, 1.0, 0.0] * 6
    groups = ["t"] * 24
    extras = EvaluationExtras(pass_metric="strict")
    numbers, paired = pass_numbers(_sampled(better, groups), _sampled(base, groups), _args(), rows, "judge", extras)
    assert numbers["compare"]["summary"]["all"]["pass@1"] == pytest.approx(0.25)
    assert numbers["summary"]["all"]["pass@1"] == pytest.approx(0.5)
    assert paired["pass@1"][""].diff == pytest.approx(0.25)
    _, same = pass_numbers(_sampled(base, groups), _sampled(base, groups), _args(), rows, "judge", extras)
    assert same["pass@4"][""].diff == 0.0


def test_bootstrap_is_reproducible_resamples_within_groups_and_narrows_with_prompts():
    rng = np.random.default_rng(0)
    small = rng.random(10).tolist()
    assert bootstrap(small, ["g"] * 10) == bootstrap(small, ["g"] * 10)
    wide = bootstrap(small, ["g"] * 10)["g"]
    big = (np.array(small * 10) + rng.normal(0, 1e-3, 100)).tolist()
    narrow = bootstrap(big, ["g"] * 100)["g"]
    assert narrow[1] - narrow[0] < (wide[1] - wide[0]) / 2
    constant = bootstrap([1.0, 1.0, 0.0, 0.0], ["a", "a", "b", "b"])  # each group constant: no spread at all
    assert constant["a"] == (1.0, 1.0) and constant["b"] == (0.0, 0.0) and constant["mean"] == (0.5, 0.5)
    assert "mean" in constant and math.isfinite(constant[""][0])


def test_bad_pass_flags_are_refused_in_one_line():
    rows = [{"prompt": "p", "task": "t"}]
    sampled = _sampled([1.0, 0.0], ["t", "t"])
    with pytest.raises(UsageError, match=r"--pass_at '3': every k must be in 1\.\.2"):
        pass_numbers(
            sampled, None, _args(pass_at="3", per_prompt=2), rows, "judge", EvaluationExtras(pass_metric="strict")
        )
    with pytest.raises(UsageError, match="--pass_metric 'nope': the reward 'judge' reports partial, strict"):
        pass_numbers(
            sampled, None, _args(pass_at="1", per_prompt=2, pass_metric="nope"), rows, "judge", EvaluationExtras()
        )
    with pytest.raises(UsageError, match="--pass_metric: the reward 'judge' reports partial, strict; name the one"):
        pass_numbers(sampled, None, _args(pass_at="1", per_prompt=2), rows, "judge", EvaluationExtras())


def test_script_reports_pass_at_k_of_an_image_model(tiny_dirs, tmp_path, capsys):
    """evaluate.py --pass_at on a tiny pipeline with a dense reward: pass@1 is the pass rate of the samples, and
    pass@k does not fall with k; eval.json carries the table and the printed report shows it."""
    out = tmp_path / "ev"
    argv = ["--model", tiny_dirs["sd3"], "--limit", "3", "--per_prompt", "3", "--out", str(out), "--reward"]
    argv += ["jpeg_compressibility", "--pass_at", "1,3", "--pass_threshold=-1e9", *FAST]  # every sample passes
    assert evaluate_script.main(argv) == 0
    data = json.loads((out / "eval.json").read_text())["pass_at"]["jpeg_compressibility"]
    assert data["ks"] == [1, 3] and data["metric"] == "score"
    assert [p["n"] for p in data["per_prompt"]] == [3, 3, 3]
    assert data["summary"]["all"]["pass@1"] == 1.0 and data["summary"]["all"]["pass@3"] == 1.0
    assert "pass@k: a sample passes when jpeg_compressibility's score >= -1e+09" in capsys.readouterr().out
