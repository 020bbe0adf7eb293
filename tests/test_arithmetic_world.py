"""ArithmeticWorld (worlds/arithmetic/): the problems and their split, the shipped tokenizer and tiny Qwen2 model,
and the reproducibility of its pretraining."""

from __future__ import annotations

import re

import pytest
import torch

from tests.entry_points_kit import checkout_entry_points  # noqa: F401  (a fixture: the checkout's plug-ins)
from worlds.arithmetic import problems
from worlds.arithmetic.problems import HELD_OUT_NUMBERS, HELD_OUT_TEMPLATES, TRAIN_TEMPLATES, is_correct

BASE = problems.DATA_DIR.parent / "models" / "base"
LINE = re.compile(r"^(\d+) ([-+*]) (\d+) = (-?\d+)$")


def test_the_split_is_deterministic_and_the_shipped_files_are_its_regeneration(tmp_path):
    fresh = problems.write_split(tmp_path)
    for split, path in fresh.items():
        assert path.read_bytes() == problems.split_path(split).read_bytes(), "run `python -m worlds.arithmetic split`"
    assert problems.make_split(1) != problems.make_split(0)  # the seed matters


def test_train_and_held_out_are_disjoint_by_template_and_number_range():
    train, test = problems.train_rows(), problems.test_rows()
    assert len(train) == problems.N_TRAIN and len(test) == problems.N_TEST
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in test}
    for r in train:
        info = r["extra_info"]
        assert info["template"] in TRAIN_TEMPLATES and not set(info["operands"]) & HELD_OUT_NUMBERS, r
        assert info["split"] == "train" and info["held_out"] is None
    strata = {}
    for r in test:
        info = r["extra_info"]
        new_t, new_n = info["template"] in HELD_OUT_TEMPLATES, bool(set(info["operands"]) & HELD_OUT_NUMBERS)
        assert new_t or new_n, r
        assert (
            info["held_out"]
            == {(True, False): "template", (False, True): "number", (True, True): "both"}[(new_t, new_n)]
        )
        strata[info["held_out"]] = strata.get(info["held_out"], 0) + 1
    assert strata == {k: round(problems.N_TEST * f) for k, f in problems.TEST_STRATA.items()}
    # the pretraining sampler draws train problems only
    rng = __import__("numpy").random.default_rng(5)
    assert all(problems.split_of(problems.sample_problem(rng, "train")) == "train" for _ in range(500))


@pytest.mark.parametrize("split", ["train", "test"])
def test_every_worked_answer_is_right(split):
    """Each line ``x op y = z`` is true arithmetic, chains the question's numbers in order, and ``#### N`` is the
    last result and the row's ground truth (checked with Python's own arithmetic, not the generator's)."""
    for r in problems.load_split(split):
        *lines, final = r["extra_info"]["worked"].split("\n")
        numbers = [int(n) for n in re.findall(r"\d+", r["prompt"])]
        assert numbers == r["extra_info"]["operands"], r
        running = numbers[0]
        for line, y in zip(lines, numbers[1:], strict=True):
            x, op, y_, z = LINE.fullmatch(line).groups()
            assert int(x) == running and int(y_) == y, r
            assert int(z) == {"+": int.__add__, "-": int.__sub__, "*": int.__mul__}[op](int(x), int(y_)) >= 0, r
            running = int(z)
        assert final == f"#### {running}" and r["ground_truth"] == str(running), r
        assert r["data_source"] == "arithmetic" and is_correct(r["extra_info"]["worked"], r["ground_truth"])


def test_exact_match_reads_the_number_after_the_marks():
    assert is_correct("7 + 5 = 12\n#### 12", "12") and is_correct("#### 1,200", "1200")
    assert not is_correct("7 + 5 = 12\n#### 13", "12") and not is_correct("7 + 5 = 12", "12")


def test_prompt_sources_are_registered(checkout_entry_points):  # noqa: F811
    from ddpo_grpo.prompts import load_prompts

    assert load_prompts("arithmetic_train") == problems.train_rows()
    assert load_prompts("arithmetic_test") == problems.test_rows()


def test_the_shipped_model_and_tokenizer_load_offline(monkeypatch):
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2ForCausalLM

    from worlds.arithmetic.tokenizer import build_tokenizer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    files = {p.name: p.stat().st_size for p in BASE.iterdir()}
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json"} <= set(files)
    assert sum(files.values()) <= 10 * 2**20, files
    model = AutoModelForCausalLM.from_pretrained(BASE)
    tok = AutoTokenizer.from_pretrained(BASE)
    assert isinstance(model, Qwen2ForCausalLM) and model.config.tie_word_embeddings
    assert tok.pad_token_id is not None and tok.eos_token_id is not None and tok.pad_token != tok.eos_token
    assert model.config.eos_token_id == tok.eos_token_id and model.config.vocab_size == len(tok)
    text = problems.test_rows()[0]["prompt"] + "\n" + problems.test_rows()[0]["extra_info"]["worked"]
    assert tok.decode(tok(text).input_ids) == text  # round trip, nothing added around the text
    chat = [{"role": "user", "content": "Q?"}, {"role": "assistant", "content": "#### 1"}]
    assert tok.apply_chat_template(chat, tokenize=False) == "Q?\n#### 1" + tok.eos_token
    assert tok.apply_chat_template(chat[:1], tokenize=False, add_generation_prompt=True) == "Q?\n"
    assert build_tokenizer().get_vocab() == tok.get_vocab()  # the script rebuilds the shipped tokenizer


def test_the_shipped_model_writes_the_format_on_train_prompts():
    from worlds.arithmetic.measure import generate, load

    model, tok = load(BASE)
    rows = problems.train_rows()[:8]
    texts, lengths = generate(model, tok, [r["prompt"] for r in rows], sample=False)
    for text, n in zip(texts, lengths):
        assert re.fullmatch(r"\n(\d+ [-+*] \d+ = \d+\n){1,2}#### \d+", text), repr(text)
        assert n < 48  # ended by <eos>
    assert sum(is_correct(t, r["ground_truth"]) for t, r in zip(texts, rows)) >= 4


def _tiny(seed: int):
    from worlds.arithmetic.pretrain import ArithmeticConfig, train

    cfg = ArithmeticConfig(
        seed=seed, steps=3, batch_size=4, hidden_size=32, num_hidden_layers=1, intermediate_size=64,
        eval_prompts=0, log_every=1,
    )  # fmt: skip
    return train(cfg, log=lambda _: None).state_dict()


def test_pretraining_is_reproducible():
    torch.set_num_threads(1)
    a, b, c = _tiny(0), _tiny(0), _tiny(1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)


@pytest.mark.slow
def test_the_shipped_model_lands_in_the_documented_held_out_range():
    """README.md's base figures: held-out pass@1 at temperature 1 in 20–50 %, pass@8 at least 10 points higher."""
    from worlds.arithmetic.measure import load, measure

    torch.set_num_threads(1)
    res = measure(*load(BASE), problems.test_rows(), k=8, seed=0)
    assert 0.2 <= res["pass@1"] <= 0.5 and res["pass@8"] >= res["pass@1"] + 0.1, res


def test_the_worlds_judge_is_a_second_scorer_of_the_same_responses():
    """``arithmetic`` (the world's rule: the first ``####``) and ``verifiable`` (the last) agree on well-formed answers
    and part where a response writes two answers: two scorers that share no code."""
    from reward_models import load_reward

    rows = [{"prompt": "q", "ground_truth": "5", "data_source": "arithmetic", "extra_info": {"held_out": "number"}}] * 3
    responses = ["\n2 + 3 = 5\n#### 5", "#### 5\n#### 7", "#### 7\n#### 5"]
    world, info = load_reward("arithmetic")(responses, ["q"] * 3, rows)
    core, _ = load_reward("verifiable")(responses, ["q"] * 3, rows)
    assert world.tolist() == [1.0, 1.0, 0.0] and core.tolist() == [1.0, 0.0, 1.0]
    assert info["held_out"] == ["number"] * 3
