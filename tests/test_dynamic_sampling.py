"""sample.dynamic_sampling_rounds: DAPO's dynamic sampling (ddpo_grpo/dynamic_sampling.py).

Each process trains its share of groups whose rewards differ, sampling extra rounds (their own prompts and noise)
while any process is short; the processes stay in step whichever of them is short (two processes, one short).
"""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from ddpo_grpo.advantage_modes import flat_groups
from ddpo_grpo.config_checks import ConfigError, validate
from ddpo_grpo.dynamic_sampling import pick_groups
from tests.processes import spawn
from tests.test_objectives import _tiny_config

pytestmark = pytest.mark.usefixtures("one_thread")


def test_flat_groups_and_the_picks():
    values = np.array([1, 1, 1, 1, 0, 1, 0, 0, 0.3, 0.1 + 0.2, 0.3, 0.3, np.nan, 1, 0, 1])
    assert flat_groups(values, 4).tolist() == [True, False, True, True]  # 0.1 + 0.2 is 0.3; NaN counts as flat
    rounds = [np.array([True, False]), np.array([False, True]), np.array([False, False])]
    assert pick_groups(rounds, 2) == [(0, 1), (1, 0)]  # groups with spread, in sampling order
    assert pick_groups(rounds, 4) == [(0, 1), (1, 0), (2, 0), (2, 1)]
    assert pick_groups(rounds[:2], 3) == [(0, 1), (1, 0), (0, 0)]  # too few: topped up with flat ones in order


def test_refused_when_a_group_would_span_processes(tmp_path):
    config = _tiny_config(tmp_path, "unused", "nft", **{"sample.dynamic_sampling_rounds": 2, "sample.batch_size": 2})
    config.sample.num_batches_per_epoch = 1  # 2 samples per process, groups of 4: groups span two processes
    with pytest.raises(ConfigError, match="sample.dynamic_sampling_rounds=2 keeps or drops whole groups"):
        validate(config, num_processes=2)
    config.sample.dynamic_sampling_rounds = -1
    with pytest.raises(ConfigError, match="must be an integer ≥ 0"):
        validate(config)


def _forced(trainer, flat_rounds: list[list[bool]]):
    """The trainer's rewards replaced, per round (call) and group of this process: all 0.5 for a flat group, the
    member index otherwise. Returns the list the rounds' rows are recorded in."""
    original, seen = trainer.reward_phase, []

    def reward_phase(ep, timing):
        scores = original(ep, timing)
        flags = flat_rounds[min(len(seen), len(flat_rounds) - 1)]
        seen.append([ep.rows[g]["prompt"] for g, m in ep.items if m == 0])
        members = np.array([m for _, m in ep.items], dtype=np.float32)
        groups = np.array([flags[i // trainer.config.sample.group_size] for i in range(len(members))])
        return {name: np.where(groups, 0.5, members) for name in scores}

    trainer.reward_phase = reward_phase
    return seen


def test_extra_rounds_until_the_share_is_full(tmp_path, tiny_dirs):
    from ddpo_grpo.trainer import Trainer

    trainer = Trainer(_tiny_config(tmp_path, tiny_dirs["sd3"], "nft", **{"sample.dynamic_sampling_rounds": 3}))
    seen = _forced(trainer, [[True, True], [True, False], [False, True], [False, False]])
    ep, scores, _, metrics = trainer.sampled_epoch(0)
    assert metrics["sample/rounds"] == 3 and metrics["sample/images"] == 3 * trainer.totals["images_per_epoch"]
    assert metrics["sample/frac_flat_sampled"] == pytest.approx(4 / 6) and metrics["sample/frac_flat_trained"] == 0
    assert [r["prompt"] for r in ep.rows] == [seen[1][1], seen[2][0]]  # round 1's second group, round 2's first
    assert seen[1] != seen[0] and seen[2] != seen[1]  # each round draws its own prompts
    assert ep.items == [(g, m) for g in range(2) for m in range(4)] and len(ep.rollout) == 8
    np.testing.assert_array_equal(next(iter(scores.values())), np.tile(np.arange(4), 2))
    first = trainer.sample_phase(0)[0].rollout
    again = trainer.sample_phase(0, 1)[0].rollout
    assert not torch.allclose(first.latents, again.latents)  # a round has its own noise
    torch.testing.assert_close(again.latents[4:], ep.rollout.latents[:4])  # the picked group is the sampled one
    advantages, stats = trainer.advantage_phase(ep, scores)
    assert stats["adv/frac_zero_std"] == 0 and bool((advantages != 0).all())


def test_off_is_one_round_and_the_same_epoch(tmp_path, tiny_dirs):
    from ddpo_grpo.trainer import Trainer

    trainer = Trainer(_tiny_config(tmp_path, tiny_dirs["sd3"], "nft"))
    ep, _, _, metrics = trainer.sampled_epoch(0)
    assert metrics == {"sample/images": trainer.totals["images_per_epoch"]}
    torch.testing.assert_close(ep.rollout.latents, trainer.sample_phase(0)[0].rollout.latents)


def _two_processes(rank: int, root: str, model: str) -> None:
    from accelerate.state import AcceleratorState

    from ddpo_grpo.trainer import Trainer

    AcceleratorState._reset_state(reset_partial_state=True)  # (the forked test process's one-process state)

    config = _tiny_config(Path(root), model, "nft", **{"sample.dynamic_sampling_rounds": 2})
    trainer = Trainer(config)
    # process 0 has its share in round 0; process 1 finds one group with spread per round: both sample 3 rounds
    flags = [[False, False]] if rank == 0 else [[True, True], [False, True], [True, False]]
    seen, merged = _forced(trainer, flags), []
    advantage_phase = trainer.advantage_phase
    trainer.advantage_phase = lambda ep, scores: (
        merged.append([r["prompt"] for r in ep.rows]) or advantage_phase(ep, scores)
    )
    trainer.run()
    rows = [json.loads(line) for line in (trainer.run_dir / "metrics.jsonl").read_text().splitlines()]
    signal = trainer.run_dir / "report" / "signal.md"
    out = {"rounds_sampled": len(seen), "metrics": rows[-1], "seen": seen, "merged": merged}
    out["signal"] = signal.read_text().splitlines() if rank == 0 else None
    (Path(root) / f"rank{rank}.json").write_text(json.dumps(out))


def test_two_processes_stay_in_step_when_one_is_short(tmp_path, tiny_dirs):
    spawn(_two_processes, str(tmp_path), tiny_dirs["sd3"])
    a, b = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert a["rounds_sampled"] == b["rounds_sampled"] == 3  # process 0 samples the rounds process 1 needs
    assert a["metrics"]["sample/rounds"] == 3 and a["metrics"]["sample/frac_flat_trained"] == 0
    assert a["merged"] == b["merged"] and len(a["merged"][0]) == 4  # one global layout of the picked groups
    assert a["merged"][0][:2] == a["seen"][0] and a["merged"][0][2:] == [b["seen"][1][0], b["seen"][2][1]]
    assert np.isfinite(a["metrics"]["train/loss"])
    assert a["signal"][2].startswith("| 0 | 48 | 0.000 |")  # the report's signal table counts every round's images
