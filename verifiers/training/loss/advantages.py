"""Group-relative advantages and difficulty filtering, as pure functions of tensors.

Shapes: ``B`` rollouts, laid out group-major (rollout ``b`` belongs to group
``b // K``); ``G = B / K`` groups of ``K`` rollouts each (``K`` = ``group_size``,
the config's ``num_generations``). ``x_B`` is per rollout, ``x_G`` per group,
``x_GK`` the same data viewed as groups.
"""

from __future__ import annotations

import torch
from torch import Tensor

STD_EPS = 1e-4  # added to a group's std before dividing, so equal rewards give 0, not NaN
EQUAL_TOL = 1e-6  # rewards closer than this count as equal (weighted sums are not exact)


def group_view(rewards_B: Tensor, group_size: int) -> Tensor:
    """``rewards_B`` as ``rewards_GK``; raises ``ValueError`` if B is not a multiple of ``group_size``."""
    if rewards_B.dim() != 1:
        raise ValueError(f"rewards must be 1-D (one per rollout), got shape {tuple(rewards_B.shape)}")
    if group_size < 1 or rewards_B.numel() % group_size != 0:
        raise ValueError(f"{rewards_B.numel()} rewards cannot form whole groups of group_size={group_size}")
    return rewards_B.view(-1, group_size)


def compute_advantages(
    rewards_B: Tensor, group_size: int, scale_rewards: bool = False
) -> tuple[Tensor, dict[str, float]]:
    """Advantage of each rollout: its reward minus its group's mean reward.

    With ``scale_rewards`` the difference is divided by the group's std (unbiased,
    as in the GRPO paper's implementation) plus ``STD_EPS``. Dr. GRPO argues
    against scaling (it up-weights groups that are nearly all right or all
    wrong), hence the default ``False``.

    Stats: ``reward_mean``, ``reward_std`` (over the batch), ``reward_std_within_group``
    (mean group std), ``zero_std_groups_frac`` (groups with no signal),
    ``advantage_abs_mean``.
    """
    rewards_GK = group_view(rewards_B.detach().float(), group_size)
    mean_G = rewards_GK.mean(dim=1)
    # A group of equal rewards has no signal: its advantages are exactly 0. The float32 mean of
    # equal values can miss them by an ulp, which scale_rewards would blow up (divided by a std
    # of ~1e-7 plus STD_EPS): five rewards of 1.9328904 gave advantages summing to 0.006.
    advantages_GK = torch.where(_zero_std_G(rewards_GK)[:, None], 0.0, rewards_GK - mean_G[:, None])
    # A single-rollout group has no std; call it 0 (its advantage is 0 anyway).
    std_G = rewards_GK.std(dim=1) if group_size > 1 else torch.zeros_like(mean_G)
    if scale_rewards:
        advantages_GK = advantages_GK / (std_G[:, None] + STD_EPS)
    advantages_B = advantages_GK.reshape(-1)
    rewards = rewards_GK.reshape(-1)
    stats = {
        "reward_mean": rewards.mean().item(),
        "reward_std": rewards.std().item() if rewards.numel() > 1 else 0.0,
        "reward_std_within_group": std_G.mean().item(),
        "zero_std_groups_frac": _zero_std_G(rewards_GK).float().mean().item(),
        "advantage_abs_mean": advantages_B.abs().mean().item(),
    }
    return advantages_B, stats


def filter_groups(
    rewards_B: Tensor,
    group_size: int,
    filter_zero_std: bool = True,
    min_mean: float | None = None,
    max_mean: float | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Which groups to train on (``keep_mask_G``, bool) for difficulty filtering.

    A group is dropped if its rewards are all equal (with ``filter_zero_std``: all
    advantages are 0, so it has no gradient and only dilutes the batch), or if its
    mean reward lies outside ``[min_mean, max_mean]`` (too hard / too easy; bounds
    inclusive, None = unbounded).

    Stats: ``filtered_groups_frac`` and, per reason, ``filtered_zero_std_frac``,
    ``filtered_below_frac``, ``filtered_above_frac`` (a group may have several),
    all as fractions of G.
    """
    rewards_GK = group_view(rewards_B.detach().float(), group_size)
    mean_G = rewards_GK.mean(dim=1)
    no_drop_G = torch.zeros_like(mean_G, dtype=torch.bool)
    zero_std_G = _zero_std_G(rewards_GK) if filter_zero_std else no_drop_G
    below_G = mean_G < min_mean if min_mean is not None else no_drop_G
    above_G = mean_G > max_mean if max_mean is not None else no_drop_G
    keep_mask_G = ~(zero_std_G | below_G | above_G)
    stats = {
        "filtered_groups_frac": 1.0 - keep_mask_G.float().mean().item(),
        "filtered_zero_std_frac": zero_std_G.float().mean().item(),
        "filtered_below_frac": below_G.float().mean().item(),
        "filtered_above_frac": above_G.float().mean().item(),
    }
    return keep_mask_G, stats


def _zero_std_G(rewards_GK: Tensor) -> Tensor:
    spread_G = rewards_GK.max(dim=1).values - rewards_GK.min(dim=1).values
    return spread_G <= EQUAL_TOL
