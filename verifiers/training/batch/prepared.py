"""The generation batch being trained: a ``GeneratedBatch`` made ready for the loss.

On a generation batch's first step ticket every process (each receives the whole
batch) builds it in three stages:

1. ``train_batch``: per-rollout rewards -> group-relative advantages
   (loss/advantages.py) -> one padded ``TrainBatch`` of every sample (tensors.py).
2. ``prepare_batch``: this process's slice of it, cut into the trained batch's
   micro-batches, each trimmed to what the loss needs, and each optimizer step's
   loss normalizer counted over every process's share (losses.py). The result is a
   ``PreparedBatch``.
3. The trainer, which owns the models, adds to each micro-batch the log-probs that
   ``scores_needed`` names (old policy, reference), computed now without gradients:
   they must not move while the batch is trained (``eval_logprobs``, loss/logprobs.py).

The ``PreparedBatch`` is what the trainer hands out micro-batch by micro-batch, and
what a checkpoint taken inside a trained batch saves (lifecycle/checkpoint.py).
``batches_trained`` says how many trained batches a number of optimizer steps completed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch

from verifiers.training.batch.tensors import TrainBatch, build_train_batch, split_batch
from verifiers.training.loss.advantages import compute_advantages
from verifiers.training.loss.logprobs import scoring_inputs
from verifiers.training.loss.losses import step_counts
from verifiers.training.metrics import step as M
from verifiers.training.types import GeneratedBatch, PreparedBatch


def rollout_ids(batch: GeneratedBatch) -> list[str]:
    """``"<batch>.<k>:<digest>"`` per rollout: its place in the run and a hash of its prompt and completion."""
    out = batch.outputs
    ids = []
    for k, (prompt, completion) in enumerate(zip(out.prompt, out.completion, strict=True)):
        text = json.dumps([prompt, completion], sort_keys=True, default=str)
        ids.append(f"{batch.index}.{k}:{hashlib.sha1(text.encode()).hexdigest()[:12]}")
    return ids


def batches_trained(
    global_step: int, gradient_accumulation_steps: int, micro_per_batch: int
) -> tuple[int, bool]:
    """After ``global_step`` optimizer steps: ``(trained batches completed, whether the step ended
    inside one)``. ``micro_per_batch`` is a trained batch's step tickets (micro-steps ×
    ``num_iterations``); a batch spans several optimizer steps when it exceeds one."""
    done, rest = divmod(global_step * gradient_accumulation_steps, micro_per_batch)
    return done, rest != 0


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


def prepare_batch(
    batch: GeneratedBatch,
    train: TrainBatch,
    *,
    micro_steps: int,
    gradient_accumulation_steps: int,
    loss_type: str,
    num_processes: int,
    process_index: int,
) -> PreparedBatch:
    """This process's ``micro_steps`` micro-batches of ``train``, trimmed, with each step's loss
    normalizer; not yet scored (the trainer adds the log-probs ``scores_needed`` names)."""
    P = num_processes  # as in losses.py: processes
    index = batch.processed.rollout_index or None  # cuts between rollouts (split_batch)
    parts = split_batch(
        train,
        num_processes=P,
        process_index=process_index,
        num_micro_batches=micro_steps,
        rollout_index=index,
    )
    micro = [micro_inputs(mb) for mb in parts]
    # Every process sees the whole batch, so each counts every process's share of each step.
    masks = [
        [mb.loss_mask_BT for mb in split_batch(train, num_processes=P, process_index=p,
                                               num_micro_batches=micro_steps, rollout_index=index)]
        for p in range(P)
    ]  # fmt: skip
    counts = step_counts(loss_type, masks, gradient_accumulation_steps)
    return PreparedBatch(batch.index, micro, counts, rollout_ids(batch))


def micro_inputs(mb: TrainBatch) -> dict[str, Any]:
    """One micro-batch trimmed to what the loss needs, with its advantages."""
    out = scoring_inputs(mb.input_ids_BT, mb.attention_mask_BT, mb.loss_mask_BT, mb.sampling_logprobs_BT)
    out["advantages_B"] = mb.advantages_B
    return out


def scores_needed(
    *, num_iterations: int, micro_steps: int, gradient_accumulation_steps: int, beta: float
) -> tuple[bool, bool]:
    """``(old, reference)``: which log-probs each micro-batch needs before training.

    Old log-probs only once the policy moves within a trained batch (it is trained more
    than once, or spans several optimizer steps); otherwise the loss uses the current
    ones, detached, which are the same values. Reference log-probs for the KL term (``beta > 0``).
    """
    return num_iterations > 1 or micro_steps > gradient_accumulation_steps, beta > 0
