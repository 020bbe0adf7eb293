"""Tests for ddpo_grpo.checkpoint: round trip, pruning, crash safety, lookup, RNG state."""

import json
import os
import random

import numpy as np
import pytest
import torch

from ddpo_grpo import checkpoint as ck
from ddpo_grpo.checkpoint import (
    find_checkpoint,
    list_checkpoints,
    load_checkpoint,
    rng_state,
    save_checkpoint,
    set_rng_state,
)


def _model_and_opt(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(5, 4)).pow(2).mean().backward()
        opt.step()
    return model, opt


def _save(run_dir, epoch, value=0.0, **kw):
    return save_checkpoint(
        run_dir,
        epoch,
        tensors={"model": {"w": torch.full((2, 2), float(value))}},
        optimizer_state=None,
        state={"global_step": epoch * 10},
        **kw,
    )


def test_round_trip(tmp_path):
    model, opt = _model_and_opt()
    base = torch.arange(12.0)
    ema = {
        "a": base[:6].view(2, 3),
        "b": base[6:],
        "bf": torch.ones(3, dtype=torch.bfloat16),
        "t": torch.randn(3, 4).t(),
    }  # shared storage + non-contiguous + bf16
    state = {"global_step": 7, "stat_tracker": {"a cat": [1.0, float("nan")]}, "rng": rng_state()}
    path = save_checkpoint(
        tmp_path,
        3,
        tensors={"model": model.state_dict(), "ema": ema},
        optimizer_state=opt.state_dict(),
        state=state,
        keep_last=None,
    )
    assert path == tmp_path / "checkpoints" / "epoch_000003"
    assert sorted(os.listdir(path)) == ["ema.safetensors", "model.safetensors", "optimizer.pt", "state.json"]
    assert not [p for p in os.listdir(path.parent) if p.startswith(".")]

    ck_data = load_checkpoint(tmp_path)
    assert ck_data["path"] == path
    assert ck_data["state"]["epoch"] == 3 and ck_data["state"]["global_step"] == 7
    assert np.isnan(ck_data["state"]["stat_tracker"]["a cat"][1])
    for k, v in model.state_dict().items():
        assert torch.equal(ck_data["tensors"]["model"][k], v)
    for k, v in ema.items():
        assert torch.equal(ck_data["tensors"]["ema"][k], v) and ck_data["tensors"]["ema"][k].dtype == v.dtype

    # restore optimizer exactly: further steps match bit for bit
    model2, _ = _model_and_opt(seed=1)
    model2.load_state_dict(ck_data["tensors"]["model"])
    opt2 = torch.optim.AdamW(model2.parameters(), lr=0.5)
    opt2.load_state_dict(ck_data["optimizer_state"])
    x = torch.randn(5, 4)
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        m(x).pow(2).mean().backward()
        o.step()
    for p1, p2 in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p1, p2)


def test_no_optimizer_and_bad_state(tmp_path):
    p = _save(tmp_path, 1)
    assert load_checkpoint(p)["optimizer_state"] is None
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        save_checkpoint(tmp_path, 2, tensors={}, optimizer_state=None, state={"x": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"tensors\['model'\]\['w'\].*torch.Tensor"):
        save_checkpoint(tmp_path, 2, tensors={"model": {"w": [1.0]}}, optimizer_state=None, state={})
    with pytest.raises(ValueError, match="stem"):
        save_checkpoint(tmp_path, 2, tensors={"../x": {}}, optimizer_state=None, state={})
    assert [c.name for c in list_checkpoints(tmp_path)] == ["epoch_000001"]
    assert not [n for n in os.listdir(tmp_path / "checkpoints") if n.startswith(".")]


def test_keep_last_and_overwrite(tmp_path):
    for e in range(1, 6):
        _save(tmp_path, e, keep_last=2)
    assert [c.name for c in list_checkpoints(tmp_path)] == ["epoch_000004", "epoch_000005"]
    _save(tmp_path, 5, value=9.0, keep_last=0)
    assert torch.equal(load_checkpoint(tmp_path)["tensors"]["model"]["w"], torch.full((2, 2), 9.0))
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["epoch_000004", "epoch_000005"]
    with pytest.raises(ValueError, match="keep_last"):
        _save(tmp_path, 6, keep_last=-1)


def _assert_intact(run_dir, expect_epoch, expect_value):
    names = os.listdir(run_dir / "checkpoints")
    assert all(n.startswith(".") or (run_dir / "checkpoints" / n / "state.json").is_file() for n in names)
    d = load_checkpoint(run_dir)
    assert d["state"]["epoch"] == expect_epoch
    assert torch.equal(d["tensors"]["model"]["w"], torch.full((2, 2), float(expect_value)))


def test_crash_in_replace_keeps_previous(tmp_path, monkeypatch):
    _save(tmp_path, 1, value=1.0)

    def boom(*a, **k):
        raise OSError("simulated crash")

    monkeypatch.setattr(ck.files.os, "replace", boom)
    with pytest.raises(OSError, match="simulated"):
        _save(tmp_path, 2, value=2.0)
    _assert_intact(tmp_path, 1, 1.0)
    with pytest.raises(OSError, match="simulated"):  # overwriting an existing epoch rolls back
        _save(tmp_path, 1, value=5.0)
    _assert_intact(tmp_path, 1, 1.0)


def test_crash_in_fsync_keeps_previous(tmp_path, monkeypatch):
    _save(tmp_path, 1, value=1.0)
    calls = []

    def flaky(path):
        calls.append(path)
        raise OSError("disk full")

    monkeypatch.setattr(ck.files, "_fsync_file", flaky)
    with pytest.raises(OSError, match="disk full"):
        _save(tmp_path, 2, value=2.0)
    assert calls
    _assert_intact(tmp_path, 1, 1.0)


def test_hard_crash_leftovers(tmp_path):
    _save(tmp_path, 1, value=1.0)
    root = tmp_path / "checkpoints"
    # a hard crash mid-write: hidden tmp dir that even has a state.json, plus an empty epoch dir
    stale = root / ".tmp-epoch_000009-12345"
    stale.mkdir()
    (stale / "state.json").write_text("{}")
    (stale / "model.safetensors").write_bytes(b"partial")
    assert find_checkpoint(tmp_path) == root / "epoch_000001"
    # a crash between moving an old epoch_000002 aside and moving its replacement in
    p2 = _save(tmp_path, 2, value=2.0)
    os.rename(p2, root / ".old-epoch_000002-999")
    assert find_checkpoint(tmp_path) == root / "epoch_000001"
    _save(tmp_path, 3, value=3.0)  # next save cleans tmp dirs and restores the orphaned old dir
    assert sorted(os.listdir(root)) == ["epoch_000001", "epoch_000002", "epoch_000003"]
    _assert_intact(tmp_path, 3, 3.0)


def test_find_checkpoint_forms(tmp_path):
    p1 = _save(tmp_path, 1)
    p10 = _save(tmp_path, 10)
    assert find_checkpoint(tmp_path) == p10  # numeric, not lexicographic, ordering
    assert find_checkpoint(str(tmp_path / "checkpoints")) == p10
    assert find_checkpoint(p1) == p1
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_checkpoint(tmp_path / "missing")
    with pytest.raises(ValueError, match="is a file"):
        find_checkpoint(p1 / "state.json")
    empty = tmp_path / "empty_run"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="no complete checkpoints"):
        find_checkpoint(empty)
    broken = tmp_path / "checkpoints" / "epoch_000020"
    broken.mkdir()
    assert find_checkpoint(tmp_path) == p10
    with pytest.raises(ValueError, match="incomplete"):
        find_checkpoint(broken)
    (p10 / "state.json").write_text("{bad")
    with pytest.raises(ck.CorruptCheckpointError, match="state.json is invalid JSON at line 1"):
        load_checkpoint(p10)


@pytest.mark.parametrize("damage", ["truncate_model", "truncate_optimizer", "garble_model", "delete_optimizer"])
def test_corrupt_file_is_named_and_latest_falls_back(tmp_path, damage):
    """A damaged file of the newest checkpoint is named, and load_latest falls back to the previous one."""
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    for epoch in (1, 2):
        save_checkpoint(
            tmp_path,
            epoch,
            tensors={"model": model.state_dict()},
            optimizer_state=opt.state_dict(),
            state={"tag": epoch},
        )
    newest = tmp_path / "checkpoints" / "epoch_000002"
    name = "model.safetensors" if "model" in damage else "optimizer.pt"
    target = newest / name
    if damage.startswith("truncate"):
        target.write_bytes(target.read_bytes()[:-7])
    elif damage == "garble_model":
        data = bytearray(target.read_bytes())
        data[:8] = b"\xff" * 8  # the safetensors header length
        target.write_bytes(bytes(data))
    else:
        target.unlink()
    with pytest.raises(ck.CorruptCheckpointError) as info:
        load_checkpoint(newest)
    assert info.value.file == name and name in str(info.value)
    logged = []
    loaded = ck.load_latest(tmp_path, log=logged.append)
    assert loaded["state"]["tag"] == 1 and loaded["path"].name == "epoch_000001"
    assert len(logged) == 1 and name in logged[0] and "epoch_000001" in logged[0]
    with pytest.raises(ck.CorruptCheckpointError):  # an explicit checkpoint directory is not replaced silently
        ck.load_latest(newest)


def test_nothing_non_finite_is_saved_or_resumed(tmp_path):
    good = _save(tmp_path, 1)
    with pytest.raises(ck.NonFiniteError, match=r"tensors\['model'\]\['w'\]"):
        save_checkpoint(
            tmp_path, 2, tensors={"model": {"w": torch.tensor([1.0, float("nan")])}}, optimizer_state=None, state={}
        )
    with pytest.raises(ck.NonFiniteError, match="optimizer state"):
        save_checkpoint(
            tmp_path,
            2,
            tensors={"model": {"w": torch.ones(1)}},
            optimizer_state={"state": {0: {"exp_avg": torch.tensor([float("inf")])}}},
            state={},
        )
    assert list_checkpoints(tmp_path) == [good]  # the refused saves left nothing behind
    assert not [n for n in os.listdir(tmp_path / "checkpoints") if n.startswith(".")]
    # a checkpoint that holds NaN weights (written by other means) is refused for resuming
    from safetensors.torch import save_file

    save_file({"w": torch.full((2, 2), float("nan"))}, str(good / "model.safetensors"))
    state = json.loads((good / "state.json").read_text())
    state.pop("_files")
    (good / "state.json").write_text(json.dumps(state))
    with pytest.raises(ck.NonFiniteError, match="non-finite"):
        ck.load_latest(tmp_path)


def test_rng_round_trip(tmp_path):
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    random.gauss(0, 1)  # populate gauss caches
    np.random.standard_normal()
    saved = json.loads(json.dumps(rng_state()))
    expected = (
        random.random(),
        random.gauss(0, 1),
        np.random.rand(3).tolist(),
        np.random.standard_normal(),
        torch.rand(4),
        torch.randn(2),
    )
    random.seed(99)
    np.random.seed(99)
    torch.manual_seed(99)
    set_rng_state(saved)
    got = (
        random.random(),
        random.gauss(0, 1),
        np.random.rand(3).tolist(),
        np.random.standard_normal(),
        torch.rand(4),
        torch.randn(2),
    )
    assert got[:4] == expected[:4]
    assert torch.equal(got[4], expected[4]) and torch.equal(got[5], expected[5])
