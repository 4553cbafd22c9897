"""Attention for a packed GRPO group that computes only the blocks the group's mask allows.

``logprobs.packed_logprobs`` runs a group as one sequence ``[prefix | row 0 | row 1 | ...]``:
``P`` prefix tokens, then ``B`` rows of ``n_b`` tokens, ``L = P + sum(n_b)``. Each row's
tokens see the prefix and, causally, themselves. Through plain attention with an
``L x L`` mask, every one of the ``L^2`` query-key pairs is scored, softmaxed and
multiplied, and most are then masked: with 8 rows of 128 tokens after a 40-token
prompt, under 10% are used. This function computes

* the prefix causally on itself: one ``[P, P]`` block (``is_causal``), and
* all rows at once as a batch ``[B, H, N, P + N]`` (``N`` the longest row): each row's
  queries against the prefix keys (repeated for each row) and its own keys, rows padded
  to ``N`` with padded queries dropped and padded keys masked,

so ``P^2 + B * N * (P + N)`` pairs instead of ``L^2``. The output is the same as the
masked attention's up to rounding (tests/training/loss/test_logprobs.py checks log-probs and
gradients against the plain padded forward).

Its gathers and copies cost more than the pairs saved in short groups, so
``logprobs.packed_logprobs`` uses it from ``logprobs.SEGMENTED_FROM_LEN`` tokens on.
It is registered with transformers' ``AttentionInterface`` as ``"vf_packed"``; ``install``
puts hooks on the model's attention layers that switch to it for a forward that passes
the layout as the ``vf_segments`` keyword (the packed one) and back after each layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

NAME = "vf_packed"


@dataclass(frozen=True)
class Segments:
    """Where the rows sit in the packed sequence.

    ``prefix``: ``P``; ``index_BN``: packed position of row ``b``'s token ``k`` (padding
    points at position 0, never read); ``valid_BN``: which entries are real tokens;
    ``mask_B1NK``: what each row query may see among ``[prefix keys | own keys]``.
    """

    prefix: int
    index_BN: Tensor
    valid_BN: Tensor
    mask_B1NK: Tensor


def make_segments(prefix: int, counts: list[int], device: Any) -> Segments:
    """The layout for a prefix of ``prefix`` tokens followed by rows of ``counts`` tokens."""
    B, N = len(counts), max(counts)
    counts_B = torch.tensor(counts, device=device)
    k_N = torch.arange(N, device=device)
    valid_BN = k_N[None, :] < counts_B[:, None]
    first_B = prefix + torch.cumsum(counts_B, 0) - counts_B  # each row's first packed position
    index_BN = torch.where(valid_BN, first_B[:, None] + k_N[None, :], 0)
    # Own keys: causal and real. Prefix keys: all visible, also to padded queries, so no
    # softmax row is empty (an all-masked row would give NaN, even if it is dropped after).
    own_BNN = (k_N[None, :] <= k_N[:, None])[None] & valid_BN[:, None, :]
    prefix_BNP = torch.ones(B, N, prefix, dtype=torch.bool, device=device)
    mask_B1NK = torch.cat([prefix_BNP, own_BNN], dim=2)[:, None]
    return Segments(prefix=prefix, index_BN=index_BN, valid_BN=valid_BN, mask_B1NK=mask_B1NK)


def packed_attention(
    module: torch.nn.Module,
    query_1HLD: Tensor,
    key_1KLD: Tensor,
    value_1KLD: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    *,
    vf_segments: Segments,
    **kwargs: Any,
) -> tuple[Tensor, None]:
    """transformers attention-function signature; returns ``([1, L, H, D], None)``.

    ``K`` key/value heads (grouped-query attention: each serves ``H / K`` query heads).
    The hooks (``install``) switch a layer here only for a forward given ``vf_segments``;
    ``attention_mask`` (the full L x L one) is not read.
    """
    seg = vf_segments
    P = seg.prefix
    H = query_1HLD.shape[1]
    groups = H // key_1KLD.shape[1]
    key_HLD = key_1KLD[0].repeat_interleave(groups, dim=0) if groups > 1 else key_1KLD[0]
    value_HLD = value_1KLD[0].repeat_interleave(groups, dim=0) if groups > 1 else value_1KLD[0]
    query_HLD = query_1HLD[0]
    drop = dropout if module.training else 0.0
    sdpa = torch.nn.functional.scaled_dot_product_attention
    prefix_HPD = sdpa(
        query_HLD[:, :P], key_HLD[:, :P], value_HLD[:, :P], is_causal=True, dropout_p=drop, scale=scaling
    )
    B, N = seg.index_BN.shape
    if N == 0:  # every row empty: only the prefix
        return prefix_HPD.transpose(0, 1)[None].contiguous(), None
    rows = seg.index_BN.reshape(-1)

    def by_row(x_HLD: Tensor) -> Tensor:  # [H, L, D] -> [B, H, N, D]
        return x_HLD[:, rows].view(H, B, N, -1).transpose(0, 1)

    keys_BHKD = torch.cat([key_HLD[None, :, :P].expand(B, -1, -1, -1), by_row(key_HLD)], dim=2)
    values_BHKD = torch.cat([value_HLD[None, :, :P].expand(B, -1, -1, -1), by_row(value_HLD)], dim=2)
    rows_BHND = sdpa(
        by_row(query_HLD), keys_BHKD, values_BHKD, attn_mask=seg.mask_B1NK, dropout_p=drop, scale=scaling
    )
    # Real entries in row-major order are exactly packed positions P .. L-1.
    rows_HMD = rows_BHND.transpose(0, 1)[:, seg.valid_BN]
    out_HLD = torch.cat([prefix_HPD, rows_HMD], dim=1)
    return out_HLD.transpose(0, 1)[None].contiguous(), None


def register() -> None:
    """Add ``packed_attention`` to transformers' registry (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, packed_attention)


def install(model: torch.nn.Module) -> None:
    """Make the model's attention layers call ``packed_attention`` for a forward given
    ``vf_segments``, and their own implementation otherwise (idempotent).

    Hooks on each attention layer, not a switch around the call: with gradient checkpointing
    (grpo_defaults' setting) the layers run again during backward, long after the packed
    forward returned, and they must take the same path then. The recomputation passes the same
    keywords, so the hooks switch again. The switch is the shared config's
    ``_attn_implementation``, which the layer reads at each call; it is restored when the
    layer returns or raises.
    """
    register()
    for module in model.modules():
        if _is_attention(module) and not getattr(module, "_vf_packed_hooks", False):
            module.register_forward_pre_hook(_switch_on, with_kwargs=True)
            module.register_forward_hook(_switch_off, with_kwargs=True, always_call=True)
            module._vf_packed_hooks = True


def _is_attention(module: torch.nn.Module) -> bool:
    """A transformers decoder attention layer (LlamaAttention, Qwen2Attention, ...)."""
    return (
        type(module).__name__.endswith("Attention")
        and hasattr(module, "layer_idx")
        and hasattr(getattr(module, "config", None), "_attn_implementation")
    )


def _switch_on(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
    if kwargs.get("vf_segments") is not None:
        module._vf_attn_before = module.config._attn_implementation
        module.config._attn_implementation = NAME


def _switch_off(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
    before = module.__dict__.pop("_vf_attn_before", None)
    if before is not None:
        module.config._attn_implementation = before
