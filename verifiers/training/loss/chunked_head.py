"""Log-probs and entropy of sampled tokens from the last hidden states, a chunk of positions at a time.

The output head projects ``H`` hidden values to ``V`` logits per position. Kept whole, the
logits of ``N`` scored positions are ``[N, V]`` (8 x 8192 completion tokens at Qwen's
V = 151,936: 20 GB in bf16) and backward holds their gradient as well. Here the head runs
on ``rows`` positions at a time: each chunk's logits become its ``N``-long log-probs (and,
without gradient, entropies) and are dropped; backward recomputes one chunk's logits at a
time (non-reentrant ``torch.utils.checkpoint``). The largest tensor alive is one chunk's
``[rows, V]``.

Where it runs. ``head_scoring`` swaps the head module's ``forward`` for the duration of one
call of the whole model, so the model runs as usual (every wrapper's forward: PEFT, DDP,
the DeepSpeed engine, FSDP2's hooks) and the head's call, inside its own hooks, returns
log-probs instead of logits. This departs from TRL (``add_fused_lm_head``), which runs the
decoder and then multiplies by ``lm_head.weight`` directly: calling the real head's own
forward per chunk keeps a LoRA adapter or ``modules_to_save`` on the head in the graph, and
running inside the head's call keeps the hooks' bookkeeping:

* DeepSpeed ZeRO-3 gathers the head's parameters in its pre-forward hook and releases them
  in its post-forward hook, so once per forward, however many chunks run in between; in
  backward its pre-backward hook (on the head's output, here the log-probs) gathers them
  again before the first chunk is recomputed and its post-backward hook (on the head's
  input) releases them after the last, once. A head with submodules (PEFT's wrappers) is
  the exception: DeepSpeed's hooks on the inner ``base_layer`` fire for every chunk.
* FSDP2 unshards the head with its module (the root, or the head's own ``fully_shard``)
  around the call, and its pre-/post-backward hooks sit on the same output and input.

A frozen head (LoRA's usual case: ``lm_head`` not among the targets) needs no
recomputation. A log-prob's gradient with respect to its hidden state is a vector the
forward can compute: ``d logp_n / d h_n = (onehot(id_n) - softmax_n) W / T``, ``[H]`` per
position. ``FrozenHeadScores`` computes it in the chunk's forward, from the softmax it has in
hand, and keeps it (``[rows, H]``, the size of the hidden states); backward multiplies it by
each log-prob's incoming gradient. Where checkpointing ran the head matmul and the
log-softmax twice and backward's elementwise passes over ``[rows, V]`` a third time, this
runs the matmul's transpose once in forward: on SmolLM2 (V = 49,152) in bf16, 288 positions,
forward and backward of the head 285 ms -> 120 ms on 2 Xeon cores. A trainable head (full
fine-tuning, LoRA on the head, ``modules_to_save``) needs ``softmax_n`` again in backward
for its weight's gradient, so it keeps the checkpointed chunks.

The chunk's log-softmax runs in float32 after dividing the logits by the temperature in
float32 (the legacy path divided in the compute dtype): vLLM samples from float32 logits.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

# Causal-LM families whose forward ends in ``logits = self.lm_head(hidden[:, keep])`` and
# returns those logits as they are (checked in transformers 5.x's modeling files): no
# softcapping (Gemma 2/3), logit scale (Cohere, Granite) or upcast after the head. Other
# families keep the full-logits path.
PLAIN_HEAD_MODEL_TYPES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "phi3",
    "gemma",
    "olmo2",
)
# Config fields that would change the logits after the head; any of them set means the
# model's forward is not the plain projection above, whatever its model_type says.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier")
# Logits per chunk: 2^26 values (256 MiB in float32). SmolLM2 (V = 49,152): 1365 rows, so the
# chunk_rows cap decides; Qwen (V = 151,936): 441 rows a chunk.
CHUNK_ELEMENTS = 1 << 26


def causal_lm(model: torch.nn.Module) -> torch.nn.Module:
    """The transformers causal LM inside DDP / DeepSpeed (``.module``) and PEFT wrappers."""
    while isinstance(getattr(model, "module", None), torch.nn.Module):
        model = model.module
    get_base = getattr(model, "get_base_model", None)  # PeftModel
    return get_base() if callable(get_base) else model


def plain_head_config(config: Any) -> bool:
    """Whether a model with this (transformers) config ends in a plain ``lm_head(hidden)``: the
    families above, with no logit transform set to anything but a neutral 1. The trainer scores
    such a model a chunk at a time; vf-rl's memory plan (cli/rl/shared_gpu.py) counts it so."""
    if config is None or getattr(config, "model_type", None) not in PLAIN_HEAD_MODEL_TYPES:
        return False
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return all(getattr(text, name, None) in (None, 1, 1.0) for name in _LOGIT_TRANSFORMS)


def output_head(model: torch.nn.Module) -> torch.nn.Module | None:
    """The module the model's forward projects hidden states to logits with, or ``None`` where
    its forward is not known to be a plain projection (then callers use the full logits)."""
    lm = causal_lm(model)
    if not plain_head_config(getattr(lm, "config", None)):
        return None
    get_head = getattr(lm, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    # The forward calls self.lm_head: the head must be that very module (PEFT replaces it in place).
    if not isinstance(head, torch.nn.Module) or getattr(lm, "lm_head", None) is not head:
        return None
    return head


def vocab_size(model: torch.nn.Module) -> int:
    """The model's vocabulary size from its config (0 if it has none), to size the chunks."""
    config = getattr(causal_lm(model), "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(getattr(text, "vocab_size", 0) or 0)


def chunk_rows_for(vocab: int, chunk_rows: int) -> int:
    """Rows per chunk: at most ``chunk_rows``, and at most ``CHUNK_ELEMENTS`` logits."""
    return max(1, min(chunk_rows, CHUNK_ELEMENTS // max(vocab, 1)))


def _chunk_scores(
    project: Callable[[Tensor], Tensor],
    hidden_CH: Tensor,
    ids_C: Tensor,
    temperature: float,
    with_entropy: bool,
) -> tuple[Tensor, ...]:
    """One chunk: ``(log-probs [C],)`` or ``(log-probs [C], entropy [C])``, float32.

    The entropy is a metric (losses.py logs it detached), so it is computed without gradient,
    and not again when backward recomputes the chunk (a graph task is running then): the
    recomputation only has to reproduce what autograd saved, and the no-grad part saves nothing.
    """
    logits_CV = project(hidden_CH).float()
    if temperature != 1.0:
        logits_CV = logits_CV / temperature
    lse_C = torch.logsumexp(logits_CV, dim=-1)
    logprobs_C = logits_CV.gather(-1, ids_C[:, None]).squeeze(-1) - lse_C
    if not with_entropy or torch._C._current_graph_task_id() != -1:
        return (logprobs_C,)
    with torch.no_grad():
        logp_CV = logits_CV - lse_C[:, None]
        entropy_C = -(logp_CV.exp() * logp_CV).sum(-1)
    return logprobs_C, entropy_C


class FrozenHeadScores(torch.autograd.Function):
    """One chunk through a frozen linear head: ``(log-probs [C], entropy [C] or empty)``, float32.

    Forward keeps ``d logp / d hidden``, ``(onehot(ids) - softmax) W / T`` per row, and
    backward scales it by the incoming gradient: no logits are recomputed (module docstring).
    The entropy is a metric, without gradient, as in ``_chunk_scores``.
    """

    @staticmethod
    def forward(ctx, hidden_CH, head, ids_C, temperature, with_entropy):  # type: ignore[override]
        logits_CV = head.project(hidden_CH)
        logp_CV = logits_CV.float()
        del logits_CV
        if temperature != 1.0:
            logp_CV.div_(temperature)
        logp_CV.sub_(torch.logsumexp(logp_CV, dim=-1, keepdim=True))  # in place: log-softmax
        logprobs_C = logp_CV.gather(-1, ids_C[:, None]).squeeze(-1)
        if with_entropy:
            p_CV = logp_CV.exp()
            # Not a batched dot product: autocast would run bmm in bf16 (copies, and the rounding).
            entropy_C = -(p_CV * logp_CV).sum(-1)
        else:
            p_CV, entropy_C = logp_CV.exp_(), logp_CV.new_empty(0)
        del logp_CV
        # onehot - softmax, in place; the 1/T of d(logits/T)/d(logits) before the matmul, which
        # runs in the head's compute dtype as the matmul of backward's would.
        p_CV.neg_().scatter_add_(-1, ids_C[:, None], p_CV.new_ones(ids_C.shape[0], 1))
        if temperature != 1.0:
            p_CV.div_(temperature)
        jacobian_CH = p_CV.to(head.weight_VH.dtype) @ head.weight_VH
        ctx.save_for_backward(jacobian_CH)
        ctx.hidden_dtype = hidden_CH.dtype
        ctx.mark_non_differentiable(entropy_C)
        return logprobs_C, entropy_C

    @staticmethod
    def backward(ctx, grad_C, _grad_entropy):  # type: ignore[override]
        (jacobian_CH,) = ctx.saved_tensors
        grad_CH = (grad_C[:, None] * jacobian_CH).to(ctx.hidden_dtype)
        return grad_CH, None, None, None, None


@dataclass(frozen=True)
class FrozenHead:
    """A frozen plain ``nn.Linear`` head, its weight cast once to the dtype the head computes in."""

    weight_VH: Tensor  # in the compute dtype
    bias_V: Tensor | None
    autocast: bool  # the hidden states are cast too, as autocast casts a linear's inputs

    def project(self, hidden_CH: Tensor) -> Tensor:
        """The head's forward, ``F.linear`` as ``nn.Linear`` (under autocast) computes it."""
        x = hidden_CH.to(self.weight_VH.dtype) if self.autocast else hidden_CH
        return torch.nn.functional.linear(x, self.weight_VH, self.bias_V)


def frozen_head(head: torch.nn.Module, device_type: str) -> FrozenHead | None:
    """``head`` as a ``FrozenHead`` when it is a plain ``nn.Linear`` with nothing to train
    (``FrozenHeadScores`` applies), else ``None``. Called inside the head's call, where ZeRO-3 and
    FSDP2 have gathered its weight; ``head_scoring`` asks only for a head whose forward is its
    class's. Casting here, once per call, spares autocast's cast per chunk and the Jacobian's."""
    if not isinstance(head, torch.nn.Linear) or type(head).forward is not torch.nn.Linear.forward:
        return None
    if any(p.requires_grad for p in head.parameters()):
        return None
    weight, bias = head.weight, head.bias
    autocast = torch.is_autocast_enabled(device_type) and weight.is_floating_point()
    dtype = torch.get_autocast_dtype(device_type) if autocast else weight.dtype
    return FrozenHead(weight.to(dtype), bias.to(dtype) if bias is not None else None, autocast)


def chunked_logprobs(
    project: Callable[[Tensor], Tensor],
    hidden_NH: Tensor,
    ids_N: Tensor,
    *,
    vocab: int,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_rows: int = 1024,
    frozen: FrozenHead | None = None,
) -> tuple[Tensor, Tensor | None]:
    """``log_softmax(project(hidden) / temperature)[n, ids[n]]`` as ``[N]`` float32, and the
    entropy of each row's distribution (no gradient) when asked, a chunk of rows at a time.

    ``project`` maps ``[C, H]`` hidden states to ``[C, V]`` logits. With gradient, each chunk
    is checkpointed: its logits are recomputed in backward and never outlive the chunk; or,
    given ``frozen`` (the same head, frozen), ``FrozenHeadScores`` keeps the gradient's
    direction per row instead, and the no-grad chunks project with its cast weight.
    """
    rows = chunk_rows_for(vocab, chunk_rows)
    # split, not slicing: one SplitBackward concatenates the chunks' hidden-state gradients,
    # where a slice per chunk would each expand its gradient to the full [N, H].
    pieces = list(zip(hidden_NH.split(rows), ids_N.split(rows), strict=True))
    need_grad = torch.is_grad_enabled()
    out: list[tuple[Tensor, ...]] = []
    for hidden_CH, ids_C in pieces:
        if frozen is not None and need_grad:
            out.append(FrozenHeadScores.apply(hidden_CH, frozen, ids_C, temperature, with_entropy))
        elif frozen is not None:
            out.append(_chunk_scores(frozen.project, hidden_CH, ids_C, temperature, with_entropy))
        elif need_grad:
            out.append(
                checkpoint(
                    _chunk_scores, project, hidden_CH, ids_C, temperature, with_entropy, use_reentrant=False
                )
            )
        else:
            out.append(_chunk_scores(project, hidden_CH, ids_C, temperature, with_entropy))
    logprobs_N = torch.cat([o[0] for o in out])
    entropy_N = torch.cat([o[1] for o in out]) if with_entropy else None
    return logprobs_N, entropy_N


@dataclass
class HeadScores:
    """What one scored forward produced: filled by the head's swapped forward."""

    calls: int = 0
    entropy_N: Tensor | None = None


@contextlib.contextmanager
def head_scoring(
    head: torch.nn.Module,
    src_N: Tensor,
    ids_N: Tensor,
    *,
    vocab: int,
    temperature: float,
    with_entropy: bool,
    chunk_rows: int,
) -> Iterator[HeadScores]:
    """While open, ``head(hidden [..., K, H])`` returns the log-probs ``[N]`` of ``ids_N``, row
    ``n`` scored by the flattened position ``src_N[n]`` of its input, instead of the logits;
    the entropies go to the yielded ``HeadScores``. One call of the head is expected.

    ``forward`` is swapped on the instance and put back on exit (the chunks' recomputation in
    backward calls the original, bound here); the head's hooks (DeepSpeed, FSDP2) still wrap
    the call.
    """
    scores = HeadScores()
    had_own = "forward" in head.__dict__
    own = head.__dict__.get("forward")
    original = head.forward  # bound: the instance's own forward if it had one, else the class's

    def project(hidden_CH: Tensor) -> Tensor:
        return original(hidden_CH)

    def scoring_forward(self: torch.nn.Module, hidden: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if args or kwargs:
            raise TypeError("the chunked head takes only the hidden states")
        scores.calls += 1
        hidden_NH = hidden.reshape(-1, hidden.shape[-1]).index_select(0, src_N)
        logprobs_N, scores.entropy_N = chunked_logprobs(
            project,
            hidden_NH,
            ids_N,
            vocab=vocab,
            temperature=temperature,
            with_entropy=with_entropy,
            chunk_rows=chunk_rows,
            frozen=None if had_own else frozen_head(self, hidden.device.type),
        )
        return logprobs_N

    head.forward = types.MethodType(scoring_forward, head)
    try:
        yield scores
    finally:
        if had_own:
            head.forward = own
        else:
            del head.forward
