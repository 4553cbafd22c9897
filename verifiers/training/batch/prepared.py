"""The generation batch being trained: a ``GeneratedBatch`` made ready for the loss.

On a generation batch's first step ticket every process (each receives the whole
batch) builds it in two stages:

1. ``train_batch``: per-rollout rewards -> group-relative advantages
   (advantages.py) -> one padded ``TrainBatch`` of every sample (batching.py).
2. ``build_buffer``: this process's slice of it, cut into ``steps_per_generation``
   micro-batches, each trimmed to what the loss needs, with the old-policy and
   reference log-probs computed now, without gradients (they must not move while
   the batch is trained), and each optimizer step's loss normalizer counted over
   every process's share (losses.py).

The resulting ``Buffer`` is what the trainer hands out micro-batch by micro-batch,
and what a checkpoint taken inside a generation batch saves (checkpoint.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from verifiers.training.metrics import step as M
from verifiers.training.batch.advantages import compute_advantages
from verifiers.training.batch.tensors import TrainBatch, build_train_batch, split_batch
from verifiers.training.loss.logprobs import scoring_inputs, sequence_logprobs
from verifiers.training.loss.losses import step_counts
from verifiers.training.generation.producer import GeneratedBatch

Scorer = Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor]
"""``(input_ids_BT, attention_mask_BT, start) -> log-probs of [:, start:]``, without gradients."""


@dataclass
class Buffer:
    """The generation batch being trained: this process's micro-batches, ready for the loss."""

    index: int
    micro: list[dict[str, Any]]
    step_counts: list[float] = field(default_factory=list)  # each optimizer step's loss normalizer
    rollout_ids: list[str] = field(default_factory=list)


def rollout_ids(batch: GeneratedBatch) -> list[str]:
    """``"<batch>.<k>:<digest>"`` per rollout: its place in the run and a hash of its prompt and completion."""
    out = batch.outputs
    ids = []
    for k, (prompt, completion) in enumerate(zip(out.prompt, out.completion, strict=True)):
        text = json.dumps([prompt, completion], sort_keys=True, default=str)
        ids.append(f"{batch.index}.{k}:{hashlib.sha1(text.encode()).hexdigest()[:12]}")
    return ids


def train_batch(
    batch: GeneratedBatch, args: Any, pad_id: int
) -> tuple[list[float], torch.Tensor, dict[str, float], TrainBatch]:
    """Per-rollout rewards, advantages and their stats, and the padded ``TrainBatch`` of every sample."""
    outputs, processed = batch.outputs, batch.processed
    rewards = M.rollout_rewards(processed, len(outputs), outputs.reward)
    advantages_B, adv_stats = compute_advantages(
        torch.tensor(rewards), args.num_generations, args.scale_rewards
    )
    return rewards, advantages_B, adv_stats, build_train_batch(processed, advantages_B, pad_id)


def build_buffer(
    batch: GeneratedBatch,
    train: TrainBatch,
    args: Any,
    *,
    num_processes: int,
    process_index: int,
    policy: Scorer,
    reference: Scorer,
) -> Buffer:
    """This process's micro-batches of ``train``, scored by ``policy`` / ``reference`` where the loss needs it."""
    P, steps = num_processes, args.steps_per_generation  # P as in losses.py: processes
    index = batch.processed.rollout_index or None  # cuts between rollouts (split_batch)
    parts = split_batch(
        train, num_processes=P, process_index=process_index, num_micro_batches=steps, rollout_index=index
    )
    micro = [micro_inputs(mb, args, policy, reference) for mb in parts]
    # Every process sees the whole batch, so each counts every process's share of each step.
    masks = [
        [mb.loss_mask_BT for mb in split_batch(train, num_processes=P, process_index=p, num_micro_batches=steps,
                                               rollout_index=index)]
        for p in range(P)
    ]  # fmt: skip
    counts = step_counts(args.loss_type, masks, args.gradient_accumulation_steps)
    return Buffer(batch.index, micro, counts, rollout_ids(batch))


def micro_inputs(mb: TrainBatch, args: Any, policy: Scorer, reference: Scorer) -> dict[str, Any]:
    """The trimmed micro-batch plus old and reference log-probs, computed now (no grad)."""
    out = scoring_inputs(mb.input_ids_BT, mb.attention_mask_BT, mb.loss_mask_BT, mb.sampling_logprobs_BT)
    out["advantages_B"] = mb.advantages_B
    ids, attn, start = out["input_ids_BT"], out["attention_mask_BT"], out["start"]
    # Old log-probs are needed once the policy moves within a generation batch.
    if args.num_iterations > 1 or args.steps_per_generation > args.gradient_accumulation_steps:
        out["old_logprobs_BT"] = policy(ids, attn, start)
    if args.beta > 0:
        out["ref_logprobs_BT"] = reference(ids, attn, start)
    return out


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
