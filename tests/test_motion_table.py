"""The HumanML3D-style table (worlds/motion/table.py) and the metrics it adds (MultiModality, MM-Dist)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from worlds.motion.evaluator import embedding_metrics, multimodality
from worlds.motion.table import format_table, motion_table, set_block


def test_multimodality_is_the_mean_within_prompt_distance():
    # prompt "a": two motions 2 apart, prompt "b": three on a line 0, 1, 3 apart; "c" alone (left out)
    emb = np.array([[0.0, 0.0], [2.0, 0.0], [0.0, 0.0], [0.0, 1.0], [0.0, 3.0], [9.0, 9.0]])
    texts = ["a", "a", "b", "b", "b", "c"]
    value, n = multimodality(emb, texts, pairs=4000, seed=0)
    # "a": every pair is 2 apart; "b": pairs (0,1) 1, (0,3) 3, (1,3) 2, equally likely: 2 on average
    assert n == 2 and abs(value - 2.0) < 0.05
    assert math.isnan(multimodality(emb, ["a", "b", "c", "d", "e", "f"])[0])
    m = embedding_metrics(emb, emb, emb, texts)
    assert m["mm_dist"] == m["matching_score"] == 0.0 and m["multimodality_texts"] == 2


def test_set_block_bootstrap_pairs_the_two_sides():
    rng = np.random.default_rng(0)
    texts = [f"p{i % 12}" for i in range(48)]  # 12 prompts x 4 motions
    t = rng.normal(size=(48, 8))
    t /= np.linalg.norm(t, axis=1, keepdims=True)
    t = t[[i % 12 for i in range(48)]]  # one text embedding per prompt
    model = t + 0.3 * rng.normal(size=t.shape)
    ref = t + 0.3 * rng.normal(size=t.shape)
    same = set_block({"model": (model, t), "base": (model, t)}, ref, texts, boot=50)
    worse = set_block({"model": (model, t), "base": (t + 1.0 * rng.normal(size=t.shape), t)}, ref, texts, boot=50)
    for key in ("r_precision_top1", "fid", "mm_dist", "diversity", "multimodality"):
        assert same[key]["diff"]["value"] == 0.0 and same[key]["diff"]["se"] == 0.0, key
        assert same[key]["model"]["se"] > 0.0, key
    # a noisier base: the model's MM-Dist is lower by far more than the paired SE
    d = worse["mm_dist"]["diff"]
    assert d["value"] < -5 * d["se"] and worse["mm_dist"]["model"]["value"] < worse["mm_dist"]["base"]["value"]


@pytest.fixture(scope="module")
def scored():
    from reward_models import load_reward
    from worlds.motion.evaluation import with_physics
    from worlds.motion.generator import generate
    from worlds.motion.grammar import load_split

    rows = load_split("test")[:4] + load_split("test")[-4:]
    feats, prompts = [], []
    for k in range(2):
        for i, r in enumerate(rows):
            feats.append(generate(r["prompt"], 100 + 10 * i + k, 97).features())
            prompts.append(r["prompt"])
    reward = with_physics(load_reward("motion_judge", score="strict"))
    _, info = reward(feats, prompts, rows + rows)
    values = {k: v for k, v in info.items() if isinstance(v, list) and k != "task"}
    return feats, prompts, values, info["task"]


def test_table_against_itself_and_its_format(scored):
    feats, prompts, values, groups = scored
    table = motion_table(feats, prompts, values, groups, base={"features": feats, "prompts": prompts, "values": values})
    rows = table["rows"]
    for key in ("r_precision_top1", "multimodality", "strict/sequence", "strict/task_mean", "skate", "sane"):
        assert rows[key]["diff"]["value"] == 0.0 and rows[key]["model"] == rows[key]["base"], key
    assert rows["strict/task_mean"]["model"]["value"] == 1.0  # real clips: the judge passes them all
    assert rows["r_precision_top1"]["model"]["value"] == 1.0 and rows["sane"]["model"]["value"] == 1.0
    assert rows["multimodality"]["model"]["texts"] == 8
    text = format_table(table)
    assert text.splitlines()[0] == "| metric | base | model | model − base |"
    assert "| judge strict, mean over tasks ↑ | 1.000 ± 0.000 | 1.000 ± 0.000 | +0.000 ± 0.000 |" in text
    with pytest.raises(ValueError, match="same prompts"):
        motion_table(
            feats, prompts, values, groups, base={"features": feats, "prompts": prompts[::-1], "values": values}
        )


def test_table_cli_reads_sample_directories(tmp_path, scored, capsys):
    """python -m worlds.motion table DIR: motion files through read_samples, a bad one refused in one line."""
    import json

    from worlds.motion.__main__ import main

    feats, prompts, _, _ = scored
    lines = []
    for i, (x, p) in enumerate(zip(feats, prompts)):
        np.save(tmp_path / f"{i:05d}.npy", np.asarray(x, dtype=np.float32))
        lines.append(json.dumps({"prompt": p, "file": f"{i:05d}.npy"}))
    (tmp_path / "index.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    main(["table", str(tmp_path), "--boot", "20"])
    out = capsys.readouterr().out
    assert "| R-precision top-1 ↑ | 1.000 ± 0.000 |" in out and "B = 20" in out
    np.save(tmp_path / "00003.npy", np.asarray(feats[3])[:, :200])
    with pytest.raises(SystemExit) as exc:
        main(["table", str(tmp_path), "--boot", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "00003.npy" in err and "(96, 200)" in err and "263" in err
