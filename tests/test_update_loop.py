"""The update phase as a loop that owns its types: driven by data, settings and the parts that act on a minibatch
(no trainer, no closures), with one source of defaults for its settings and one entry point for a run's parts."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from config.base import get_config
from ddpo_grpo.inner_loop import LoopSettings, MinibatchResult, train_objective, train_supervised
from ddpo_grpo.rollout import Rollout
from ddpo_grpo.seeding import derive_seed
from ddpo_grpo.supervised import SupervisedSettings
from ddpo_grpo.updates import UpdateSettings

REPO = Path(__file__).resolve().parents[1]
ACC = SimpleNamespace(process_index=0, device=torch.device("cpu"))  # one process: reduce is the identity


def _rollout(n: int, k: int = 3) -> Rollout:
    return Rollout(
        latents=torch.arange(n, dtype=torch.float32).reshape(n, 1, 1).repeat(1, 2, 1),
        log_probs=torch.zeros(n, 1),
        timesteps=torch.zeros(n, 1),
        kernel_args={},
        noise_levels=torch.ones(n, 1),
        train_steps=torch.arange(k).repeat(n, 1),
        train_mask=torch.ones(n, k, dtype=torch.bool),
        cond={},
        samples=torch.zeros(n, 1),
        prompts=[f"p{i}" for i in range(n)],
        metadata=[{"i": i} for i in range(n)],
    )


class _Step:
    def __init__(self):
        self.steps, self.epochs = [], 0

    def start_epoch(self):
        self.epochs += 1

    def __call__(self, epoch):
        self.steps.append(epoch)
        return 1.0


class _Update:
    """Records what the loop hands it; every sample's approx-KL is ``kl``."""

    def __init__(self, kl: float):
        self.kl, self.calls, self.prepared = kl, [], None

    def prepare(self, epoch, rollout, advantages):
        self.prepared = (epoch, len(rollout), advantages.tolist())

    def minibatch(self, batch, adv, index, *, sync, weight, check):
        assert [int(p[1:]) for p in batch.prompts] == index.tolist()  # the samples are the indexed ones
        assert torch.equal(batch.latents[:, 0, 0], index.float())
        self.calls.append(
            {"index": index.tolist(), "adv": adv.tolist(), "sync": sync, "weight": weight, "check": check}
        )
        result = MinibatchResult()
        result.add("approx_kl", torch.full((len(adv),), self.kl), torch.ones(len(adv)))
        result.counts["skipped_samples"] = 1
        result.mismatch = 0.25 if check else float("nan")
        return result


class _Supervised:
    def __init__(self):
        self.calls = []

    def backward(self, rows, *, lam_sup, epoch, key, sync):
        self.calls.append({"rows": rows, "lam_sup": lam_sup, "epoch": epoch, "key": key, "sync": sync})
        result = MinibatchResult()
        result.counts["sup_skipped"] = 2
        return result


def _settings(**changes) -> LoopSettings:
    base = dict(batch_size=2, accumulation=2, num_inner_epochs=3, kl_threshold=0.0, shuffle_steps=True, seed=7)
    return LoopSettings(**{**base, **changes})


def test_the_loop_takes_data_and_parts_and_hands_back_what_it_did():
    """Every inner epoch: one permutation of the samples from (seed, epoch, process, inner, 3), minibatches of
    train.batch_size in its order with their own advantages, an optimizer step every accumulation minibatches, the
    on-policy check on the very first minibatch only."""
    n, epoch = 8, 5
    advantages = torch.arange(n, dtype=torch.float32) / 10
    update, step = _Update(kl=0.0), _Step()
    out = train_objective(_rollout(n), advantages, _settings(), epoch=epoch, update=update, step=step, acc=ACC)
    assert update.prepared == (epoch, n, advantages.tolist())
    assert step.epochs == 1 and step.steps == [epoch] * 6  # 3 inner epochs × (4 minibatches / 2 accumulated)
    assert out.inner_epochs_run == 3 and out.grad_norm == 1.0 and out.mismatch == 0.25
    assert out.counts == {"skipped_samples": 12}
    for inner in range(3):
        calls = update.calls[4 * inner : 4 * inner + 4]
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(derive_seed(7, epoch, 0, inner, 3)))
        assert [i for c in calls for i in c["index"]] == perm.tolist()
        assert all(c["adv"] == pytest.approx(advantages[c["index"]].tolist()) for c in calls)
        assert [c["sync"] for c in calls] == [False, True, False, True]
        assert [c["check"] for c in calls] == [inner == 0, False, False, False]
        assert all(c["weight"] == 1.0 for c in calls)


def test_the_kl_early_stop_ends_the_passes():
    for kl, threshold, passes in ((1.0, 0.5, 1), (0.1, 0.5, 3), (1.0, 0.0, 3)):
        update = _Update(kl=kl)
        out = train_objective(
            _rollout(4),
            torch.zeros(4),
            _settings(kl_threshold=threshold),
            epoch=0,
            update=update,
            step=_Step(),
            acc=ACC,
        )
        assert out.inner_epochs_run == passes and len(update.calls) == 2 * passes
        assert out.stats.mean("approx_kl") == pytest.approx(kl)


def test_the_supervised_term_is_mixed_in_before_each_minibatch_of_the_objective():
    update, supervised = _Update(kl=0.0), _Supervised()
    out = train_objective(
        _rollout(4),
        torch.zeros(4),
        _settings(num_inner_epochs=1),
        epoch=2,
        update=update,
        step=_Step(),
        acc=ACC,
        supervised=supervised,
        lam_sup=0.3,
        lam_pg=0.7,
    )
    assert [c["weight"] for c in update.calls] == [0.7, 0.7]
    for m, (sup, upd) in enumerate(zip(supervised.calls, update.calls, strict=True)):
        assert [r["i"] for r in sup["rows"]] == upd["index"] and sup["rows"][0]["prompt"] == f"p{upd['index'][0]}"
        assert (sup["lam_sup"], sup["epoch"], sup["sync"]) == (0.3, 2, False)  # the objective's backward syncs
        assert sup["key"] == (0, 2 * m)  # (inner epoch, the minibatch's first position): its noise's seed
    assert out.counts == {"skipped_samples": 2, "sup_skipped": 4}
    quiet = _Supervised()  # λ_sup = 0: not called
    train_objective(
        _rollout(4), torch.zeros(4), _settings(), epoch=0, update=_Update(0.0), step=_Step(), acc=ACC, supervised=quiet
    )
    assert quiet.calls == []


def test_supervised_only_epochs_loop_over_the_rows():
    rows = [{"prompt": f"p{i}"} for i in range(6)]
    supervised, step = _Supervised(), _Step()
    out = train_supervised(
        rows, _settings(batch_size=3, accumulation=1), epoch=4, supervised=supervised, lam_sup=1.0, step=step, acc=ACC
    )
    assert out.inner_epochs_run == 3 and len(step.steps) == 6
    for inner in range(3):
        calls = supervised.calls[2 * inner : 2 * inner + 2]
        perm = torch.randperm(6, generator=torch.Generator().manual_seed(derive_seed(7, 4, 0, inner, 3))).tolist()
        assert [r["prompt"] for c in calls for r in c["rows"]] == [f"p{i}" for i in perm]
        assert [c["key"] for c in calls] == [(inner, 0), (inner, 3)] and all(c["sync"] for c in calls)


# ------------------------------------------------------------------------------------------------- the house rules
def _tree(name: str) -> ast.Module:
    return ast.parse((REPO / "ddpo_grpo" / name).read_text(encoding="utf-8"))


def _imported_modules(tree: ast.Module) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_the_loop_owns_its_result_types():
    """inner_loop.py defines MinibatchResult, Stats and LoopOutcome and imports neither the updaters nor the trainer;
    the updaters and the supervised term use its MinibatchResult."""
    loop = _tree("inner_loop.py")
    assert {"MinibatchResult", "Stats", "LoopOutcome"} <= {n.name for n in loop.body if isinstance(n, ast.ClassDef)}
    assert not {"ddpo_grpo.updates", "ddpo_grpo.supervised", "ddpo_grpo.trainer"} & _imported_modules(loop)
    for name in ("updates.py", "supervised.py"):
        tree = _tree(name)
        assert not {"MinibatchResult", "Stats", "LoopOutcome"} & {
            n.name for n in tree.body if isinstance(n, ast.ClassDef)
        }
        assert "ddpo_grpo.inner_loop" in _imported_modules(tree)


def test_the_trainer_hands_the_loop_no_callbacks():
    """The update and supervised phases define no function or lambda (nothing for the loop to call back)."""
    trainer = next(n for n in _tree("trainer.py").body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    for method in trainer.body:
        if isinstance(method, ast.FunctionDef) and method.name in ("update_phase", "supervised_phase"):
            nested = [n for n in ast.walk(method) if n is not method and isinstance(n, (ast.FunctionDef, ast.Lambda))]
            assert not nested, f"Trainer.{method.name} defines callbacks"


def test_the_trainer_builds_its_parts_with_one_call_to_the_wiring():
    trainer = next(n for n in _tree("trainer.py").body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    init = next(n for n in trainer.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    calls = [n.attr for n in ast.walk(init) if isinstance(n, ast.Attribute) and getattr(n.value, "id", "") == "wiring"]
    assert calls == ["build_run"]


def test_the_epoch_holds_data_only():
    """Advantage keys are the advantage phase's (advantages.sample_keys), not the epoch layout's."""
    from ddpo_grpo.epoch import Epoch

    assert "keys" not in {f.name for f in dataclasses.fields(Epoch)}
    ep = Epoch.lay_out(0, [{"prompt": "a"}, {"prompt": "b"}], group_size=3, rank=1, per_process=2)
    assert ep.items == [(0, 2), (1, 0)]


@pytest.mark.parametrize("settings", [LoopSettings, UpdateSettings, SupervisedSettings])
def test_settings_take_their_values_from_the_config_only(settings):
    """No field repeats a default of config/base.py (which documents each): every value comes from the config."""
    defaults = [f.name for f in dataclasses.fields(settings) if f.default is not dataclasses.MISSING]
    defaults += [f.name for f in dataclasses.fields(settings) if f.default_factory is not dataclasses.MISSING]
    assert not defaults, f"{settings.__name__} fields with their own defaults: {defaults}"
    config = get_config()
    config.seed, config.train.gradient_accumulation_steps = 123, 3
    built = settings.from_config(config)
    assert built.seed == 123
    assert getattr(built, "accumulation", getattr(built, "gradient_accumulation_steps", None)) == 3
