"""Each loss type against numbers worked out by hand; gradients, masking, IS correction, KL."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from verifiers.training.loss.losses import LOSS_TYPES, compute_loss, k3_kl  # noqa: E402

DT = torch.float64


def t(x):
    return torch.tensor(x, dtype=DT)


def case(ratios, mask, adv, lp=None):
    """Inputs whose PPO ratios exp(lp - old) are ``ratios``; sampling == old (IS weight 1)."""
    ratio = t(ratios)
    lp = torch.full_like(ratio, -1.0) if lp is None else t(lp)
    lp = lp.clone().requires_grad_(True)
    old = lp.detach() - torch.log(ratio)
    return lp, old, old.clone(), t(adv), t(mask)


# Shared case A (B=2, T=3), ε_low = ε_high = 0.2 unless said otherwise:
#   ratios r = [[1.0, 1.1, 1.3], [0.7, 1.0, 1.0]], mask = [[1, 1, 1], [1, 1, 0]], A = [+1, -1]
#   row 0 (A=+1): min(r·A, clip(r)·A) = [1.0, 1.1, 1.2]   (1.3 clipped high at 1.2)
#                 token losses          = [-1.0, -1.1, -1.2], sum -3.3, mean -1.1
#   row 1 (A=-1): r=0.7 -> min(-0.7, -0.8) = -0.8 (clipped low); r=1.0 -> -1.0; third token masked
#                 token losses          = [0.8, 1.0], sum 1.8, mean 0.9
CASE_A = dict(ratios=[[1.0, 1.1, 1.3], [0.7, 1.0, 1.0]], mask=[[1, 1, 1], [1, 1, 0]], adv=[1.0, -1.0])


@pytest.mark.parametrize(
    "loss_type, kwargs, expected",
    [
        ("grpo", {}, (-1.1 + 0.9) / 2),  # per-sequence means, then batch mean: -0.1
        ("bnpo", {}, (-3.3 + 1.8) / 5),  # one token mean over 5 tokens: -0.3
        ("dr_grpo", {"max_completion_length": 4}, (-3.3 + 1.8) / (2 * 4)),  # sum / (B·L): -0.1875
        # ε_high = 0.28: the 1.3 token is clipped at 1.28 -> row 0 sum -3.38; (-3.38 + 1.8) / 5 = -0.316
        ("dapo", {"epsilon_high": 0.28}, -0.316),
        # same, normalized by the 10 loss tokens of the whole optimizer step: -1.58 / 10
        ("dapo", {"epsilon_high": 0.28, "step_count": 10}, -0.158),
    ],
)
def test_ppo_style_losses_by_hand(loss_type, kwargs, expected):
    lp, old, samp, adv, mask = case(**CASE_A)
    loss, stats = compute_loss(loss_type, lp, old, samp, adv, mask, **kwargs)
    assert loss.item() == pytest.approx(expected, abs=1e-9)
    assert stats["loss"].item() == pytest.approx(expected, abs=1e-9)


def test_grpo_gradients_and_clip_stats_by_hand():
    lp, old, samp, adv, mask = case(**CASE_A)
    loss, stats = compute_loss("grpo", lp, old, samp, adv, mask)
    loss.backward()
    # loss = mean over 2 rows of (token mean over the row); d(-r·A)/dlp = -r·A for an unclipped token.
    # row 0: [-1·1/3/2, -1.1/3/2, 0 (clipped)]; row 1: [0 (clipped low), +1/2/2, 0 (masked)]
    expected = t([[-1 / 6, -1.1 / 6, 0.0], [0.0, 0.25, 0.0]])
    assert torch.allclose(lp.grad, expected, atol=1e-9)
    # 5 tokens: one clipped low (r=0.7, A<0), one clipped high (r=1.3, A>0)
    assert stats["clip_ratio/low"].item() == pytest.approx(0.2)
    assert stats["clip_ratio/high"].item() == pytest.approx(0.2)
    assert stats["clip_ratio/region"].item() == pytest.approx(0.4)


def test_delta_caps_ratio_for_negative_advantage():
    # one token, r = 1.5, A = -1: min(r·A, clip(r)·A) = min(-1.5, -1.2) = -1.5 -> loss 1.5, grad -A·r = 1.5
    # with delta = 1.3: min(min(1.5, 1.3)·A, -1.2) = -1.3 -> loss 1.3, no gradient
    lp, old, samp, adv, mask = case([[1.5]], [[1]], [-1.0])
    loss, _ = compute_loss("bnpo", lp, old, samp, adv, mask)
    loss.backward()
    assert loss.item() == pytest.approx(1.5) and lp.grad.item() == pytest.approx(1.5)
    lp, old, samp, adv, mask = case([[1.5]], [[1]], [-1.0])
    loss, stats = compute_loss("bnpo", lp, old, samp, adv, mask, delta=1.3)
    loss.backward()
    assert loss.item() == pytest.approx(1.3) and lp.grad.item() == 0.0
    assert stats["clip_ratio/region"].item() == 1.0


def test_cispo_by_hand():
    # Case A ratios with lp = [[-1]*3, [-2]*3]; weight = sg(min(r, 1.2)) = [[1, 1.1, 1.2], [0.7, 1.0, -]]
    # token loss = -w·A·lp: row 0: 1.0 + 1.1 + 1.2 = 3.3; row 1 (A=-1, lp=-2): -1.4 - 2.0 = -3.4
    # token mean over 5: (3.3 - 3.4) / 5 = -0.02;  d/dlp = -w·A / 5 (the weight is a constant)
    lp, old, samp, adv, mask = case(**CASE_A, lp=[[-1.0] * 3, [-2.0] * 3])
    loss, stats = compute_loss("cispo", lp, old, samp, adv, mask)
    loss.backward()
    assert loss.item() == pytest.approx(-0.02, abs=1e-9)
    expected = t([[-0.2, -0.22, -0.24], [0.14, 0.2, 0.0]])
    assert torch.allclose(lp.grad, expected, atol=1e-9)
    # clipped tokens keep their gradient; the 1.3 token counts as clipped
    assert stats["clip_ratio/high"].item() == pytest.approx(0.2)
    assert stats["clip_ratio/low"].item() == 0.0


def test_gspo_sequence_ratio_by_hand():
    # row 0: token ratios [2, 0.5, 1] -> mean log-ratio 0 -> s = 1; A = -1 -> objective -1, loss +1
    # row 1: log-ratios [0.3, 0.3, (masked)] -> s = e^0.3 ≈ 1.3499; A = +1 -> clipped at 1.2, loss -1.2
    # batch mean: (1 - 1.2) / 2 = -0.1. Gradient: row 0: d(s)/dlp_t = s/3, halved -> 1/6; row 1 clipped -> 0
    ratios = [[2.0, 0.5, 1.0], [math.exp(0.3), math.exp(0.3), 1.0]]
    lp, old, samp, adv, mask = case(ratios, [[1, 1, 1], [1, 1, 0]], [-1.0, 1.0])
    loss, stats = compute_loss("gspo", lp, old, samp, adv, mask)
    loss.backward()
    assert loss.item() == pytest.approx(-0.1, abs=1e-9)
    assert torch.allclose(lp.grad, t([[1 / 6] * 3, [0.0] * 3]), atol=1e-9)
    assert stats["clip_ratio/high"].item() == pytest.approx(0.5)  # one of two sequences


def test_gspo_delta_and_negative_advantage():
    # row 1 with A = -1 instead: s ≈ 1.34986 is not clipped (A < 0) -> loss 1.34986; mean (1 + 1.34986) / 2
    # with delta = 1.25: min(1.25·-1, 1.2·-1) = -1.25 -> loss 1.25; mean (1 + 1.25) / 2 = 1.125
    ratios = [[2.0, 0.5, 1.0], [math.exp(0.3), math.exp(0.3), 1.0]]
    lp, old, samp, adv, mask = case(ratios, [[1, 1, 1], [1, 1, 0]], [-1.0, -1.0])
    loss, _ = compute_loss("gspo", lp, old, samp, adv, mask)
    assert loss.item() == pytest.approx((1 + math.exp(0.3)) / 2, abs=1e-9)
    loss, _ = compute_loss("gspo", lp, old, samp, adv, mask, delta=1.25)
    assert loss.item() == pytest.approx(1.125, abs=1e-9)


def _is_case(weights):
    """One row, ratio 1 (lp == old), A = 1, IS weights w = exp(old - sampling) = ``weights``."""
    lp = torch.full((1, len(weights)), -1.0, dtype=DT, requires_grad=True)
    old = lp.detach().clone()
    samp = old - torch.log(t([weights]))
    return lp, old, samp, t([1.0]), torch.ones_like(old)


def test_importance_sampling_truncation_and_band():
    # w = [1, 1.5, 3, 10], cap 2, band [0.5, 5]: 10 is masked, 3 truncated to 2.
    # bnpo: -(1 + 1.5 + 2 + 0) / 4 = -1.125 (the masked token still counts in the normalizer)
    lp, old, samp, adv, mask = _is_case([1.0, 1.5, 3.0, 10.0])
    loss, stats = compute_loss("bnpo", lp, old, samp, adv, mask, is_cap=2.0, is_mask_band=(0.5, 5.0))
    loss.backward()
    assert loss.item() == pytest.approx(-1.125)
    assert torch.allclose(lp.grad, t([[-0.25, -0.375, -0.5, 0.0]]))
    assert stats["masked_token_frac"].item() == pytest.approx(0.25)
    assert stats["importance_ratio/truncated"].item() == pytest.approx(0.25)
    assert stats["importance_ratio/mean"].item() == pytest.approx(3.875)  # (1 + 1.5 + 3 + 10) / 4, raw
    assert stats["importance_ratio/min"].item() == pytest.approx(1.0)
    assert stats["importance_ratio/max"].item() == pytest.approx(10.0)
    # no cap: -(1 + 1.5 + 3) / 4 = -1.375; no band: -(1 + 1.5 + 2 + 2) / 4 = -1.625
    loss, _ = compute_loss("bnpo", lp, old, samp, adv, mask, is_cap=None, is_mask_band=(0.5, 5.0))
    assert loss.item() == pytest.approx(-1.375)
    loss, _ = compute_loss("bnpo", lp, old, samp, adv, mask, is_cap=2.0, is_mask_band=None)
    assert loss.item() == pytest.approx(-1.625)


def test_importance_sampling_low_band_masks():
    # w = [0.4, 1.0]: 0.4 < 0.5 is masked -> -(0 + 1) / 2
    lp, old, samp, adv, mask = _is_case([0.4, 1.0])
    loss, stats = compute_loss("bnpo", lp, old, samp, adv, mask)
    assert loss.item() == pytest.approx(-0.5)
    assert stats["masked_token_frac"].item() == pytest.approx(0.5)


def test_gspo_uses_sequence_level_is_weight():
    # w = [4, 1] (both in band): geometric mean 2 -> capped at 2 by default; s = 1, A = 1 -> loss -2
    lp, old, samp, adv, mask = _is_case([4.0, 1.0])
    loss, _ = compute_loss("gspo", lp, old, samp, adv, mask)
    assert loss.item() == pytest.approx(-2.0)
    loss, _ = compute_loss("gspo", lp, old, samp, adv, mask, is_cap=1.5)
    assert loss.item() == pytest.approx(-1.5)


def test_k3_kl_zero_when_reference_equals_policy():
    lp, old, samp, adv, mask = case(**CASE_A)
    base, _ = compute_loss("grpo", lp, old, samp, adv, mask)
    loss, stats = compute_loss("grpo", lp, old, samp, adv, mask, ref_logprobs_BT=lp.detach(), beta=0.5)
    assert stats["kl"].item() == 0.0
    assert loss.item() == pytest.approx(base.item())
    assert torch.all(k3_kl(lp, lp.detach(), mask) == 0)


def test_k3_kl_by_hand():
    # ref - lp = -ln 2 on every token: k3 = 0.5 + ln 2 - 1 ≈ 0.193147; A = 0 so only KL remains.
    # bnpo, beta 0.1: loss = 0.1 · 0.193147; d/dlp of k3 = 1 - exp(ref - lp) = 0.5 -> grad 0.1·0.5/3
    lp = torch.full((1, 3), -1.0, dtype=DT, requires_grad=True)
    ref = lp.detach() - math.log(2)
    loss, stats = compute_loss(
        "bnpo", lp, None, None, t([0.0]), torch.ones(1, 3), ref_logprobs_BT=ref, beta=0.1
    )
    loss.backward()
    k3 = 0.5 + math.log(2) - 1
    assert stats["kl"].item() == pytest.approx(k3)
    assert loss.item() == pytest.approx(0.1 * k3)
    assert torch.allclose(lp.grad, torch.full((1, 3), 0.1 * 0.5 / 3, dtype=DT))


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_all_masked_gives_zero_not_nan(loss_type):
    lp, old, samp, adv, _ = case(**CASE_A)
    mask = torch.zeros(2, 3)
    loss, stats = compute_loss(
        loss_type,
        lp,
        old,
        samp,
        adv,
        mask,
        ref_logprobs_BT=lp.detach() - 1,
        beta=0.1,
        max_completion_length=4,
        entropy_BT=torch.ones(2, 3),
    )
    loss.backward()
    assert loss.item() == 0.0
    assert torch.all(lp.grad == 0)
    assert all(torch.isfinite(torch.as_tensor(v)).all() for v in stats.values())


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_gradient_flows_only_through_logprobs(loss_type):
    lp, old, samp, adv, mask = case(**CASE_A)
    others = [old.requires_grad_(), samp.requires_grad_(), adv.requires_grad_()]
    ref = (lp.detach() - 0.1).requires_grad_()
    loss, stats = compute_loss(
        loss_type, lp, old, samp, adv, mask, ref_logprobs_BT=ref, beta=0.1, max_completion_length=4
    )
    loss.backward()
    assert lp.grad is not None and lp.grad.abs().sum() > 0
    assert all(x.grad is None for x in [*others, ref])
    assert all(not torch.as_tensor(v).requires_grad for v in stats.values())


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_padding_garbage_does_not_leak(loss_type):
    # -inf / nan at masked positions (padding) must not reach the loss or the gradient.
    lp, old, samp, adv, mask = case(**CASE_A)
    old[1, 2], samp[1, 2] = float("-inf"), float("nan")
    loss, _ = compute_loss(loss_type, lp, old, samp, adv, mask, max_completion_length=4)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(lp.grad).all()


def test_entropy_stat_and_on_policy_defaults():
    lp, _, _, adv, mask = case(**CASE_A)
    entropy = t([[1.0, 2.0, 3.0], [4.0, 5.0, 99.0]])  # 99 is masked
    _, stats = compute_loss("grpo", lp, None, None, adv, mask, entropy_BT=entropy)
    assert stats["entropy"].item() == pytest.approx(3.0)
    assert stats["importance_ratio/mean"].item() == 1.0
    assert stats["clip_ratio/region"].item() == 0.0


def test_errors_name_the_problem():
    lp, old, samp, adv, mask = case(**CASE_A)
    with pytest.raises(ValueError, match="unknown loss_type 'ppo'.*dr_grpo"):
        compute_loss("ppo", lp, old, samp, adv, mask)
    with pytest.raises(ValueError, match="max_completion_length"):
        compute_loss("dr_grpo", lp, old, samp, adv, mask)


@settings(max_examples=30, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.floats(-2, 2), st.lists(st.booleans(), min_size=4, max_size=4)), min_size=1, max_size=4
    )
)
def test_on_policy_bnpo_is_plain_policy_gradient(rows):
    # On policy (ratio 1, no IS, no KL) every token's gradient is -A_b / (number of loss tokens).
    adv = t([a for a, _ in rows])
    mask = t([[float(m) for m in ms] for _, ms in rows])
    lp = torch.randn(mask.shape, dtype=DT, requires_grad=True)
    loss, _ = compute_loss("bnpo", lp, None, None, adv, mask)
    loss.backward()
    expected = -adv[:, None] * mask / mask.sum().clamp(min=1)
    assert torch.allclose(lp.grad, expected, atol=1e-9)


def test_every_configured_loss_type_has_a_loss_function():
    # The config declares the names (config/choices.py); losses.py implements them, one each.
    from verifiers.training.config.choices import LOSS_TYPES
    from verifiers.training.loss.losses import LOSS_FUNCTIONS

    assert tuple(LOSS_FUNCTIONS) == LOSS_TYPES
