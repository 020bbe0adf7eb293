"""Tests for ddpo_grpo.metrics_log and image_grids (no network)."""

import importlib.util
import json
import os
import time

import numpy as np
import pytest
import torch
from PIL import Image

from ddpo_grpo.image_grids import make_grid_uint8
from ddpo_grpo.metrics_log import TRACKERS, MetricsLogger


def _read(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_jsonl_lines_nan_and_append(tmp_path):
    run = tmp_path / "run"
    with MetricsLogger(str(run)) as lg:
        lg.log(
            {
                "loss": torch.tensor(0.5),
                "kl": np.float32(0.25),
                "n": np.int64(3),
                "bad": float("nan"),
                "inf": float("inf"),
                "name": "x",
            },
            epoch=0,
            global_step=1,
        )
        lg.log({"loss": 0.1}, epoch=1, global_step=2)
        rows = _read(run / "metrics.jsonl")  # flushed per line, readable before close
    assert rows[0] == {
        "epoch": 0,
        "global_step": 1,
        "loss": 0.5,
        "kl": 0.25,
        "n": 3,
        "bad": None,
        "inf": None,
        "name": "x",
    }
    assert rows[1] == {"epoch": 1, "global_step": 2, "loss": 0.1}
    with MetricsLogger(str(run)) as lg:  # resume appends
        lg.log({"loss": 0.2}, epoch=2, global_step=3)
    assert [r["global_step"] for r in _read(run / "metrics.jsonl")] == [1, 2, 3]


def test_resume_moves_replayed_rows_aside(tmp_path):
    run = tmp_path / "run"
    with MetricsLogger(str(run)) as lg:
        for epoch in range(4):
            lg.log({"loss": float(epoch)}, epoch=epoch, global_step=epoch + 1)
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"epoch": 4, "glo')  # torn by a crash mid-write
    with MetricsLogger(str(run), resume_epoch=2) as lg:  # resumed from the checkpoint of epoch 1
        assert lg.superseded == 3
        lg.log({"loss": 2.5}, epoch=2, global_step=3)
    assert [(r["epoch"], r["loss"]) for r in _read(run / "metrics.jsonl")] == [(0, 0.0), (1, 1.0), (2, 2.5)]
    moved = (run / "metrics.superseded.jsonl").read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in moved[:2]] == [2, 3] and moved[2] == '{"epoch": 4, "glo'
    with MetricsLogger(str(run), resume_epoch=3) as lg:  # nothing to move: the files stay as they are
        assert lg.superseded == 0
    assert len((run / "metrics.superseded.jsonl").read_text().splitlines()) == 3
    assert not [p.name for p in run.iterdir() if ".tmp" in p.name]


def test_bad_metric_and_closed(tmp_path):
    lg = MetricsLogger(str(tmp_path))
    with pytest.raises(ValueError, match="'vec'.*scalar"):
        lg.log({"vec": torch.zeros(3)}, epoch=0, global_step=0)
    lg.close()
    lg.close()
    with pytest.raises(RuntimeError, match="closed"):
        lg.log({"a": 1.0}, epoch=0, global_step=0)


def test_image_grid(tmp_path):
    lg = MetricsLogger(str(tmp_path))
    imgs = torch.rand(5, 3, 16, 12)
    path = lg.log_images(imgs, [f"p{i}" for i in range(5)], epoch=7, global_step=3, nrow=3)
    lg.close()
    assert path == str(tmp_path / "samples" / "epoch_00007.png")
    im = Image.open(path)
    assert im.size == (3 * (96 + 2) + 2, 2 * (128 + 2) + 2)  # 16 x 12 images enlarged 8x: tiles >= 128 px
    assert json.loads(im.text["captions"]) == [f"p{i}" for i in range(5)]
    assert not [p for p in os.listdir(tmp_path / "samples") if ".tmp" in p]
    grid = np.asarray(im)
    first = np.round(imgs[0].numpy().transpose(1, 2, 0) * 255).astype(np.uint8)
    np.testing.assert_array_equal(grid[2:130:8, 2:98:8], first)  # nearest neighbour: every 8th pixel is a source one
    np.testing.assert_array_equal(grid[2:130, 2:98], first.repeat(8, 0).repeat(8, 1))


def test_grid_default_nrow():
    g = make_grid_uint8(np.zeros((4, 8, 8, 3), np.uint8))
    assert g.shape == (2 * 10 + 2, 2 * 10 + 2, 3)


def test_caption_mismatch(tmp_path):
    with MetricsLogger(str(tmp_path)) as lg:
        with pytest.raises(ValueError, match="2 images but 1 captions"):
            lg.log_images(torch.rand(2, 3, 4, 4), ["a"], epoch=0, global_step=0)


def test_disabled_is_noop(tmp_path):
    run = tmp_path / "run"
    lg = MetricsLogger(str(run), tracker="wandb", enabled=False)
    lg.log({"a": 1.0}, epoch=0, global_step=0)
    assert lg.log_images(torch.rand(1, 3, 4, 4), ["a"], epoch=0, global_step=0) is None
    lg.close()
    assert not run.exists()


def test_invalid_tracker(tmp_path):
    with pytest.raises(ValueError, match=r"logging\.tracker='nope'.*none.*tensorboard.*wandb"):
        MetricsLogger(str(tmp_path), tracker="nope")
    assert set(TRACKERS) == {"none", "wandb", "tensorboard"}


def test_tensorboard(tmp_path):
    if importlib.util.find_spec("tensorboard") is None:
        with pytest.raises(ValueError, match="pip install tensorboard"):
            MetricsLogger(str(tmp_path), tracker="tensorboard")
    else:
        with MetricsLogger(str(tmp_path), tracker="tensorboard", config={"a": 1}) as lg:
            lg.log({"loss": 1.0}, epoch=0, global_step=0)
            lg.log_images(torch.rand(2, 3, 8, 8), ["a", "b"], epoch=0, global_step=0)
        assert (tmp_path / "tensorboard").is_dir()


def test_wandb_offline(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no_netrc"))
    run = tmp_path / "run"
    t0 = time.time()
    lg = MetricsLogger(str(run), tracker="wandb", project="test", run_name="t", config={"lr": 1e-4})
    lg.log({"loss": 1.0, "nan": float("nan")}, epoch=0, global_step=1)
    lg.log_images(torch.rand(2, 3, 8, 8), ["a", "b"], epoch=0, global_step=1)
    lg.close()
    assert time.time() - t0 < 30
    run_id = (run / "wandb_run_id").read_text()
    assert any(run_id in p for p in os.listdir(run / "wandb"))
    assert _read(run / "metrics.jsonl")[0]["nan"] is None
