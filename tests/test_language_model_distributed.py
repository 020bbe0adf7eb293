"""A causal language model on two processes (gloo, forked: tests/processes.py): the one-command recipe
(``config/llm.py:grpo`` with the small overrides of tests/test_language_model.py) under ``distributed.strategy=ddp``
and under ``=fsdp`` with the decoder layers sharded, full fine-tune and LoRA, in one launch.

Checked per run: it finishes; the two processes sample the items of different prompt groups, together the epoch's;
``train/loss`` is finite and ``train/logp_mismatch`` ≤ 1e-4; DDP leaves the same trained weights on both processes;
the sharded full fine-tune's final/ (gathered from the shards) equals DDP's and plain ``AutoModelForCausalLM`` loads
it; the sharded LoRA run's final/ is peft's format, loaded by ``PeftModel``, and moved the model.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch

from tests.lm_kit import REWARD_FILE, build_tiny_lm, write_rows
from tests.processes import spawn

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: run name -> (distributed.strategy, train.use_lora, train.learning_rate); "fsdp_per_token": the sharded model not
#: gathered over a batch (distributed.gather_for_sampling=False), so every token's forward is a collective and the
#: processes, whose responses end at different lengths, must take the same number of sampling steps
RUNS = {
    "ddp": ("ddp", False, 1e-3),
    "fsdp": ("fsdp", False, 1e-3),
    "fsdp_lora": ("fsdp", True, 1e-2),
    "fsdp_per_token": ("fsdp", False, 1e-3),
}


def lm_config(root: Path, name: str, strategy: str, lora: bool, lr: float):
    """``config/llm.py:grpo`` with tests/test_language_model.py's run_train overrides (2 epochs of 2 prompts × 4
    responses; each process samples one group of 4 and trains it in two minibatches of 2 accumulated into one
    optimizer step: the first backward inside the updater's ``no_sync``)."""
    from config.llm import grpo

    config = grpo()
    config.pretrained.model = str(root / "model")
    config.prompts.source = str(root / "rows.json")
    config.reward.sources = {"sum": f"{root / 'reward.py'}:compute_score"}
    config.reward.fns = {"sum": 1.0}
    config.num_epochs = 2
    s, t = config.sample, config.train
    s.batch_size, s.group_size, s.num_batches_per_epoch = 4, 4, 1
    s.max_prompt_length, s.max_response_length = 32, 8
    t.batch_size, t.gradient_accumulation_steps, t.gradient_checkpointing = 2, 2, False  # (no_sync, then sync)
    t.use_lora, t.learning_rate, t.beta = lora, lr, 0.04
    config.mixed_precision = "no"
    config.distributed.strategy = strategy
    config.distributed.gather_for_sampling = name != "fsdp_per_token"
    if name == "fsdp_per_token":  # responses that end early, at lengths that differ between the processes
        s.stop = ("1", "2", "3")
    config.logdir, config.run_name, config.logging.progress = str(root / "logs"), name, False
    return config


class Recording:
    """The run's sampler, recording the prompts of every batch it samples."""

    def __init__(self, inner, seen: list):
        self.inner, self.seen = inner, seen

    def __call__(self, rows, *args, **kwargs):
        self.seen.append([r["prompt"] for r in rows])
        return self.inner(rows, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _lm_runs(rank: int, root: str) -> None:
    from ddpo_grpo.trainer import Trainer

    root = Path(root)
    for name, (strategy, lora, lr) in RUNS.items():
        trainer = Trainer(lm_config(root, name, strategy, lora, lr))
        seen = []
        trainer.rollout = Recording(trainer.rollout, seen)
        trainer.run()
        (root / f"{name}_rank{rank}.json").write_text(json.dumps({"prompts": seen}))
        if strategy == "ddp":  # each process's own trained weights
            weights = {k: p.detach().cpu().clone() for k, p in trainer.params.items()}
            torch.save(weights, root / f"{name}_rank{rank}.pt")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The three runs on two processes (≈ 25 s on an idle 2-core machine, ≈ 45 s loaded: the tests using it are
    slow-marked; the export they rely on is checked in one process below)."""
    root = tmp_path_factory.mktemp("lm2")
    build_tiny_lm(root / "model")
    write_rows(root / "rows.json", 8)
    (root / "reward.py").write_text(REWARD_FILE)
    spawn(_lm_runs, str(root))
    return root


def _rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _max_diff(a: dict, b: dict) -> float:
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUNS))
def test_each_process_samples_its_own_groups_and_the_run_stays_on_policy(runs, name):
    seen = [json.loads((runs / f"{name}_rank{r}.json").read_text())["prompts"] for r in (0, 1)]
    assert len(seen[0]) == len(seen[1]) == 2  # one batch per epoch, two epochs
    for epoch in range(2):
        mine, theirs = seen[0][epoch], seen[1][epoch]
        assert len(set(mine)) == 1 and len(mine) == 4  # one prompt's group of 4 responses per process
        assert set(mine) != set(theirs)  # the other process samples another prompt
    rows = _rows(runs / "logs" / name)
    assert [r["epoch"] for r in rows] == [0, 1]
    for row in rows:
        assert math.isfinite(row["train/loss"]) and math.isfinite(row["train/kl"])
        assert row["train/logp_mismatch"] <= 1e-4


@pytest.mark.slow
def test_ddp_leaves_the_same_weights_on_both_processes(runs):
    a, b = (torch.load(runs / f"ddp_rank{r}.pt") for r in (0, 1))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_sharded_full_finetune_equals_ddp_and_loads_in_plain_transformers(runs):
    """Fails where the export of a sharded language model rebuilt it by diffusers' ``from_config`` or re-read the
    base model in place of the gathered weights."""
    from transformers import AutoModelForCausalLM

    logs = runs / "logs"
    base, ddp, fsdp = (
        AutoModelForCausalLM.from_pretrained(p).state_dict()
        for p in (runs / "model", logs / "ddp" / "final", logs / "fsdp" / "final")
    )
    moved = _max_diff(ddp, base)
    assert moved > 1e-4
    assert _max_diff(fsdp, ddp) <= 1e-6  # the same update, sharded or not
    saved = torch.load(runs / "ddp_rank0.pt")
    assert all(torch.equal(ddp[k], saved[k]) for k in saved)  # DDP's final/ is its trained weights


@pytest.mark.slow
def test_sharded_lora_exports_peft_files_that_move_the_model(runs):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    final = runs / "logs" / "fsdp_lora" / "final"
    assert (final / "adapter_config.json").is_file()
    merged = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(runs / "model"), final).merge_and_unload()
    base = AutoModelForCausalLM.from_pretrained(runs / "model").state_dict()
    assert _max_diff(merged.state_dict(), base) > 1e-5


def test_the_export_of_a_sharded_language_model_rebuilds_it_from_the_gathered_weights(tmp_path):
    """In one process, what the sharded export does with the gathered state dict (run_state.export): a plain copy of
    the model built from its config (``whole_from``; a transformers class has no diffusers ``from_config``), tied
    weights tied again, and ``load_pipeline(base, components=…)`` keeping that copy instead of re-reading the base."""
    from transformers import AutoModelForCausalLM

    from ddpo_grpo.policies import load_pipeline
    from ddpo_grpo.sharded_loading import whole_from

    base = build_tiny_lm(tmp_path / "model")
    trained = AutoModelForCausalLM.from_pretrained(base)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.01)
    state = {k: v.clone() for k, v in trained.state_dict().items()}
    whole = whole_from(trained, state)
    assert whole.lm_head.weight is whole.model.embed_tokens.weight  # tied, as from_pretrained ties them
    pipeline = load_pipeline(str(base), components={"model": whole})
    assert pipeline.model is whole
    pipeline.save_pretrained(str(tmp_path / "final"))
    again = AutoModelForCausalLM.from_pretrained(tmp_path / "final").state_dict()
    assert all(torch.equal(again[k], state[k]) for k in state)
