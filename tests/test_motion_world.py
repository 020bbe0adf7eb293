"""MotionWorld grammar, split, generator and judge: labels agree, wrong prompts fail, split holds out compositions."""

from __future__ import annotations

import numpy as np
import pytest

from worlds.motion import grammar as G
from worlds.motion.features import recover_joints
from worlds.motion.generator import generate, generate_dataset
from worlds.motion.judge import (
    SOFT_DISPLACEMENT_M,
    SOFT_YAW_DEG,
    action_checks,
    check_spec,
    count_flights,
    count_reversals,
    judge,
    mismatches,
    signals,
)
from worlds.motion.skeleton import CONTACT_JOINTS, bone_lengths


def _sample(per_task: int, seed: int = 0) -> list[G.MotionSpec]:
    """Every single-action prompt plus ``per_task`` random prompts of each composed task."""
    rng = np.random.default_rng(seed)
    specs = [s for t in ("locomotion", "turn", "jump", "arms") for s in G.enumerate_specs(t)]
    for task in ("simultaneous", "sequence"):
        pool = list(G.enumerate_specs(task))
        specs += [pool[i] for i in rng.choice(len(pool), per_task, replace=False)]
    return specs


@pytest.fixture(scope="module")
def judged():
    """(spec, seed, recovered joints) for a sample of every task."""
    out = []
    for i, spec in enumerate(_sample(12)):
        m = generate(spec, 100 + i)
        out.append((spec, m.seed, recover_joints(m.features())))
    return out


# --------------------------------------------------------------------------------------------
# grammar and split
# --------------------------------------------------------------------------------------------


def test_prompts_parse_and_format():
    prompts = G.all_prompts()
    assert len(prompts) == len(set(prompts)) == 17 + 66 + 272
    for p in prompts:
        assert G.format_prompt(G.parse_prompt(p)) == p
    assert G.parse_prompt("  A person  walks forward while waving the right hand. ") == G.MotionSpec(
        ("walk_forward", "wave_right"), "while"
    )
    assert G.parse_prompt("a person jumps three times then turns around").task == "sequence"
    for bad in (
        "a cat walks forward",
        "a person walks sideways",
        "a person waves the left hand while walking forward",
        "a person jumps once then jumps once",
    ):
        with pytest.raises(ValueError):
            G.parse_prompt(bad)
    with pytest.raises(ValueError, match="while"):
        G.MotionSpec(("wave_left", "walk_forward"), "while")


def test_split_is_fixed_disjoint_and_holds_out_compositions():
    split = G.make_split()
    train, test = split["train"], split["test"]
    assert (len(train), len(test)) == (293, 62)
    assert split == {"train": G.train_rows(), "test": G.test_rows()}  # the shipped files
    tp = {r["prompt"] for r in train}
    assert tp.isdisjoint(r["prompt"] for r in test)
    assert tp | {r["prompt"] for r in test} == set(G.all_prompts())
    # every atomic action is seen alone in train; the test holds only compositions
    assert {r["actions"][0] for r in train if r["compose"] == "single"} == set(G.ACTIONS)
    assert {r["task"] for r in test} == {"simultaneous", "sequence"}
    train_pairs = {(r["compose"], tuple(r["actions"])) for r in train}
    firsts = {r["actions"][0] for r in train if r["compose"] == "then"}
    seconds = {r["actions"][1] for r in train if r["compose"] == "then"}
    legs = {r["actions"][0] for r in train if r["compose"] == "while"}
    arms = {r["actions"][1] for r in train if r["compose"] == "while"}
    for r in test:
        a, b = r["actions"]
        assert (r["compose"], (a, b)) not in train_pairs
        if r["compose"] == "then":
            assert a in firsts and b in seconds and ("then", (b, a)) in train_pairs  # reverse order seen
        else:
            assert a in legs and b in arms
    for row in train + test:
        assert G.MotionSpec.from_row(row).task == row["task"]
        assert G.spec_of(row) == G.parse_prompt(row["prompt"])


# --------------------------------------------------------------------------------------------
# generator
# --------------------------------------------------------------------------------------------


def test_generator_is_deterministic():
    a = generate("a person walks forward then jumps once", 5)
    b = generate("a person walks forward then jumps once", 5)
    c = generate("a person walks forward then jumps once", 6)
    assert np.array_equal(a.joints, b.joints) and np.array_equal(a.rotations, b.rotations)
    assert a.joints.shape != c.joints.shape or not np.array_equal(a.joints, c.joints)
    d1 = generate_dataset(G.train_rows()[:3], clips_per_prompt=2, seed=1)
    d2 = generate_dataset(G.train_rows()[:3], clips_per_prompt=2, seed=1)
    assert len(d1) == 6 and all(np.array_equal(x["features"], y["features"]) for x, y in zip(d1, d2))
    assert d1[0]["features"].dtype == np.float32 and d1[0]["features"].shape[1] == 263


def test_generator_physics(judged):
    for spec, seed, _ in judged[:20]:
        m = generate(spec, seed)
        assert 60 <= m.frames <= 121
        lengths = bone_lengths(m.joints)[:, 1:]
        assert (lengths.std(0) < 1e-9).all()  # rigid bones: forward kinematics
        assert m.joints[..., 1].min() > -1e-9  # nothing below the floor
        for k, foot_joint in enumerate((CONTACT_JOINTS[1], CONTACT_JOINTS[3])):  # balls of the feet
            planted = m.contacts[:-1, k] & m.contacts[1:, k]
            step = np.linalg.norm(np.diff(m.joints[:, foot_joint], axis=0), axis=-1)
            assert step[planted].max(initial=0.0) < 2e-3  # planted feet stay put (< 4 cm/s)


def test_bad_generator_input():
    with pytest.raises(ValueError, match="seed"):
        generate("a person walks forward", -1)
    with pytest.raises(ValueError, match="frames"):
        generate("a person walks forward", 0, frames=10)
    with pytest.raises(ValueError, match="not a MotionWorld prompt"):
        generate("a person dances", 0)


# --------------------------------------------------------------------------------------------
# judge
# --------------------------------------------------------------------------------------------


def test_judge_agrees_with_labels(judged):
    by_task: dict[str, list[int]] = {}
    for spec, _seed, joints in judged:
        res = judge(joints, spec)
        by_task.setdefault(spec.task, []).append(res["strict"])
        assert res["partial"] == 1.0 or not res["strict"]
        assert (res["soft"] == 1.0) == bool(res["strict"]) and res["partial"] <= res["soft"] <= 1.0
    assert set(by_task) == set(G.TASKS)
    for task, ok in by_task.items():
        assert np.mean(ok) >= 0.99, (task, ok)


def test_wrong_prompts_rejected(judged):
    rejected, total = 0, 0
    for spec, _, joints in judged:
        sig = signals(joints)
        for _, wrong in mismatches(spec):
            total += 1
            rejected += not all(c.ok for c in check_spec(sig, wrong))
    assert total > 500 and rejected / total >= 0.99


def test_judge_rejects_standing_for_locomotion():
    standing = recover_joints(generate("a person raises the left hand", 0).features())
    res = judge(standing, "a person walks forward")
    assert res["strict"] == 0 and 0 < res["partial"] < 1
    assert res["task"] == "locomotion"


def _window(**kw) -> dict[str, float]:
    """Window measurements of a person standing still, facing forward, hands down, with ``kw`` changed."""
    w = {"left": 0.0, "forward": 0.0, "distance": 0.0, "speed": 0.0, "yaw_deg": 0.0, "flights": 0}
    w.update({"up_left": 0.0, "up_right": 0.0, "reversals_left": 0, "reversals_right": 0})
    w.update(kw)
    return w


def test_soft_score_grades_near_misses():
    def soft(action, **kw):
        return [(c.ok, round(c.soft, 6)) for c in action_checks(action, _window(**kw))]

    # a walk 0.7 m forward at 1 m/s misses the 1 m by 0.3 m: 1 - 0.3 / SOFT_DISPLACEMENT_M; the rest holds
    walk = soft("walk_forward", forward=0.7, distance=0.7, speed=1.0)
    assert walk == [(False, round(1 - 0.3 / SOFT_DISPLACEMENT_M, 6)), (True, 1.0), (True, 1.0), (True, 1.0)]
    assert soft("walk_forward", forward=0.2, distance=0.2)[0][1] < walk[0][1]  # farther miss, lower score
    assert soft("walk_forward", forward=1.2, left=1.5, distance=1.9)[0] == (False, round(1 - 0.3, 6))  # sideways
    # a 60° turn for "turns around" (135° needed at least) misses by 75°: clipped to 0
    assert soft("turn_around", yaw_deg=60.0)[0] == (False, 0.0)
    assert soft("turn_around", yaw_deg=120.0)[0] == (False, round(1 - 15.0 / SOFT_YAW_DEG, 6))
    assert soft("turn_left", yaw_deg=-100.0)[0] == (False, 0.0) and soft("turn_left", yaw_deg=100.0)[0] == (True, 1.0)
    # counts: one of three jumps missing costs a third; a stray flight fails "no jumps" outright
    assert soft("jump_3", flights=2)[0] == (False, round(2 / 3, 6))
    assert soft("turn_left", yaw_deg=90.0, flights=1)[2] == (False, 0.0)
    # a wave with the hand up 15 % of the frames (30 % needed) and one reversal of two: the weaker part, 0.5
    assert soft("wave_right", up_right=0.15, reversals_right=1)[0] == (False, 0.5)
    # a raise held with two reversals is not "held still": one over the limit costs a half
    assert soft("raise_both", up_left=0.9, up_right=0.9, reversals_left=2)[1] == (False, 0.5)
    # a check that fails always scores below 1, however close
    assert soft("walk_forward", forward=0.999999, distance=0.999999)[0][1] < 1.0


def test_judge_helpers():
    assert count_reversals(np.array([0, 0.1, 0.0, 0.1, 0.0])) == 3
    assert count_reversals(np.array([0, 0.05, 0.0, 0.05, 0.0])) == 0  # below the travel: noise
    assert count_flights(np.array([0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 0], dtype=bool)) == 2  # 2 frames: short
    assert count_flights(np.array([1, 1, 0, 1, 1, 0, 0], dtype=bool)) == 1  # one-frame gap bridged
    with pytest.raises(ValueError, match="22, 3"):
        judge(np.zeros((30, 21, 3)), "a person walks forward")
    with pytest.raises(ValueError, match="at least"):
        judge(np.zeros((3, 22, 3)), "a person walks forward")
