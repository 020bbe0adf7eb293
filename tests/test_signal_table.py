"""The learning signal per epoch (ddpo_grpo/signal_table.py): flat groups, reward spread, per task, held out."""

import json

from ddpo_grpo.advantages import group_spread
from ddpo_grpo.signal_table import read_metrics, signal_table


def test_group_spread_per_task():
    rows = [{"task": "a"}, {"task": "b"}, {"task": "a"}]
    values = [1.0, 1.0, 0.0, 1.0, 0.5, 0.5]  # a: flat; b: spread 0.5; a: flat
    out = group_spread(values, rows, 2, "task")
    assert out == {"reward/group_std": 0.5 / 3, "adv/frac_flat/a": 1.0, "adv/frac_flat/b": 0.0}
    assert group_spread(values, rows, 2, "") == {"reward/group_std": 0.5 / 3}


def test_table_from_a_resumed_runs_metrics(tmp_path):
    epochs = [
        {"epoch": 0, "sample/images": 512, "adv/frac_zero_std": 0.25, "reward/group_std": 0.3},
        {"epoch": 1, "sample/images": 256, "adv/frac_zero_std": 0.5, "reward/group_std": 0.2},
    ]
    for row, flat in zip(epochs, (0.0, 1.0)):
        row.update({"adv/frac_flat/easy": 1.0, "adv/frac_flat/hard": flat, "reward/shapes/mean": 0.5})
        row.update({"reward/task/easy": 1.0, "reward/task/hard": 0.25})
    epochs[1].update({"eval/task_mean/strict": 0.6, "eval/strict/hard": 0.2, "eval/strict/easy": 1.0})
    lines = [json.dumps(r) for r in (epochs[0], {**epochs[0], "adv/frac_zero_std": 0.9}, epochs[1])]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")  # epoch 0 logged twice (a resume): the last wins
    table = signal_table(read_metrics(tmp_path)).splitlines()
    assert table[0] == (
        "| epoch | images | flat | spread | flat easy | flat hard | train easy | train hard "
        "| held-out (eval/task_mean/strict) | held-out easy | held-out hard |"
    )
    assert table[2] == "| 0 | 512 | 0.900 | 0.300 | 1.000 | 0.000 | 1.000 | 0.250 |  |  |  |"
    assert table[3] == "| 1 | 768 | 0.500 | 0.200 | 1.000 | 1.000 | 1.000 | 0.250 | 0.600 | 1.000 | 0.200 |"
    assert signal_table([{"epoch": 0, "train/loss": 1.0}]) == ""
    counted = {"epoch": 0, "adv/frac_zero_std": 0.0, "eval/num_samples": 8, "eval/score": 0.5}
    assert signal_table([counted]).splitlines()[0].endswith("| held-out (eval/score) |")  # a count is no headline
