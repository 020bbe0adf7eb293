"""A causal language model on the GRPO loop: the adapter, the rollout, the updater, the one-command recipe end to end on
a tiny Qwen2 built from a config dict, its final/ loaded back by plain transformers (and peft), and bad input refused
with one line before anything is written."""

import json
import os
import re
from pathlib import Path

import pytest
import torch

from tests.conftest import load_script
from tests.lm_kit import REWARD_FILE, build_tiny_lm, write_rows

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parents[1]
train_script = load_script("train")


@pytest.fixture(scope="module")
def lm_dir(tmp_path_factory):
    return build_tiny_lm(tmp_path_factory.mktemp("lm") / "model")


def policy_of(path, **settings):
    from ddpo_grpo.policies import build_policy, load_pipeline
    from ddpo_grpo.policies.causal_lm import LanguageSettings

    return build_policy(load_pipeline(str(path)), LanguageSettings.unset(**settings))


def rows(n=4):
    return [{"prompt": f"{i}+{i}=", "ground_truth": str(2 * i)} for i in range(n)]


def test_a_causal_lm_directory_picks_the_language_model_adapter(lm_dir):
    from ddpo_grpo.policies import denoiser_components
    from ddpo_grpo.policies.causal_lm import CausalLMPolicy

    policy = policy_of(lm_dir, max_prompt_length=16, max_response_length=8)
    assert isinstance(policy, CausalLMPolicy)
    assert denoiser_components(str(lm_dir)) == ("model",)
    assert policy.shard_blocks == ("Qwen2DecoderLayer",)


def test_rollout_is_reproducible_per_response_and_its_logprobs_are_the_trainers(lm_dir):
    from ddpo_grpo.token_rollout import sample_tokens

    policy = policy_of(lm_dir, max_prompt_length=16, max_response_length=10)
    batch = sample_tokens(policy, policy.model, rows(4), seeds=[11, 12, 13, 14])
    alone = sample_tokens(policy, policy.model, rows(4)[2:3], seeds=[13])
    assert batch.samples[2] == alone.samples[0]  # a response depends on its seed, not on its batch
    m = batch.response_mask.bool()
    assert m[:, 0].all() and (batch.response_lengths >= 1).all()
    # the KV-cached sampling forward and the trainer's full forward agree on every token (fp32)
    assert float((batch.sampler_log_probs - batch.log_probs).abs()[m].max()) <= 1e-4
    recomputed, _ = policy.response_logprobs(policy.model, batch.ids, batch.mask, batch.prompt_length)
    assert torch.allclose(recomputed * m, batch.log_probs, atol=1e-5)
    eos = policy.tokenizer.eos_token_id
    for row, finished, n in zip(batch.ids[:, batch.prompt_length :], batch.finished, batch.response_lengths):
        assert (int(row[int(n) - 1]) == eos) == bool(finished)  # a finished response ends with its EOS


def test_stop_strings_end_a_response(lm_dir):
    from ddpo_grpo.token_rollout import sample_tokens

    policy = policy_of(lm_dir, max_prompt_length=16, max_response_length=30, stop=("1",))
    batch = sample_tokens(policy, policy.model, rows(8), seeds=list(range(8)))
    for text, finished in zip(batch.samples, batch.finished):
        if "1" in text:
            assert text.endswith("1") and bool(finished)


def test_cat_pads_prompts_left_and_responses_right(lm_dir):
    from ddpo_grpo.token_rollout import TokenRollout, sample_tokens

    policy = policy_of(lm_dir, max_prompt_length=16, max_response_length=6)
    short = sample_tokens(policy, policy.model, [{"prompt": "1="}], seeds=[1])
    long = sample_tokens(policy, policy.model, [{"prompt": "12+34="}], seeds=[2])
    joined = TokenRollout.cat([short, long], pad_id=policy.tokenizer.pad_token_id)
    logp, _ = policy.response_logprobs(policy.model, joined.ids, joined.mask, joined.prompt_length)
    m = joined.response_mask.bool()
    assert torch.allclose((logp * m)[m], joined.log_probs[m], atol=1e-5)  # padding changes no token's log-prob


def test_mixed_chat_and_plain_rows_are_refused(lm_dir):
    policy = policy_of(lm_dir, max_prompt_length=64, max_response_length=4)
    chat = {"prompt": [{"role": "user", "content": "1+1="}]}
    assert "assistant: " in policy.render([chat])[0]  # the chat template, with the generation prompt
    with pytest.raises(ValueError, match="mixes chat rows"):
        policy.render([chat, {"prompt": "1+1="}])


def run_train(tmp_path, model, *extra, rows_file=None):
    """``scripts/train.py`` in this process with the one-command recipe's arguments: its exit status."""
    reward = tmp_path / "reward.py"
    reward.write_text(REWARD_FILE)
    rows_file = rows_file or write_rows(tmp_path / "rows.json", 8)
    argv = [
        "scripts/train.py",
        "--config",
        str(ROOT / "config" / "llm.py") + ":grpo",
        f"--config.pretrained.model={model}",
        f"--config.prompts.source={rows_file}",
        f"--config.reward.sources={{'sum': '{reward}:compute_score'}}",
        "--config.reward.fns={'sum': 1.0}",
        "--config.num_epochs=2",
        "--config.sample.batch_size=4",
        "--config.sample.group_size=4",
        "--config.sample.num_batches_per_epoch=2",
        "--config.train.batch_size=4",
        "--config.train.gradient_accumulation_steps=2",
        "--config.sample.max_prompt_length=32",
        "--config.sample.max_response_length=8",
        "--config.mixed_precision=no",
        "--config.distributed.strategy=ddp",
        "--config.train.gradient_checkpointing=False",
        f"--config.logdir={tmp_path / 'logs'}",
        "--config.run_name=run",
        "--config.logging.progress=False",
        *extra,
    ]
    return train_script.main(argv)


def test_the_one_command_recipe_trains_and_final_loads_in_plain_transformers(tmp_path, lm_dir, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    done = run_train(
        tmp_path,
        lm_dir,
        "--config.train.beta=0.04",
        "--config.train.learning_rate=1e-3",
        "--config.train.adam_weight_decay=0",
    )
    assert done == 0, capsys.readouterr().err[-3000:]
    run = tmp_path / "logs" / "run"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = lines[-1]
    for key in ("train/kl", "train/entropy", "response/length_mean", "train/sampler_logp_gap_max", "reward/mean"):
        assert key in last and last[key] == last[key], key
    assert lines[0]["train/logp_mismatch"] <= 1e-4
    model = AutoModelForCausalLM.from_pretrained(run / "final")
    AutoTokenizer.from_pretrained(run / "final")
    base = AutoModelForCausalLM.from_pretrained(lm_dir)
    changed = any(not torch.equal(a, b) for a, b in zip(model.state_dict().values(), base.state_dict().values()))
    assert changed  # a full fine-tune's final/ holds the trained weights
    assert (run / "report" / "before_after.md").is_file()


def test_a_lora_run_exports_peft_files(tmp_path, lm_dir, capsys):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    done = run_train(tmp_path, lm_dir, "--config.train.use_lora=True", "--config.train.learning_rate=1e-2")
    assert done == 0, capsys.readouterr().err[-3000:]
    final = tmp_path / "logs" / "run" / "final"
    assert (final / "adapter_config.json").is_file()
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(lm_dir), final).merge_and_unload()
    base = AutoModelForCausalLM.from_pretrained(lm_dir)
    assert any(not torch.equal(a, b) for a, b in zip(merged.state_dict().values(), base.state_dict().values()))


@pytest.mark.parametrize(
    "case, expected",
    [
        ("long_prompt", "row 0.*tokens > sample.max_prompt_length=32"),
        ("no_pad", "has no pad token"),
        ("mixed", "mixes chat rows"),
        ("context", "exceed the model's context of 128"),
    ],
)
def test_bad_input_gets_one_line_and_nothing_is_written(tmp_path, lm_dir, case, expected, capsys):
    model, extra, rows_file = lm_dir, [], None
    if case == "long_prompt":
        rows_file = tmp_path / "long.json"
        rows_file.write_text(json.dumps([{"prompt": "1+" * 40 + "=", "ground_truth": "1"}] * 4))
    elif case == "no_pad":
        model = build_tiny_lm(tmp_path / "nopad", pad=False)
    elif case == "mixed":
        rows_file = tmp_path / "mixed.json"
        rows_file.write_text(json.dumps([{"prompt": "1+1="}, {"prompt": [{"role": "user", "content": "2+2="}]}]))
    elif case == "context":
        extra = ["--config.sample.max_response_length=200"]
    done = run_train(tmp_path, model, *extra, rows_file=rows_file)
    err = capsys.readouterr().err
    assert done == 2
    assert "Traceback" not in err and re.search(expected, err), err[-2000:]
    assert len([line for line in err.splitlines() if re.search(expected, line)]) == 1
    assert not (tmp_path / "logs" / "run").exists()


def test_kl_in_the_reward_is_paid_by_the_score_not_the_loss(tmp_path, lm_dir, capsys):
    flags = ["--config.train.beta=0.1", "--config.train.kl_in_reward=True", "--config.train.learning_rate=1e-2"]
    done = run_train(tmp_path, lm_dir, *flags, "--config.train.adam_weight_decay=0")
    assert done == 0, capsys.readouterr().err[-3000:]
    lines = [json.loads(line) for line in (tmp_path / "logs" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert "reward/kl_penalty" not in lines[0]  # epoch 0 samples with the reference's own weights: no KL
    assert lines[1]["reward/kl_penalty"] != 0.0  # after an update the policy has moved away from the reference
    assert all(line["train/kl"] is None for line in lines)  # NaN (null): no KL term in the loss


def test_kl_in_the_reward_needs_a_beta(tmp_path, lm_dir, capsys):
    assert run_train(tmp_path, lm_dir, "--config.train.kl_in_reward=True", "--config.train.beta=0") == 2
    assert "train.kl_in_reward=True needs train.beta > 0" in capsys.readouterr().err
    assert not (tmp_path / "logs" / "run").exists()


def test_final_manifest_records_the_language_models_sampling(tmp_path, lm_dir):
    from ml_collections import ConfigDict

    from ddpo_grpo.checkpoint import final_manifest

    policy = policy_of(lm_dir, temperature=0.7, top_p=0.9, max_prompt_length=16, max_response_length=8, stop=("\n",))
    config = ConfigDict({"train": {"use_lora": False}, "sample": {}})
    sampling = final_manifest(config, policy, str(lm_dir))["sampling"]
    assert sampling == {
        "temperature": 0.7,
        "top_p": 0.9,
        "max_prompt_length": 16,
        "max_response_length": 8,
        "stop": ["\n"],
    }
