"""Group-relative advantages and difficulty filtering against numbers worked out by hand."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from verifiers.training.loss.advantages import (  # noqa: E402
    STD_EPS,
    compute_advantages,
    filter_groups,
)


def test_group_mean_baseline_by_hand():
    # groups of 2: [1, 0] (mean 0.5) and [0.5, 0.5] (mean 0.5) -> advantages [0.5, -0.5, 0, 0]
    adv, stats = compute_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5]), group_size=2)
    assert torch.allclose(adv, torch.tensor([0.5, -0.5, 0.0, 0.0]))
    assert stats["reward_mean"] == pytest.approx(0.5)
    # batch std (unbiased): deviations 0.5, 0.5, 0, 0 -> sqrt(0.5 / 3)
    assert stats["reward_std"] == pytest.approx(math.sqrt(0.5 / 3))
    # group stds: sqrt((0.25 + 0.25) / 1) = 0.7071 and 0 -> mean 0.35355
    assert stats["reward_std_within_group"] == pytest.approx(math.sqrt(0.5) / 2)
    assert stats["zero_std_groups_frac"] == 0.5
    assert stats["advantage_abs_mean"] == pytest.approx(0.25)


def test_scaled_by_group_std_by_hand():
    # one group of 3: [0, 0, 3], mean 1 -> [-1, -1, 2]; unbiased std sqrt((1 + 1 + 4) / 2) = sqrt(3)
    adv, _ = compute_advantages(torch.tensor([0.0, 0.0, 3.0]), group_size=3, scale_rewards=True)
    s = math.sqrt(3) + STD_EPS
    assert torch.allclose(adv, torch.tensor([-1 / s, -1 / s, 2 / s]))
    # a zero-std group stays at 0 (no division by zero)
    adv, _ = compute_advantages(torch.tensor([0.7, 0.7]), group_size=2, scale_rewards=True)
    assert torch.all(adv == 0)


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="group_size=4"):
        compute_advantages(torch.zeros(6), group_size=4)
    with pytest.raises(ValueError, match="1-D"):
        compute_advantages(torch.zeros(2, 2), group_size=2)


@settings(max_examples=50, deadline=None)
@given(
    group_size=st.integers(1, 6),
    groups=st.integers(1, 5),
    scale=st.booleans(),
    data=st.data(),
)
def test_advantages_sum_to_zero_per_group(group_size, groups, scale, data):
    rewards = data.draw(
        st.lists(
            st.floats(-10, 10, allow_nan=False), min_size=group_size * groups, max_size=group_size * groups
        )
    )
    adv, stats = compute_advantages(torch.tensor(rewards), group_size, scale_rewards=scale)
    assert adv.shape == (group_size * groups,)
    assert torch.isfinite(adv).all()
    sums = adv.view(groups, group_size).sum(dim=1)
    assert torch.allclose(sums, torch.zeros(groups), atol=1e-3)
    assert 0.0 <= stats["zero_std_groups_frac"] <= 1.0


def test_filter_groups_by_hand():
    # groups of 2, means [1.0, 0.5, 0.2, 0.95]; zero-std: groups 0 and 2
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.2, 0.2, 0.9, 1.0])
    keep, stats = filter_groups(rewards, 2, filter_zero_std=True, min_mean=0.3, max_mean=0.9)
    # group 0: zero std and above 0.9; group 2: zero std and below 0.3; group 3: above 0.9
    assert keep.tolist() == [False, True, False, False]
    assert stats["filtered_groups_frac"] == 0.75
    assert stats["filtered_zero_std_frac"] == 0.5
    assert stats["filtered_below_frac"] == 0.25
    assert stats["filtered_above_frac"] == 0.5


def test_filter_groups_options():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0])
    keep, stats = filter_groups(rewards, 2, filter_zero_std=False)
    assert keep.tolist() == [True, True] and stats["filtered_groups_frac"] == 0.0
    keep, _ = filter_groups(rewards, 2)
    assert keep.tolist() == [False, True]
    # band bounds are inclusive
    keep, _ = filter_groups(rewards, 2, filter_zero_std=False, min_mean=0.5, max_mean=1.0)
    assert keep.tolist() == [True, True]


def test_nearly_equal_rewards_count_as_zero_std():
    # 0.1 + 0.2 != 0.3 in floating point; a weighted rubric produces such sums
    rewards = torch.tensor([0.1 + 0.2, 0.3], dtype=torch.float64)
    keep, _ = filter_groups(rewards, 2)
    assert keep.tolist() == [False]
    _, stats = compute_advantages(rewards, 2)
    assert stats["zero_std_groups_frac"] == 1.0


def test_a_group_of_equal_rewards_has_zero_advantages_even_scaled():
    # Found by hypothesis: the float32 mean of five equal rewards missed them by an ulp, and
    # scale_rewards divided that by a std of ~1e-7 (+ STD_EPS): advantages summing to 0.006.
    rewards = torch.tensor([1.9328903772870483] * 5)
    for scale in (False, True):
        adv, _ = compute_advantages(rewards, group_size=5, scale_rewards=scale)
        assert torch.equal(adv, torch.zeros(5))
