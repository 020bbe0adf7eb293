"""Hand-computed checks for ddpo_grpo.advantages."""

import json
import math

import numpy as np
import pytest

from ddpo_grpo.advantages import ADVANTAGE_MODES, BATCH_MODES, PerPromptStatTracker, compute_advantages, group_keys

# Interleaved batch: group a = [1, 3] (mu 2, sigma 1), b = [2, 6] (mu 4, sigma 2),
# c = [5, 5] (flat), d = [7] (single member).
PROMPTS = ["a", "c", "b", "d", "a", "b", "c"]
REWARDS = [1.0, 5.0, 2.0, 7.0, 3.0, 6.0, 5.0]


def test_zscore_hand_example():
    adv, stats = compute_advantages(PROMPTS, REWARDS, mode="zscore")
    assert adv.dtype == np.float32 and adv.shape == (7,)
    np.testing.assert_allclose(adv, [-1, 0, -1, 0, 1, 1, 0], atol=1e-6)
    assert adv[1] == 0.0 and adv[3] == 0.0 and adv[6] == 0.0  # exactly zero
    assert stats["adv/frac_zero_std"] == pytest.approx(0.5)  # c and d out of 4 groups
    assert stats["adv/num_groups"] == 4
    assert stats["adv/mean"] == pytest.approx(float(adv.mean()))
    assert stats["adv/std"] == pytest.approx(float(adv.std()))


def test_default_mode_is_zscore():
    adv, _ = PerPromptStatTracker().update(PROMPTS, np.asarray(REWARDS))
    np.testing.assert_allclose(adv, [-1, 0, -1, 0, 1, 1, 0], atol=1e-6)


def test_mean_mode_no_std_division():
    adv, stats = compute_advantages(PROMPTS, REWARDS, mode="mean")
    np.testing.assert_allclose(adv, [-1, 0, -2, 0, 1, 2, 0], atol=1e-6)
    assert stats["adv/frac_zero_std"] == pytest.approx(0.5)


def test_global_std_mode():
    # a = [0, 2] (mu 1), b = [2, 4] (mu 3); batch mean 2, var (4+0+0+4)/4 = 2.
    adv, _ = compute_advantages(["a", "b", "a", "b"], [0.0, 2.0, 2.0, 4.0], mode="global_std")
    r2 = 1 / math.sqrt(2)
    np.testing.assert_allclose(adv, [-r2, -r2, r2, r2], rtol=1e-6)


def test_global_std_flat_group_is_zero():
    adv, stats = compute_advantages(PROMPTS, REWARDS, mode="global_std")
    batch_std = np.std(REWARDS)
    np.testing.assert_allclose(adv, np.array([-1, 0, -2, 0, 1, 2, 0]) / batch_std, rtol=1e-6)
    assert stats["adv/frac_zero_std"] == pytest.approx(0.5)


@pytest.mark.parametrize("mode", ["zscore", "mean", "global_std", "running"])
def test_flat_and_single_groups_exactly_zero_in_group_modes(mode):
    # 0.1 + 0.2 != 0.3 exactly: the tolerance must still call the group flat.
    prompts = ["x", "y", "x", "z", "w", "w"]
    rewards = [0.1 + 0.2, 4.0, 0.3, 9.0, 1e6, 1e6 + 1e-7]
    adv, stats = compute_advantages(prompts, rewards, mode=mode)
    assert np.all(adv == 0.0) and not np.any(np.isnan(adv))
    assert stats["adv/frac_zero_std"] == 1.0  # x, w flat; y, z single-member
    assert stats["adv/num_groups"] == 4


def test_tiny_spread_uses_eps_guard():
    adv, stats = compute_advantages(["a", "a"], [0.0, 1e-9], mode="zscore", eps=1e-6)
    np.testing.assert_allclose(adv, [-5e-4, 5e-4], rtol=1e-5)  # +-5e-10 / 1e-6
    assert stats["adv/frac_zero_std"] == 0.0


def test_single_prompt_whole_batch_flat_zscore():
    adv, stats = compute_advantages(["p"] * 4, [2.0] * 4)
    assert np.all(adv == 0.0) and stats["adv/frac_zero_std"] == 1.0


def test_buffer_mode_persists_and_falls_back():
    t = PerPromptStatTracker("buffer", buffer_size=4, min_count=3)
    # Call 1: every prompt below min_count -> batch stats (mean 3, std sqrt 6).
    adv, stats = t.update(["a", "b", "a"], [0.0, 6.0, 3.0])
    s6 = math.sqrt(6)
    np.testing.assert_allclose(adv, [-3 / s6, 3 / s6, 0.0], atol=1e-6)
    assert stats["adv/frac_fallback"] == 1.0
    assert stats["adv/frac_zero_std"] == pytest.approx(0.5)  # b is single-member
    # Call 2: a's history [0, 3, 6] reaches min_count (mean 3, std sqrt 6);
    # b's history [6, 6] is still short -> batch [6, 6], which is flat -> 0.
    adv, stats = t.update(["a", "b"], [6.0, 6.0])
    np.testing.assert_allclose(adv, [3 / s6, 0.0], atol=1e-6)
    assert adv[1] == 0.0
    assert stats["adv/frac_fallback"] == pytest.approx(0.5)
    assert stats["adv/frac_zero_std"] == 1.0
    # Call 3: deque keeps the last 4: [3, 6, 9, 12], mean 7.5, var 11.25.
    adv, stats = t.update(["a", "a"], [9.0, 12.0])
    s = math.sqrt(11.25)
    np.testing.assert_allclose(adv, [1.5 / s, 4.5 / s], rtol=1e-6)
    assert t.state_dict()["buffers"]["a"] == [3.0, 6.0, 9.0, 12.0]
    assert stats["adv/frac_fallback"] == 0.0


def test_buffer_mode_flat_history_gives_zero():
    adv, _ = compute_advantages(["a", "b", "a", "b"], [5.0, 0.0, 5.0, 1.0], mode="buffer", min_count=2)
    assert adv[0] == 0.0 and adv[2] == 0.0
    np.testing.assert_allclose(adv, [0, -1, 0, 1], atol=1e-6)


def test_running_mode_ema_update():
    t = PerPromptStatTracker("running", ema_decay=0.5)
    # Batch 1 initialises: mean 2, var 2.
    adv, stats = t.update(["a", "b", "a", "b"], [0.0, 2.0, 2.0, 4.0])
    r2 = 1 / math.sqrt(2)
    np.testing.assert_allclose(adv, [-r2, -r2, r2, r2], rtol=1e-6)
    assert stats["adv/running_mean"] == pytest.approx(2.0)
    assert stats["adv/running_std"] == pytest.approx(math.sqrt(2.0))
    # Batch 2: mean 4, var 9 -> m = 0.5*2 + 0.5*4 = 3, v = 0.5*2 + 0.5*9 = 5.5.
    adv, stats = t.update(["a", "b", "a", "b"], [1.0, 1.0, 7.0, 7.0])
    np.testing.assert_allclose(adv, np.array([-3, -3, 3, 3]) / math.sqrt(5.5), rtol=1e-6)
    assert stats["adv/running_mean"] == pytest.approx(3.0)
    assert stats["adv/running_std"] == pytest.approx(math.sqrt(5.5))


def test_clipping():
    adv, stats = compute_advantages(PROMPTS, REWARDS, mode="zscore", clip=0.5)
    np.testing.assert_allclose(adv, [-0.5, 0, -0.5, 0, 0.5, 0.5, 0], atol=1e-6)
    assert stats["adv/frac_clipped"] == pytest.approx(4 / 7)
    adv, _ = compute_advantages(PROMPTS, REWARDS, mode="mean", clip=1.5)
    np.testing.assert_allclose(adv, [-1, 0, -1.5, 0, 1, 1.5, 0], atol=1e-6)


@pytest.mark.parametrize("mode", ["buffer", "running", "zscore"])
def test_state_dict_json_round_trip(mode):
    kw = dict(buffer_size=5, min_count=2, ema_decay=0.8)
    t1 = PerPromptStatTracker(mode, **kw)
    t1.update(["a", "b", "a", "c"], [1.0, 2.0, 4.0, 0.5])
    t1.update(["b", "a", "b"], [3.0, 0.0, 7.0])
    state = json.loads(json.dumps(t1.state_dict()))
    t2 = PerPromptStatTracker(mode, **kw)
    t2.load_state_dict(state)
    batch = (["a", "b", "c", "a", "c"], [2.0, 5.0, 1.0, 3.0, 9.0])
    adv1, stats1 = t1.update(*batch)
    adv2, stats2 = t2.update(*batch)
    np.testing.assert_array_equal(adv1, adv2)
    assert stats1 == stats2
    assert t1.state_dict() == t2.state_dict()


def test_load_state_dict_mode_mismatch():
    state = PerPromptStatTracker("buffer").state_dict()
    with pytest.raises(ValueError, match="mode"):
        PerPromptStatTracker("running").load_state_dict(state)
    with pytest.raises(ValueError, match="missing"):
        PerPromptStatTracker("buffer").load_state_dict({"mode": "buffer"})


def test_invalid_mode_lists_valid_ones():
    with pytest.raises(ValueError) as exc:
        PerPromptStatTracker("bogus")
    for name in ADVANTAGE_MODES:
        assert name in str(exc.value)


def test_nan_reward_names_index():
    with pytest.raises(ValueError, match=r"rewards\[2\]"):
        compute_advantages(["a", "a", "b"], [1.0, 2.0, float("nan")])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(min_count=10, buffer_size=4), "min_count"),
        (dict(buffer_size=0), "buffer_size"),
        (dict(ema_decay=1.0), "ema_decay"),
        (dict(eps=0.0), "eps"),
        (dict(clip=-1.0), "clip"),
    ],
)
def test_invalid_config(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PerPromptStatTracker("buffer", **kwargs)


def test_bad_inputs():
    t = PerPromptStatTracker()
    with pytest.raises(ValueError, match="prompts has 2"):
        t.update(["a", "b"], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="1-D"):
        t.update(["a", "b"], np.zeros((2, 1)))
    with pytest.raises(ValueError, match="empty"):
        t.update([], [])
    with pytest.raises(ValueError, match=r"prompts\[1\]"):
        t.update(["a", 3], [1.0, 2.0])


def test_reward_level_vs_advantage_level_aggregation():
    from ddpo_grpo.advantages import RewardAdvantages

    prompts = ["a", "a", "b", "b"]
    big = np.array([100.0, 300.0, 0.0, 1000.0])  # large scale
    small = np.array([0.2, 0.1, 0.3, 0.1])  # small scale, opposite ordering in group a
    per = {"big": big, "small": small}
    weights = {"big": 1.0, "small": 1.0}
    combined = big + small
    adv_r, _ = RewardAdvantages(list(weights), "reward")(prompts, per, combined, weights)
    np.testing.assert_allclose(adv_r, [-1, 1, -1, 1], atol=1e-5)  # the big reward dominates the sum
    adv_a, stats = RewardAdvantages(list(weights), "advantage")(prompts, per, combined, weights)
    np.testing.assert_allclose(adv_a, [0, 0, 0, 0], atol=1e-5)  # equal weights: the normalised rewards cancel
    assert "adv/big/mean" in stats and "adv/small/frac_zero_std" in stats


def test_reward_advantages_nan_means_not_applicable_and_state_roundtrip():
    from ddpo_grpo.advantages import RewardAdvantages

    prompts = ["a"] * 4
    per = {"r": np.array([1.0, np.nan, 3.0, 5.0])}
    tracker = RewardAdvantages(["r"], "advantage", mode="buffer", buffer_size=8, min_count=2)
    adv, _ = tracker(prompts, per, per["r"], {"r": 1.0})
    assert adv[1] == 0.0 and adv[0] < 0 < adv[3]
    clone = RewardAdvantages(["r"], "advantage", mode="buffer", buffer_size=8, min_count=2)
    clone.load_state_dict(json.loads(json.dumps(tracker.state_dict())))
    w = {"r": 1.0}
    np.testing.assert_array_equal(clone(prompts, per, per["r"], w)[0], tracker(prompts, per, per["r"], w)[0])
    with pytest.raises(ValueError, match="reward.aggregation"):
        RewardAdvantages(["r"], "sum")


@pytest.mark.parametrize("mode", sorted(ADVANTAGE_MODES))
def test_group_keys_keep_shared_noise_groups_apart(mode):
    """Two groups of one prompt: merged, unless they share initial noise in a batch-only mode."""
    rewards = np.array([1.0, 1.0, 0.0, 0.0])  # group 0 all 1, group 1 all 0
    shared = group_keys(["p", "p"], 2, mode, shared_noise=True)
    merged = group_keys(["p", "p"], 2, mode, shared_noise=False)
    assert merged == ["p"] * 4 and len(set(group_keys(["p", "q"], 2, mode, True))) == 2
    if mode in BATCH_MODES:
        assert len(set(shared)) == 2
        adv, stats = compute_advantages(shared, rewards, mode=mode)
        assert np.all(adv == 0.0) and stats["adv/num_groups"] == 2  # each group is flat on its own
        adv, _ = compute_advantages(merged, rewards, mode=mode)
        assert adv[0] > 0 > adv[2]  # merged, the initial-noise difference becomes the advantage
    else:
        assert shared == merged  # history modes always key by prompt


def test_sample_keys_group_an_epochs_samples_by_row_id_or_prompt():
    """The advantage phase's keys of an epoch laid out group by group: a row's ``id`` where it has one (rows that
    share a prompt stay apart), else its prompt; with shared noise in a batch mode, one key per group."""
    from ddpo_grpo.advantages import sample_keys

    rows = [{"prompt": "a", "id": 7}, {"prompt": "a", "id": 8}, {"prompt": "b"}, {"prompt": "b"}]
    assert sample_keys(rows, 2, "zscore", False) == ["7", "7", "8", "8", "b", "b", "b", "b"]
    assert sample_keys(rows, 1, "buffer", True) == ["7", "8", "b", "b"]  # history modes key by prompt (or id)
    apart = sample_keys(rows, 1, "zscore", True)
    assert apart[:2] == ["7\x000", "8\x001"] and apart[2] != apart[3]
