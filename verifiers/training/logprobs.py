"""Per-token log-probs and entropy of sampled tokens, without materializing a full log-softmax.

Shapes: ``B`` sequences, ``T`` scored positions, ``V`` vocabulary. A full
``log_softmax`` over ``[B, T, V]`` doubles the logits' memory (SmolLM2: V = 49152,
so 8 × 512 positions are 800 MB in fp32); working ``chunk_rows`` rows at a time
keeps the extra memory to one chunk.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

DEFAULT_CHUNK_ROWS = 1024  # positions (B*T rows) per chunk


def selective_log_softmax(logits_BTV: Tensor, ids_BT: Tensor, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Tensor:
    """``log_softmax(logits)[..., ids]`` as ``[B, T]`` float32, computed chunk by chunk.

    ``logsumexp`` in float32 even for bf16 logits: the difference of two large
    numbers loses the digits that importance ratios near 1 depend on.
    """
    B, T, V = logits_BTV.shape
    flat_NV, ids_N = logits_BTV.reshape(-1, V), ids_BT.reshape(-1)
    out_N = torch.empty(ids_N.shape, dtype=torch.float32, device=logits_BTV.device)
    for s in range(0, flat_NV.shape[0], chunk_rows):
        rows = flat_NV[s : s + chunk_rows].float()
        picked = rows.gather(-1, ids_N[s : s + chunk_rows, None]).squeeze(-1)
        out_N[s : s + chunk_rows] = picked - torch.logsumexp(rows, dim=-1)
    return out_N.view(B, T)


def entropy_from_logits(logits_BTV: Tensor, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Tensor:
    """Entropy of each position's distribution, ``[B, T]`` float32, no gradient."""
    B, T, V = logits_BTV.shape
    flat_NV = logits_BTV.detach().reshape(-1, V)
    out_N = torch.empty(flat_NV.shape[0], dtype=torch.float32, device=logits_BTV.device)
    for s in range(0, flat_NV.shape[0], chunk_rows):
        logp = torch.log_softmax(flat_NV[s : s + chunk_rows].float(), dim=-1)
        out_N[s : s + chunk_rows] = -(logp.exp() * logp).sum(-1)
    return out_N.view(B, T)


def sequence_logprobs(
    model: torch.nn.Module,
    input_ids_BT: Tensor,
    attention_mask_BT: Tensor,
    start: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs of ``input_ids_BT[:, start:]`` under ``model``: ``([B, T - start], entropy or None)``.

    Logits at position ``t - 1`` score token ``t``; only the last ``T - start + 1``
    positions' logits are computed (``logits_to_keep``), the last one dropped.
    Logits are divided by ``temperature``: the policy that sampled is the
    temperature-scaled one, and the server reports its log-probs that way.
    """
    T = input_ids_BT.shape[1]
    keep = T - start + 1
    if start < 1:
        raise ValueError(f"start={start} must be >= 1: the first token has no logits to score it")
    out = model(
        input_ids=input_ids_BT, attention_mask=attention_mask_BT, logits_to_keep=keep, use_cache=False
    )
    logits_BTV = out.logits[:, :-1, :]
    if temperature != 1.0:
        logits_BTV = logits_BTV / temperature
    ids_BT = input_ids_BT[:, start:]
    logprobs_BT = selective_log_softmax(logits_BTV, ids_BT, chunk_rows)
    entropy_BT = entropy_from_logits(logits_BTV, chunk_rows) if with_entropy else None
    return logprobs_BT, entropy_BT


def scoring_inputs(
    input_ids_BT: Tensor, attention_mask_BT: Tensor, loss_mask_BT: Tensor, sampling_logprobs_BT: Tensor
) -> dict[str, Any]:
    """One micro-batch, trimmed to what the loss needs: the model's inputs and the scored window.

    Columns after the last real token are dropped (a micro-batch is padded to the
    longest sample of its whole generation batch), and ``start`` is the first
    column holding a loss token (>= 1), so logits are computed only from there on;
    token-level tensors are returned already sliced to ``[:, start:]``.
    """
    real = attention_mask_BT.nonzero()
    width = int(real[:, 1].max()) + 1 if len(real) else 1
    has_loss = loss_mask_BT[:, :width].any(dim=1)
    firsts = loss_mask_BT[has_loss, :width].float().argmax(dim=1)
    start = int(firsts.min()) if len(firsts) else width - 1
    start = min(max(start, 1), max(width - 1, 1))
    return {
        "input_ids_BT": input_ids_BT[:, :width],
        "attention_mask_BT": attention_mask_BT[:, :width],
        "start": start,
        "loss_mask_BT": loss_mask_BT[:, start:width],
        "sampling_logprobs_BT": sampling_logprobs_BT[:, start:width],
    }
