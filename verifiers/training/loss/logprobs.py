"""Per-token log-probs and entropy of sampled tokens, without materializing a full log-softmax.

Shapes (letters as in losses.py): ``B`` sequences, ``T`` scored positions, ``V``
vocabulary, ``N`` flattened rows; packed, ``L`` positions of the one sequence and
``M`` those whose logits are kept. A full
``log_softmax`` over ``[B, T, V]`` doubles the logits' memory (SmolLM2: V = 49152,
so 8 × 512 positions are 800 MB in fp32); working ``chunk_rows`` rows at a time
keeps the extra memory to one chunk.

A micro-batch whose rows share a prompt (a GRPO group) runs as one packed
sequence: the prompt once, no padding (``packed_logprobs``).

For the known decoder families (``chunked_head.output_head``) the logits are never kept
whole: the head runs a chunk of positions at a time, forward and backward
(``chunked_head.py``). ``from_hidden=False``, or any other model, takes the legacy path
below: the model returns ``[B, T, V]`` logits and ``selective_log_softmax`` reads them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from verifiers.training.loss.chunked_head import head_scoring, output_head, vocab_size
from verifiers.training.loss.packed_attention import install, make_segments

DEFAULT_CHUNK_ROWS = 1024  # positions (B*T rows) per chunk


def selective_log_softmax(logits_BTV: Tensor, ids_BT: Tensor, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Tensor:
    """``log_softmax(logits)[..., ids]`` as ``[B, T]`` float32, computed chunk by chunk.

    ``logsumexp`` in float32 even for bf16 logits: the difference of two large
    numbers loses the digits that importance ratios near 1 depend on.
    """
    B, T, V = logits_BTV.shape
    flat_NV, ids_N = logits_BTV.reshape(-1, V), ids_BT.reshape(-1)
    picked_N = flat_NV.gather(-1, ids_N[:, None]).squeeze(-1).float()
    return (picked_N - chunked_logsumexp(flat_NV, chunk_rows)).view(B, T)


def chunked_logsumexp(logits_NV: Tensor, chunk_rows: int = DEFAULT_CHUNK_ROWS) -> Tensor:
    """``logsumexp`` over the last dimension as ``[N]`` float32, computed ``chunk_rows`` rows at a time."""
    return torch.cat(
        [
            torch.logsumexp(logits_NV[s : s + chunk_rows].float(), -1)
            for s in range(0, logits_NV.shape[0], chunk_rows)
        ]
    )


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
    *,
    from_hidden: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """Log-probs of ``input_ids_BT[:, start:]`` under ``model``: ``([B, T - start], entropy or None)``.

    Logits at position ``t - 1`` score token ``t``; only the last ``T - start + 1``
    positions' logits are computed (``logits_to_keep``), the last one dropped.
    Logits are divided by ``temperature``: the policy that sampled is the
    temperature-scaled one, and the server reports its log-probs that way.
    When every row starts with the same ``start`` tokens (a GRPO group: one prompt,
    several completions), the rows run packed (``packed_logprobs``); positions after
    a row's last real token then hold 0 (they are padding, outside every loss mask).
    With ``from_hidden`` (the default) and a model whose head ``chunked_head.output_head``
    knows, the head runs ``chunk_rows`` positions at a time (fewer for a large vocabulary),
    forward and backward; otherwise the kept positions' logits are materialized whole.
    """
    if start < 1:
        raise ValueError(f"start={start} must be >= 1: the first token has no logits to score it")
    head = output_head(model) if from_hidden else None
    if can_pack(model, input_ids_BT, attention_mask_BT, start):
        return packed_logprobs(
            model,
            input_ids_BT,
            attention_mask_BT,
            start,
            temperature=temperature,
            with_entropy=with_entropy,
            chunk_rows=chunk_rows,
            head=head,
        )
    B, T = input_ids_BT.shape
    K = T - start + 1  # kept positions: start - 1 .. T - 1; the last one scores nothing
    inputs = {
        "input_ids": input_ids_BT,
        "attention_mask": attention_mask_BT,
        "logits_to_keep": K,
        "use_cache": False,
    }
    if head is not None:
        dev = input_ids_BT.device
        src_N = (torch.arange(B, device=dev)[:, None] * K + torch.arange(K - 1, device=dev)[None, :]).reshape(
            -1
        )
        ids_N = input_ids_BT[:, start:].reshape(-1)
        logprobs_N, entropy_N = scored_forward(
            model,
            head,
            inputs,
            src_N,
            ids_N,
            temperature=temperature,
            with_entropy=with_entropy,
            chunk_rows=chunk_rows,
        )
        entropy_BT = entropy_N.view(B, K - 1) if entropy_N is not None else None
        return logprobs_N.view(B, K - 1), entropy_BT
    out = model(**inputs)
    logits_BTV = out.logits[:, :-1, :]
    if temperature != 1.0:
        logits_BTV = logits_BTV / temperature
    ids_BT = input_ids_BT[:, start:]
    logprobs_BT = selective_log_softmax(logits_BTV, ids_BT, chunk_rows)
    entropy_BT = entropy_from_logits(logits_BTV, chunk_rows) if with_entropy else None
    return logprobs_BT, entropy_BT


def scored_forward(
    model: torch.nn.Module,
    head: torch.nn.Module,
    inputs: dict[str, Any],
    src_N: Tensor,
    ids_N: Tensor,
    *,
    temperature: float,
    with_entropy: bool,
    chunk_rows: int,
) -> tuple[Tensor, Tensor | None]:
    """``model(**inputs)`` with its head scoring ``ids_N`` from the kept positions ``src_N``
    (flattened ``[B, K]``) a chunk at a time: ``(log-probs [N], entropy [N] or None)``."""
    with head_scoring(
        head,
        src_N,
        ids_N,
        vocab=vocab_size(model),
        temperature=temperature,
        with_entropy=with_entropy,
        chunk_rows=chunk_rows,
    ) as scores:
        out = model(**inputs)
    logprobs_N = out.logits
    if scores.calls != 1 or logprobs_N.shape != ids_N.shape:
        raise RuntimeError(
            f"the chunked head ran {scores.calls} times and the model returned {tuple(logprobs_N.shape)}, "
            f"not once and {tuple(ids_N.shape)}: this model's forward is not a plain head projection; "
            "pass from_hidden=False (and report the model type)"
        )
    return logprobs_N, scores.entropy_N


def shared_prefix(input_ids_BT: Tensor, attention_mask_BT: Tensor, start: int) -> bool:
    """Whether all rows (2+) begin with the same ``start`` real tokens, so the prefix can run once."""
    B, T = input_ids_BT.shape
    if B < 2 or not 1 <= start < T:
        return False
    prefix_BT = input_ids_BT[:, :start]
    return bool(attention_mask_BT[:, :start].all()) and bool((prefix_BT == prefix_BT[:1]).all())


# Decoder families whose forward takes a custom 4D attention mask and explicit position_ids as
# given (transformers' create_causal_mask returns a 4D mask as is) and computes nothing else from
# the 2D mask; the packed path is checked against the plain forward on a Llama in the tests.
PACKABLE_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe")
MAX_PACKED_LEN = 8192  # the packed sequence's L x L attention mask (64 MiB as booleans) stays small
# From this packed length on, attention computes only the blocks the rows may see
# (packed_attention.py) instead of all L x L pairs under a mask. Measured on SmolLM2 + LoRA,
# forward+backward on 2 CPU cores: at 40 + 8 x 128 tokens (L = 1064) 6.55 s against 8.02 s
# with the full mask (and 7.79 s padded), at 300 + 8 x 200 12.3 s against 17.3 s; but at the
# vs_trl.py lengths (L ~ 300-450, rows of 5-64 tokens) its gathers and copies cost more than
# the pairs saved: training 10% slower over two interleaved runs of each.
SEGMENTED_FROM_LEN = 1024


def packing_pays(packed_len: int, rows: int, width: int, hidden_size: int) -> bool:
    """Whether one packed sequence of ``packed_len`` tokens under the full mask costs less than
    ``rows`` x ``width`` padded (from ``SEGMENTED_FROM_LEN`` on, packing is chosen without it:
    ``P^2 + B*N*(P + N)`` pairs and ``P + sum(n)`` tokens never exceed the padded batch's
    ``B*(P + N)^2`` and ``B*(P + N)``).

    Cost model, in token-equivalents: ``tokens + attention pairs / (4 * hidden_size)``.
    The token term is the linear layers (about ``24 * hidden^2`` FLOPs a token a layer),
    the pair term the attention scores (``4 * hidden`` a pair), with the constant fitted
    on SmolLM2-135M + LoRA, forward+backward on 2 CPU cores (prompt 441 tokens, 8
    completions of 24-360 tokens): ``3.67 ms * tokens + 1.7 us * pairs`` predicted the
    eight runs within 15%, and chose the faster path in each. Both paths score every pair of their block (the packed mask
    and the padded one are arbitrary masks, not ``is_causal``). Measured there, packing
    was 4.6x faster at 758 packed tokens and still 2.0x at 2038, where the old fixed
    1024-token cap had sent multi-turn groups down the padded path.
    """
    scale = 4.0 * max(hidden_size, 1)
    packed = packed_len + packed_len**2 / scale
    padded = rows * width + rows * width**2 / scale
    return packed <= padded


def _hf_config(model: torch.nn.Module) -> Any:
    while isinstance(getattr(model, "module", None), torch.nn.Module):  # DDP, DeepSpeed
        model = model.module
    return getattr(model, "config", None)


def can_pack(model: torch.nn.Module, input_ids_BT: Tensor, attention_mask_BT: Tensor, start: int) -> bool:
    """Whether ``packed_logprobs`` applies and pays: rows share their first ``start`` tokens and are
    right-padded, the model is a known decoder family using sdpa or eager attention (no sliding
    window shorter than the rows), the packed sequence is at most ``MAX_PACKED_LEN`` tokens, and
    :func:`packing_pays` says it costs less than the padded batch."""
    config = _hf_config(model)
    if config is None or getattr(config, "model_type", None) not in PACKABLE_MODEL_TYPES:
        return False
    if getattr(config, "_attn_implementation", None) not in ("sdpa", "eager"):
        return False
    B, T = input_ids_BT.shape
    window = getattr(config, "sliding_window", None) if getattr(config, "use_sliding_window", True) else None
    if window is not None and window < T:
        return False
    if not shared_prefix(input_ids_BT, attention_mask_BT, start):
        return False
    lengths_B = attention_mask_BT.sum(1)
    right_padded = attention_mask_BT.bool() == (torch.arange(T, device=lengths_B.device) < lengths_B[:, None])
    if not bool(right_padded.all()):
        return False
    packed_len = start + int((lengths_B - start).sum())
    if packed_len > MAX_PACKED_LEN:
        return False
    if packed_len >= SEGMENTED_FROM_LEN:  # packed_attention: never costs more than padding
        return True
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    return packing_pays(packed_len, B, int(lengths_B.max()), hidden)


def packed_logprobs(
    model: torch.nn.Module,
    input_ids_BT: Tensor,
    attention_mask_BT: Tensor,
    start: int,
    *,
    temperature: float,
    with_entropy: bool,
    chunk_rows: int,
    head: torch.nn.Module | None = None,
) -> tuple[Tensor, Tensor | None]:
    """``sequence_logprobs`` for rows that share their first ``start`` tokens (``can_pack``), which calls it.

    The rows become one sequence, the prefix once and then each row's tokens after
    it, ``[prefix | row 0 | row 1 | ...]``, with their own positions and a mask that
    lets each row's tokens see the prefix and, causally, themselves. Every token sees
    exactly what it sees in its own row, so log-probs and gradients equal the plain
    forward's up to rounding, while a group of K completions costs one prompt and no
    padding: SmolLM2 + LoRA forward+backward on 53 + 8 x (22..64) tokens took 2.96 s
    instead of 4.69 s on 2 CPU cores (fp32); on an H100 the wall time is about the same
    at this size (launch-bound) but peak memory is lower. From ``SEGMENTED_FROM_LEN``
    tokens on, the attention computes only the blocks the mask allows
    (``packed_attention``). Positions past a row's end are 0. With ``head``
    (``chunked_head.output_head``), the head scores a chunk of positions at a time.
    """
    B, T = input_ids_BT.shape
    dev = input_ids_BT.device
    lengths = attention_mask_BT.sum(1).tolist()
    counts_B = torch.tensor([n - start for n in lengths], device=dev)  # each row's tokens after the prefix
    packed = torch.cat([input_ids_BT[0, :start]] + [input_ids_BT[i, start:n] for i, n in enumerate(lengths)])
    L = packed.shape[0]
    arange = torch.arange(L, device=dev)
    sizes = torch.cat([counts_B.new_tensor([start]), counts_B])  # segments: the prefix, then each row
    segment = torch.repeat_interleave(torch.arange(B + 1, device=dev), sizes)
    first = torch.cumsum(sizes, 0) - sizes  # where each segment starts
    position = torch.where(segment == 0, arange, arange - first[segment] + start)
    allowed = (arange[:, None] >= arange[None, :]) & (
        (segment[None, :] == 0) | (segment[:, None] == segment[None, :])
    )
    extra: dict[str, Any] = {}
    if L >= SEGMENTED_FROM_LEN:  # the attention layers read the blocks from vf_segments
        install(model)
        extra["vf_segments"] = make_segments(start, counts_B.tolist(), dev)
        mask = allowed  # what each token sees; a 4D mask is used as given (nothing built from it)
    elif _hf_config(model)._attn_implementation == "sdpa":
        mask = allowed  # sdpa takes a boolean mask: True attends
    else:  # eager adds the mask to the scores
        dtype = next(model.parameters()).dtype
        mask = torch.zeros(L, L, dtype=dtype, device=dev).masked_fill(~allowed, torch.finfo(dtype).min)
    # Token k of row b (k < its count) is scored by the prefix's last position when k = 0,
    # else by the row's previous token; src_N indexes the kept positions start - 1 .. L - 1.
    row_N = torch.repeat_interleave(torch.arange(B, device=dev), counts_B)
    k_N = arange[: len(row_N)] - (first[1:] - start)[row_N]
    src_N = torch.where(k_N == 0, 0, first[1:][row_N] + k_N - 1 - (start - 1))
    target_N = input_ids_BT[row_N, start + k_N]
    inputs = {
        "input_ids": packed[None],
        "attention_mask": mask[None, None],
        "position_ids": position[None],
        "logits_to_keep": L - start + 1,
        "use_cache": False,
        **extra,
    }
    entropy_N: Tensor | None = None
    if head is not None:
        logprobs_N, entropy_N = scored_forward(
            model,
            head,
            inputs,
            src_N,
            target_N,
            temperature=temperature,
            with_entropy=with_entropy,
            chunk_rows=chunk_rows,
        )
    else:
        logits_MV = model(**inputs).logits[0]  # packed positions start - 1 .. L - 1
        if temperature != 1.0:
            logits_MV = logits_MV / temperature
        logprobs_N = logits_MV[src_N, target_N].float() - chunked_logsumexp(logits_MV, chunk_rows)[src_N]
        if with_entropy:
            entropy_N = entropy_from_logits(logits_MV[None], chunk_rows)[0][src_N]
    logprobs_BT = logprobs_N.new_zeros(B, T - start).index_put((row_N, k_N), logprobs_N)
    entropy_BT = None
    if entropy_N is not None:
        entropy_BT = entropy_N.new_zeros(B, T - start).index_put((row_N, k_N), entropy_N)
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


@torch.no_grad()
def eval_logprobs(model, ids, attn, start, temperature: float, device: Any) -> torch.Tensor:
    """``model``'s log-probs of ``ids[:, start:]``, on the CPU, computed in eval mode."""
    # Eval mode: dropout (e.g. LoRA's) would make stored log-probs a random draw.
    was_training = model.training
    model.eval()
    try:
        lp, _ = sequence_logprobs(model, ids.to(device), attn.to(device), start, temperature)
    finally:
        model.train(was_training)
    return lp.cpu()
