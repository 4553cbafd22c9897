"""Policy-gradient losses for GRPO and its variants, as pure functions of tensors.

Shape letters, one meaning each in every verifiers/training module: ``B`` rows
of a batch (samples: a rollout, or one turn of it), ``T`` token positions, ``V``
vocabulary, ``N`` flattened rows (``B × T``), ``G`` groups (one per prompt),
``K`` rollouts per group (``num_generations``), ``P`` training processes. A name
ends in the letters of its shape: ``x_BT`` is per token, ``x_B`` per row, ``x_GK``
per-rollout data viewed as groups. Here ``B`` counts the micro-batch's sequences
and ``T`` its token positions (completion tokens, or prompt + completion with
prompt positions masked). Masks are 0/1 (any dtype).

Every token-level input is aligned with the sampled token it scores:
``logprobs_BT`` (current policy, carries the gradient), ``old_logprobs_BT`` (the
trainer's policy when this batch's first iteration began), ``sampling_logprobs_BT``
(the inference server's, at sampling time), ``ref_logprobs_BT`` (reference model).
Nothing but ``logprobs_BT`` receives a gradient.

``compute_loss`` does the shared work and calls one function per ``loss_type``:

- PPO ratio ``r = exp(logprobs - old_logprobs)``, clipped to ``[1 - ε_low,
  1 + ε_high]``; with ``delta`` the unclipped branch is also capped at ``delta``
  (two-sided clipping, INTELLECT-2), so a negative advantage cannot push an
  unbounded ratio.
- Importance-sampling correction for off-policy generation: per token
  ``w = exp(old_logprobs - sampling_logprobs)``. Tokens with ``w`` outside
  ``is_mask_band`` are masked out (IcePop / masked IS), the rest are weighted by
  ``min(w, is_cap)`` (truncated IS, Yao et al. 2025). The papers pick one of the
  two; we do both: truncation tames moderate mismatch, masking drops tokens whose
  probabilities disagree so much that the sample is not trustworthy. The
  policy-gradient term is weighted; the KL term is not.
- KL penalty, k3 estimator ``exp(ref - lp) - (ref - lp) - 1`` (≥ 0), times ``beta``,
  added per token and aggregated like the policy term.

Normalization: numerators sum over the *effective* mask (loss mask minus
band-masked tokens); normalizers count the *loss* mask, so masking a token for a
bad importance weight removes its gradient without up-weighting its neighbours.
A sequence with no loss tokens contributes nothing and, for per-sequence means,
is not counted. An all-masked batch gives loss 0 (with a graph), never NaN.

Across micro-batches and processes: an optimizer step is split into
``gradient_accumulation_steps`` micro-batches on each of ``P`` processes. Every
loss type but ``bnpo`` normalizes by a count over the *whole step*
(``STEP_COUNTS``: sequences, sequences with loss tokens, or loss tokens), given
as ``step_count``; a micro-batch's loss is then its share of the step's mean and
the trainer sums them (``step_loss_scale`` undoes Trainer's division by the
accumulation steps and the gradient averaging across processes). So the step's
gradient does not depend on how the step is split: 2 processes give what 1
process gives on the same batch. A per-micro-batch mean would not: with
unequal micro-batches (sequences without loss tokens, a rollout trained as one
sample per turn) each micro-batch's mean would weigh its rows differently.
``bnpo`` is by definition a mean over one micro-batch's tokens (``dapo`` is its
step-wide version).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from verifiers.training.config.choices import DEFAULT_IS_CAP, DEFAULT_IS_MASK_BAND, LOSS_TYPES  # noqa: F401 (declared with the config)

LossStats = dict[str, Tensor]


@dataclass
class LossInputs:
    """What every loss function receives (prepared by ``compute_loss``)."""

    logprobs_BT: Tensor
    old_logprobs_BT: Tensor  # detached
    advantages_B: Tensor  # detached
    loss_mask_BT: Tensor  # bool: tokens that count in normalizers
    mask_BT: Tensor  # bool: tokens that get a gradient (loss mask ∩ IS band)
    log_is_weight_BT: Tensor  # detached log w = old - sampling, 0 where masked
    is_cap: float | None
    kl_BT: Tensor | None  # k3 per token (carries gradient), or None without a reference
    beta: float
    epsilon_low: float
    epsilon_high: float
    delta: float | None
    max_completion_length: int | None
    step_count: float | None


def loss_options(args: Any) -> dict[str, Any]:
    """A ``GRPOConfig``'s fields as ``compute_loss``'s keyword arguments (``dr_grpo``'s constant:
    the config's ``longest_completion``)."""
    return dict(
        beta=args.beta,
        epsilon_low=args.epsilon,
        epsilon_high=args.epsilon_high,
        delta=args.delta,
        is_cap=args.importance_sampling_cap,
        is_mask_band=(args.importance_sampling_mask_low, args.importance_sampling_mask_high),
        max_completion_length=args.longest_completion,
    )


def compute_loss(
    loss_type: str,
    logprobs_BT: Tensor,
    old_logprobs_BT: Tensor | None,
    sampling_logprobs_BT: Tensor | None,
    advantages_B: Tensor,
    loss_mask_BT: Tensor,
    *,
    ref_logprobs_BT: Tensor | None = None,
    beta: float = 0.0,
    epsilon_low: float = 0.2,
    epsilon_high: float = 0.2,
    delta: float | None = None,
    is_cap: float | None = DEFAULT_IS_CAP,
    is_mask_band: tuple[float | None, float | None] | None = DEFAULT_IS_MASK_BAND,
    max_completion_length: int | None = None,
    step_count: float | None = None,
    entropy_BT: Tensor | None = None,
) -> tuple[Tensor, LossStats]:
    """The ``loss_type`` loss of one micro-batch and its stats.

    ``old_logprobs_BT=None`` means on-policy (``logprobs_BT.detach()``, ratio 1);
    ``sampling_logprobs_BT=None`` means no importance-sampling correction.
    ``max_completion_length`` is ``dr_grpo``'s constant. ``step_count`` is
    ``loss_type``'s normalizer (``STEP_COUNTS``) counted over the whole optimizer step
    (all micro-batches, all processes; see ``step_counts``); the returned loss is
    then this micro-batch's share of the step's mean, to be multiplied by
    ``step_loss_scale`` and summed. None: this micro-batch's own count. ``bnpo``
    ignores it.

    Stats (detached scalars): ``loss``, ``kl``, ``clip_ratio/{low,high,region}``,
    ``importance_ratio/{mean,min,max}`` (before truncation, over loss tokens),
    ``importance_ratio/truncated``, ``masked_token_frac`` (loss tokens dropped by the
    band), and ``entropy`` when ``entropy_BT`` is given.
    """
    if loss_type not in LOSS_FUNCTIONS:
        raise ValueError(f"unknown loss_type {loss_type!r}; valid: {', '.join(LOSS_TYPES)}")
    loss_mask = loss_mask_BT.bool()
    old = logprobs_BT.detach() if old_logprobs_BT is None else old_logprobs_BT.detach()
    if sampling_logprobs_BT is None:
        log_w = torch.zeros_like(old)
    else:
        log_w = torch.where(loss_mask, old - sampling_logprobs_BT.detach(), 0.0)
    in_band = _in_band(log_w, is_mask_band)
    mask = loss_mask & in_band
    kl_BT = None if ref_logprobs_BT is None else k3_kl(logprobs_BT, ref_logprobs_BT.detach(), mask)
    inputs = LossInputs(
        logprobs_BT=logprobs_BT,
        old_logprobs_BT=old,
        advantages_B=advantages_B.detach().to(logprobs_BT.dtype),
        loss_mask_BT=loss_mask,
        mask_BT=mask,
        log_is_weight_BT=log_w,
        is_cap=is_cap,
        kl_BT=kl_BT,
        beta=beta,
        epsilon_low=epsilon_low,
        epsilon_high=epsilon_high,
        delta=delta,
        max_completion_length=max_completion_length,
        step_count=step_count,
    )
    loss, stats = LOSS_FUNCTIONS[loss_type](inputs)
    stats["loss"] = loss.detach()
    stats["kl"] = _masked_mean(kl_BT, mask).detach() if kl_BT is not None else _zero(logprobs_BT)
    stats.update(_importance_stats(log_w, loss_mask, in_band, is_cap))
    if entropy_BT is not None:
        stats["entropy"] = _masked_mean(entropy_BT.detach(), loss_mask)
    return loss, stats


# --- one function per loss type -------------------------------------------------------------


def grpo_loss(x: LossInputs) -> tuple[Tensor, LossStats]:
    """GRPO (DeepSeekMath): token mean within each sequence, then mean over sequences."""
    token_loss_BT, stats = _ppo_token_loss(x)
    per_seq_B = _sum_T(token_loss_BT, x.mask_BT) / x.loss_mask_BT.sum(-1).clamp(min=1)
    # Departure: sequences without loss tokens (e.g. masked truncations) are not
    # counted in the batch mean, so they do not shrink the others' gradients.
    return per_seq_B.sum() / _normalizer(x, "grpo"), stats


def bnpo_loss(x: LossInputs) -> tuple[Tensor, LossStats]:
    """BNPO: one token mean over the micro-batch."""
    token_loss_BT, stats = _ppo_token_loss(x)
    return _sum_T(token_loss_BT, x.mask_BT).sum() / x.loss_mask_BT.sum().clamp(min=1), stats


def dr_grpo_loss(x: LossInputs) -> tuple[Tensor, LossStats]:
    """Dr. GRPO: token sum divided by the constant B × max_completion_length (no length bias)."""
    if x.max_completion_length is None:
        raise ValueError("loss_type 'dr_grpo' needs max_completion_length (its constant normalizer)")
    token_loss_BT, stats = _ppo_token_loss(x)
    return _sum_T(token_loss_BT, x.mask_BT).sum() / (
        _normalizer(x, "dr_grpo") * x.max_completion_length
    ), stats


def dapo_loss(x: LossInputs) -> tuple[Tensor, LossStats]:
    """DAPO: token-level mean over every loss token of the optimizer step; clip-higher via ε_high."""
    token_loss_BT, stats = _ppo_token_loss(x)
    return _sum_T(token_loss_BT, x.mask_BT).sum() / _normalizer(x, "dapo"), stats


def cispo_loss(x: LossInputs) -> tuple[Tensor, LossStats]:
    """CISPO (MiniMax-M1): -sg(min(r, 1 + ε_high)) · A · logprob, token mean like DAPO.

    The clipped ratio is a stop-gradient weight, so clipped tokens still get a
    gradient (unlike PPO, which zeroes it). As in the paper there is no lower bound
    (``epsilon_low`` is unused) and no token mask beyond the IS band.
    """
    ratio_BT = torch.exp(_log_ratio(x))
    weight_BT = ratio_BT.clamp(max=1.0 + x.epsilon_high).detach()
    adv_BT = x.advantages_B[:, None]
    objective_BT = weight_BT * adv_BT * torch.where(x.mask_BT, x.logprobs_BT, 0.0)
    token_loss_BT = -objective_BT * _truncated_is_weight(x) + _kl_term(x)
    clipped_BT = (ratio_BT > 1.0 + x.epsilon_high) & x.mask_BT
    stats = _clip_stats(torch.zeros_like(clipped_BT), clipped_BT, x.mask_BT)
    return _sum_T(token_loss_BT, x.mask_BT).sum() / _normalizer(x, "cispo"), stats


def gspo_loss(x: LossInputs) -> tuple[Tensor, LossStats]:
    """GSPO: one ratio per sequence, ``exp(mean token log-ratio)``, clipped at sequence level.

    The paper uses tiny ε (3e-4 / 4e-4) because the sequence ratio is a geometric
    mean. The IS correction is likewise per sequence: the geometric mean of the
    token weights over unmasked tokens, truncated at ``is_cap``.
    """
    counts_B = x.mask_BT.sum(-1).clamp(min=1)
    seq_log_ratio_B = _sum_T(_log_ratio(x), x.mask_BT) / counts_B
    ratio_B = torch.exp(seq_log_ratio_B)
    objective_B, low_B, high_B, delta_B = _clipped_surrogate(ratio_B, x.advantages_B, x)
    seq_w_B = torch.exp(_sum_T(x.log_is_weight_BT, x.mask_BT) / counts_B)
    if x.is_cap is not None:
        seq_w_B = seq_w_B.clamp(max=x.is_cap)
    seq_loss_B = -objective_B * seq_w_B
    if x.kl_BT is not None:
        seq_loss_B = seq_loss_B + x.beta * _sum_T(x.kl_BT, x.mask_BT) / counts_B
    has_tokens_B = x.mask_BT.any(-1)
    loss = torch.where(has_tokens_B, seq_loss_B, 0.0).sum() / _normalizer(x, "gspo")
    stats = _clip_stats(low_B & has_tokens_B, high_B & has_tokens_B, has_tokens_B, delta_B & has_tokens_B)
    return loss, stats


LOSS_FUNCTIONS: dict[str, Callable[[LossInputs], tuple[Tensor, LossStats]]] = {
    "grpo": grpo_loss,
    "bnpo": bnpo_loss,
    "dr_grpo": dr_grpo_loss,
    "dapo": dapo_loss,
    "cispo": cispo_loss,
    "gspo": gspo_loss,
}


def _sequences(loss_mask_BT: Tensor) -> int:
    return int(loss_mask_BT.shape[0])


def _sequences_with_tokens(loss_mask_BT: Tensor) -> int:
    return int(loss_mask_BT.bool().any(-1).sum())


def _tokens(loss_mask_BT: Tensor) -> int:
    return int(loss_mask_BT.bool().sum())


# What each loss type divides by, counted on a loss mask; summed over a whole optimizer step
# by the trainer (``bnpo`` is absent: its mean is over one micro-batch by definition).
STEP_COUNTS: dict[str, Callable[[Tensor], int]] = {
    "grpo": _sequences_with_tokens,
    "gspo": _sequences_with_tokens,
    "dr_grpo": _sequences,  # times max_completion_length
    "dapo": _tokens,
    "cispo": _tokens,
}


def step_counts(
    loss_type: str, loss_masks_per_process: list[list[Tensor]], gradient_accumulation_steps: int
) -> list[float]:
    """``loss_type``'s normalizer for each optimizer step of a generation batch; ``[]`` without one.

    ``loss_masks_per_process[p][m]`` is process ``p``'s micro-batch ``m`` (every process
    receives the whole generation batch, so each can count every process's share); an
    optimizer step is ``gradient_accumulation_steps`` consecutive micro-batches of every process.
    """
    count = STEP_COUNTS.get(loss_type)
    if count is None:
        return []
    per_micro = [sum(count(m) for m in column) for column in zip(*loss_masks_per_process, strict=True)]
    accum = gradient_accumulation_steps
    return [float(sum(per_micro[i : i + accum])) for i in range(0, len(per_micro), accum)]


def step_loss_scale(loss_type: str, gradient_accumulation_steps: int, num_processes: int) -> float:
    """The factor for a micro-batch's loss so the step's gradient is that of the summed shares.

    ``transformers.Trainer`` divides each micro-batch's loss by the accumulation steps and
    DDP / DeepSpeed average gradients across processes: right for per-micro-batch means,
    but a loss computed with ``step_count`` is already a share of the step's mean.
    """
    return float(gradient_accumulation_steps * num_processes) if loss_type in STEP_COUNTS else 1.0


# --- shared pieces -------------------------------------------------------------------------------


def k3_kl(logprobs_BT: Tensor, ref_logprobs_BT: Tensor, mask_BT: Tensor) -> Tensor:
    """k3 estimator of KL(π ‖ π_ref) per token (Schulman): ``exp(d) - d - 1`` with ``d = ref - lp``; 0 where masked."""
    d_BT = torch.where(mask_BT.bool(), ref_logprobs_BT - logprobs_BT, 0.0)
    return torch.exp(d_BT) - d_BT - 1.0


def _ppo_token_loss(x: LossInputs) -> tuple[Tensor, LossStats]:
    """Per-token loss ``-w · min(r·A, clip(r)·A) + β·KL`` and its clip stats."""
    ratio_BT = torch.exp(_log_ratio(x))
    objective_BT, low_BT, high_BT, delta_BT = _clipped_surrogate(ratio_BT, x.advantages_B[:, None], x)
    token_loss_BT = -objective_BT * _truncated_is_weight(x) + _kl_term(x)
    m = x.mask_BT
    return token_loss_BT, _clip_stats(low_BT & m, high_BT & m, m, delta_BT & m)


def _clipped_surrogate(ratio: Tensor, adv: Tensor, x: LossInputs) -> tuple[Tensor, ...]:
    """``min(min(r, δ)·A, clip(r, 1-ε_low, 1+ε_high)·A)`` and where each clip is active."""
    clipped = ratio.clamp(1.0 - x.epsilon_low, 1.0 + x.epsilon_high)
    unclipped = ratio if x.delta is None else ratio.clamp(max=x.delta)
    objective = torch.minimum(unclipped * adv, clipped * adv)
    low = (ratio < 1.0 - x.epsilon_low) & (adv < 0)
    high = (ratio > 1.0 + x.epsilon_high) & (adv > 0)
    capped = (ratio > x.delta) & (adv < 0) if x.delta is not None else torch.zeros_like(low)
    return objective, low, high, capped


def _log_ratio(x: LossInputs) -> Tensor:
    # Zero at masked positions so exp() never sees garbage from padding (and its
    # backward never multiplies 0 by inf).
    return torch.where(x.mask_BT, x.logprobs_BT - x.old_logprobs_BT, 0.0)


def _truncated_is_weight(x: LossInputs) -> Tensor:
    w_BT = torch.exp(x.log_is_weight_BT)
    return w_BT if x.is_cap is None else w_BT.clamp(max=x.is_cap)


def _kl_term(x: LossInputs) -> Tensor | float:
    return 0.0 if x.kl_BT is None else x.beta * x.kl_BT


def _in_band(log_w_BT: Tensor, band: tuple[float | None, float | None] | None) -> Tensor:
    in_band = torch.ones_like(log_w_BT, dtype=torch.bool)
    low, high = band if band is not None else (None, None)
    w_BT = torch.exp(log_w_BT)
    if low is not None:
        in_band &= w_BT >= low
    if high is not None:
        in_band &= w_BT <= high
    return in_band


def _normalizer(x: LossInputs, loss_type: str) -> float:
    """The step's count when given, else this micro-batch's own (at least 1, so never NaN)."""
    n = x.step_count if x.step_count is not None else STEP_COUNTS[loss_type](x.loss_mask_BT)
    return max(float(n), 1.0)


def _sum_T(x_BT: Tensor, mask_BT: Tensor) -> Tensor:
    return torch.where(mask_BT, x_BT, 0.0).sum(-1)


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask, x, 0.0).sum() / mask.sum().clamp(min=1)


def _zero(like: Tensor) -> Tensor:
    return torch.zeros((), dtype=like.dtype, device=like.device)


def _clip_stats(low: Tensor, high: Tensor, mask: Tensor, capped: Tensor | None = None) -> LossStats:
    """Fractions of (unmasked) tokens or sequences where each clip is active."""
    region = low | high if capped is None else low | high | capped
    n = mask.sum().clamp(min=1)
    return {
        "clip_ratio/low": (low.sum() / n).detach(),
        "clip_ratio/high": (high.sum() / n).detach(),
        "clip_ratio/region": (region.sum() / n).detach(),
    }


def _importance_stats(
    log_w_BT: Tensor, loss_mask_BT: Tensor, in_band_BT: Tensor, cap: float | None
) -> LossStats:
    w_BT = torch.exp(log_w_BT)
    n = loss_mask_BT.sum()
    if n == 0:
        one = torch.ones((), dtype=w_BT.dtype, device=w_BT.device)
        return {
            "importance_ratio/mean": one,
            "importance_ratio/min": one,
            "importance_ratio/max": one,
            "importance_ratio/truncated": one * 0,
            "masked_token_frac": one * 0,
        }
    w = w_BT[loss_mask_BT]
    truncated = (
        (w > cap) & in_band_BT[loss_mask_BT] if cap is not None else torch.zeros_like(w, dtype=torch.bool)
    )
    return {
        "importance_ratio/mean": w.mean(),
        "importance_ratio/min": w.min(),
        "importance_ratio/max": w.max(),
        "importance_ratio/truncated": truncated.float().mean(),
        "masked_token_frac": (~in_band_BT[loss_mask_BT]).float().mean(),
    }
