"""ddpo_grpo/paired.py: paired differences, their standard errors and intervals, against hand-computed numbers."""

import math

import numpy as np
import pytest

from ddpo_grpo.paired import MEAN, Z95, Paired, format_paired, mean_over_groups, paired, paired_by_group


def test_paired_matches_hand_computed_numbers():
    # d = [1, 0, 0, -1, 1]: mean 0.2; squared deviations 0.64 + 0.04 + 0.04 + 1.44 + 0.64 = 2.8, s² = 2.8 / 4 = 0.7
    p = paired([0, 0, 1, 1, 0], [1, 0, 1, 0, 1])
    assert (p.n, p.up, p.down) == (5, 2, 1)
    assert (p.before, p.after, p.diff) == pytest.approx((0.4, 0.6, 0.2))
    assert p.se == pytest.approx(math.sqrt(0.7 / 5))  # 0.37417
    assert (p.low, p.high) == pytest.approx((0.2 - 1.959964 * 0.374166, 0.2 + 1.959964 * 0.374166), abs=1e-5)
    assert not p.clear_of_zero
    assert Z95 == pytest.approx(1.959964, abs=1e-6)


def test_nan_drops_the_pair_and_degenerate_sizes():
    p = paired([0.5, math.nan, 1.0, 0.0], [1.0, 1.0, math.nan, 0.5])  # pairs 0 and 3 kept: d = [0.5, 0.5]
    assert (p.n, p.diff, p.se, p.up, p.down) == (2, 0.5, 0.0, 2, 0)
    assert p.clear_of_zero  # a zero-width interval at +0.5
    one = paired([0.0], [1.0])
    assert one.n == 1 and one.diff == 1.0 and math.isnan(one.se) and not one.clear_of_zero
    empty = paired([], [])
    assert empty.n == 0 and math.isnan(empty.diff)
    with pytest.raises(ValueError, match="same length"):
        paired([0, 1], [1])


def test_groups_and_their_mean():
    # A: d = [1, 1, 0, 0] -> 0.5, s² = 1/3, SE² = 1/12; B: d = [0, -1] -> -0.5, s² = 0.5, SE² = 1/4
    before = [0, 0, 0, 0, 1, 1]
    after = [1, 1, 0, 0, 1, 0]
    groups = ["A", "A", "A", "A", "B", "B"]
    t = paired_by_group(before, after, groups)
    assert list(t) == ["A", "B", "", MEAN]
    assert (t["A"].diff, t["B"].diff) == (0.5, -0.5)
    assert (t["A"].se, t["B"].se) == pytest.approx((math.sqrt(1 / 12), 0.5))
    m = t[MEAN]
    assert m.diff == 0.0 and m.se == pytest.approx(math.sqrt(1 / 12 + 1 / 4) / 2)  # 0.28868
    assert (m.before, m.after) == pytest.approx(((0 + 1) / 2, (0.5 + 0.5) / 2))
    assert (m.n, m.up, m.down) == (6, 2, 1)
    assert t[""].diff == pytest.approx(1 / 6)  # pooled: every pair weighs the same
    assert mean_over_groups([t["A"], t["B"], paired([], [])]) == m  # empty groups are ignored
    with pytest.raises(ValueError, match="group labels"):
        paired_by_group([0], [1], ["A", "B"])


def test_unlabelled_samples_only_in_the_pooled_row():
    t = paired_by_group([0, 0, 1], [1, 0, 1], ["A", None, "A"])
    assert list(t) == ["A", "", MEAN] and t["A"].n == 2 and t[""].n == 3


def test_pairing_is_tighter_than_two_independent_means():
    """The motivation: when both models get most samples right or wrong together, the paired SE is smaller."""
    rng = np.random.default_rng(0)
    base = (rng.random(400) < 0.3).astype(float)
    flip = rng.random(400) < 0.1
    after = np.where(flip, 1.0, base)
    p = paired(base, after)
    unpaired_se = math.sqrt(base.var(ddof=1) / 400 + after.var(ddof=1) / 400)
    assert p.se < 0.6 * unpaired_se and p.clear_of_zero


def test_format_paired():
    text = format_paired(paired_by_group([0, 0, 1, 1], [1, 1, 1, 0], ["x", "x", "y", "y"]), "strict")
    lines = text.splitlines()
    assert lines[0] == "paired difference (strict), after − before, in points:"
    assert lines[2].split()[:5] == ["x", "2", "0.000", "1.000", "+100.0"]
    assert lines[4].split()[0] == "all" and lines[5].split()[:3] == ["mean", "over", "groups"]
    assert isinstance(paired([0], [0]), Paired) and Paired(**paired([0, 1], [1, 1]).to_dict()) == paired([0, 1], [1, 1])
