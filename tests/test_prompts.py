"""Tests for ddpo_grpo.prompts."""


import json

import pytest

from ddpo_grpo.prompts import BUILTIN_PROMPTS, PromptSampler, load_prompts


def test_builtin_simple():
    rows = load_prompts("simple")
    assert len(rows) == len(BUILTIN_PROMPTS["simple"]) >= 10
    assert all(isinstance(r["prompt"], str) and r["prompt"] for r in rows)


def test_txt(tmp_path):
    p = tmp_path / "p.txt"
    p.write_text("# header\na cat\n\n  a dog  \n#skip\n")
    assert load_prompts(str(p)) == [{"prompt": "a cat"}, {"prompt": "a dog"}]


def test_jsonl(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({"prompt": "a cat", "tag": "animal"}) + "\n\n" + json.dumps({"prompt": "x"}) + "\n")
    assert load_prompts(str(p)) == [{"prompt": "a cat", "tag": "animal"}, {"prompt": "x"}]


def test_json(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps([{"prompt": "a", "n": 1}, {"prompt": "b"}]))
    assert load_prompts(str(p)) == [{"prompt": "a", "n": 1}, {"prompt": "b"}]


@pytest.mark.parametrize("content,match", [
    ('{"prompt": "ok"}\n{"prompt": oops}\n', r"p\.jsonl line 2: invalid JSON"),
    ('{"prompt": "ok"}\n\n{"text": "x"}\n', r"p\.jsonl line 3: missing \"prompt\""),
    ('{"prompt": 3}\n', r"line 1: \"prompt\" must be a string"),
    ('["a"]\n', r"line 1: expected a JSON object"),
])
def test_jsonl_errors(tmp_path, content, match):
    p = tmp_path / "p.jsonl"
    p.write_text(content)
    with pytest.raises(ValueError, match=match):
        load_prompts(str(p))


def test_json_errors(tmp_path):
    p = tmp_path / "p.json"
    p.write_text(json.dumps([{"prompt": "a"}, {"prompt": None}]))
    with pytest.raises(ValueError, match=r"p\.json item \[1\]: \"prompt\" must be a string"):
        load_prompts(str(p))
    p.write_text(json.dumps({"prompt": "a"}))
    with pytest.raises(ValueError, match="expected a JSON list"):
        load_prompts(str(p))
    p.write_text("[{")
    with pytest.raises(ValueError, match="invalid JSON"):
        load_prompts(str(p))


def test_unknown_and_empty(tmp_path):
    with pytest.raises(ValueError, match=r"simple.*\.txt.*\.jsonl"):
        load_prompts("no_such_source")
    bad = tmp_path / "p.csv"
    bad.write_text("a\n")
    with pytest.raises(ValueError, match="unsupported file extension"):
        load_prompts(str(bad))
    empty = tmp_path / "e.txt"
    empty.write_text("# only a comment\n\n")
    with pytest.raises(ValueError, match="no prompts"):
        load_prompts(str(empty))


def test_sampler_deterministic():
    rows = [{"prompt": str(i)} for i in range(10)]
    s1, s2 = PromptSampler(rows, seed=3), PromptSampler(rows, seed=3)
    s1.draw(0, 5)  # call history must not matter
    assert s1.draw(1, 5) == s2.draw(1, 5) == s1.draw(1, 5)
    assert s1.draw(1, 10) != s1.draw(2, 10)
    assert PromptSampler(rows, seed=4).draw(1, 10) != s1.draw(1, 10)


def test_sampler_replacement():
    rows = [{"prompt": str(i)} for i in range(10)]
    s = PromptSampler(rows, seed=0)
    got = [r["prompt"] for r in s.draw(5, 10)]
    assert sorted(got) == sorted(r["prompt"] for r in rows)  # no replacement: a permutation
    assert len(s.draw(5, 25)) == 25
    assert s.draw(5, 0) == []
    drawn = s.draw(0, 1)
    drawn[0]["prompt"] = "mutated"
    assert rows[0]["prompt"] == "0" and all(r["prompt"] != "mutated" for r in rows)
