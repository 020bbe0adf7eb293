"""Tests for ddpo_grpo.prompts."""

import json

import pytest
import torch

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


@pytest.mark.parametrize(
    "content,match",
    [
        ('{"prompt": "ok"}\n{"prompt": oops}\n', r"p\.jsonl line 2: invalid JSON"),
        ('{"prompt": "ok"}\n\n{"text": "x"}\n', r"p\.jsonl line 3: missing \"prompt\""),
        ('{"prompt": 3}\n', r"line 1: \"prompt\" must be a string"),
        ('["a"]\n', r"line 1: expected a JSON object"),
    ],
)
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
    many = [r["prompt"] for r in s.draw(5, 25)]  # 2.5 passes: every row twice or three times
    assert len(many) == 25 and sorted(many.count(r["prompt"]) for r in rows) == [2] * 5 + [3] * 5
    assert s.draw(5, 0) == []
    drawn = s.draw(0, 1)
    drawn[0]["prompt"] = "mutated"
    assert rows[0]["prompt"] == "0" and all(r["prompt"] != "mutated" for r in rows)


def test_builtin_animals():
    rows = load_prompts("animals")
    prompts = [r["prompt"] for r in rows]
    assert len(prompts) == len(BUILTIN_PROMPTS["animals"]) == 45 == len(set(prompts))
    assert {"cat", "dog", "horse", "kangaroo"} <= set(prompts)
    assert all(p and p == p.strip() and not p.startswith("#") for p in prompts)
    assert list(BUILTIN_PROMPTS["animals"])[:2] == ["cat", "dog"] and BUILTIN_PROMPTS["animals"][-1] == "kangaroo"


def test_animals_ship_as_package_data():
    from importlib import resources

    text = resources.files("ddpo_grpo").joinpath("data/animals.txt").read_text(encoding="utf-8")
    assert "kangaroo" in text


class _FakePolicy:
    """The duck-typed surface ``sample_rollout`` uses, with no model: enough to follow metadata."""

    device = torch.device("cpu")

    def encode_rows(self, rows, negative_prompt=""):
        return {"emb": torch.zeros(len(rows), 2), "neg_emb": torch.zeros(len(rows), 2)}

    def schedule(self, num_steps):
        from ddpo_grpo.policies.base import Schedule

        sig = torch.linspace(1.0, 0.0, num_steps + 1)
        return Schedule(timesteps=sig[:-1] * 1000, kernel_args={"sigma": sig[:-1], "sigma_next": sig[1:]})

    def check(self, schedule, noise_levels):
        pass

    def latent_shape(self):
        return (3, 4, 4)

    def predict(self, model, x, t, cond, guidance_scale):
        return torch.zeros_like(x)

    def step(self, out, x, args, level, generator=None):
        from ddpo_grpo.kernels import Step

        std = torch.full((x.shape[0], 1, 1, 1), 0.1)
        return Step(prev_sample=0.5 * x, log_prob=torch.zeros(x.shape[0]), mean=0.5 * x, std=std)

    def decode(self, x):
        return x.clamp(0, 1)


def test_jsonl_fields_reach_rollout_metadata(tmp_path):
    """JSONL row -> load_prompts -> PromptSampler -> sample_rollout: every non-prompt field is metadata."""
    from ddpo_grpo.rollout import sample_rollout

    rows_in = [
        {"prompt": "a cat", "ground_truth": "gt/cat.png", "data_source": "animals", "extra_info": {"split": "train"}},
        {"prompt": "a dog", "ground_truth": 3, "data_source": "counting"},
    ]
    p = tmp_path / "rows.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows_in))
    rows = PromptSampler(load_prompts(str(p)), seed=0).draw(0, 2)
    rollout = sample_rollout(_FakePolicy(), None, rows, seeds=[0, 1], num_steps=2, guidance_scale=1.0, noise_level=1.0)
    by_prompt = dict(zip(rollout.prompts, rollout.metadata))
    assert by_prompt == {r["prompt"]: {k: v for k, v in r.items() if k != "prompt"} for r in rows_in}
    assert rollout.samples.shape == (2, 3, 4, 4)


def test_builtin_shapes_splits_carry_metadata():
    train, test = load_prompts("shapes_train"), load_prompts("shapes_test")
    assert len(train) == 708 and len(test) == 402
    assert {"prompt", "task", "objects"} <= set(train[0])
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}


def test_sampler_stratified_by_task():
    """stratify_by="task": each task gets an equal share of a draw, whatever its share of the rows."""
    rows = load_prompts("shapes_train")  # 12 single, 36 counting, 132 two-object, 528 position
    s = PromptSampler(rows, seed=0, stratify_by="task")
    drawn = s.draw(3, 16)
    counts = {t: sum(r["task"] == t for r in drawn) for t in ("single_object", "counting", "two_object", "position")}
    assert counts == {"single_object": 4, "counting": 4, "two_object": 4, "position": 4}
    assert len({r["prompt"] for r in drawn}) == 16  # no repeats while a stratum has enough rows
    assert s.draw(3, 16) == drawn  # deterministic in (seed, epoch, n)
    odd = s.draw(4, 18)  # 18 = 4·4 + 2: two strata get one more
    assert sorted(sum(r["task"] == t for r in odd) for t in counts) == [4, 4, 5, 5]
    big = s.draw(5, 100)  # 25 per task > 12 single-object rows: that stratum is drawn in passes
    singles = [r["prompt"] for r in big if r["task"] == "single_object"]
    assert len(singles) == 25 and sorted(set(singles.count(p) for p in singles)) == [2, 3]
    uniform = PromptSampler(rows, seed=0).draw(3, 400)
    assert sum(r["task"] == "position" for r in uniform) > 200  # unstratified follows the rows' shares
    with pytest.raises(ValueError, match=r"stratify_by='task'.*row 0.*no field 'task'"):
        PromptSampler([{"prompt": "a"}], stratify_by="task")
