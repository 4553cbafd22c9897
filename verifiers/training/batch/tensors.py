"""Pure helpers that turn processed rollouts into training tensors and split them.

Shapes: ``B`` samples, ``T`` token positions of prompt + completion (right-padded).
``x_BT`` is per token, ``x_B`` per sample.

Layout of a ``TrainBatch`` (one row per sample)::

    input_ids_BT       p p p c c c c pad      prompt, then completion, then padding
    attention_mask_BT  1 1 1 1 1 1 1 0        every real token, prompt included
    loss_mask_BT       0 0 0 1 1 0 1 0        sampled tokens that are trained (env tokens 0)

The two masks are distinct tensors with distinct meaning: the model attends to
the prompt, but is not trained on it. Right padding keeps each row's positions
0..len-1, the positions the server used, so no ``position_ids`` are needed.
Token-level tensors are aligned with ``input_ids_BT``: ``sampling_logprobs_BT[b, t]``
is the server's log-prob of ``input_ids_BT[b, t]`` (0 where ``loss_mask_BT`` is 0).

One forward pass of the model over ``input_ids_BT`` gives every completion
token's log-prob: logits at position ``t - 1`` score token ``t``. No completion
token lies before ``completion_start`` (the shortest prompt), so the trainer may
keep only logits of positions ``completion_start - 1 .. T - 2`` (HF
``logits_to_keep = T - completion_start + 1``, dropping the last) and compare them
with ``input_ids_BT[:, completion_start:]``, slicing every ``*_BT`` tensor the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from verifiers.types import ProcessedOutputs


def even_slices(n: int, parts: int) -> list[slice]:
    """``parts`` contiguous slices covering ``range(n)``; sizes differ by at most one, larger first."""
    if parts < 1:
        raise ValueError(f"cannot split into parts={parts}")
    size, extra = divmod(n, parts)
    bounds = [i * size + min(i, extra) for i in range(parts + 1)]
    return [slice(bounds[i], bounds[i + 1]) for i in range(parts)]


def split_batch(
    batch: Any,
    *,
    num_processes: int,
    process_index: int,
    num_micro_batches: int,
    rollout_index: Sequence[int] | None = None,
) -> list[Any]:
    """This process's micro-batches of a global batch (anything with ``len`` and slicing).

    Every process receives the same global batch, takes its contiguous slice
    (process ``i`` gets the ``i``-th of ``num_processes`` even slices), and cuts it
    into ``num_micro_batches`` contiguous micro-batches. When ``len(batch)`` is a
    multiple of ``num_processes × num_micro_batches`` (the config guarantees it for
    one sample per rollout) every micro-batch has exactly that many rows, i.e.
    ``per_device_train_batch_size``; otherwise sizes differ by at most one, and every
    process still runs the same number of micro-steps.

    ``rollout_index`` (the rollout of each row, non-decreasing) makes the cuts fall
    between rollouts: the rollouts are split as above and each part takes all the
    rows of its rollouts. A rollout trained as one sample per turn (a chat template
    that rewrote a turn) then leaves every cut where it would be with one sample per
    rollout, so a GRPO group's rows stay together and keep sharing their prompt
    (packed log-probs); cutting rows evenly would shift every later cut by a row.
    """
    if not 0 <= process_index < num_processes:
        raise ValueError(f"process_index={process_index} is outside 0..{num_processes - 1}")
    if rollout_index is None:
        mine = batch[even_slices(len(batch), num_processes)[process_index]]
        return [mine[s] for s in even_slices(len(mine), num_micro_batches)]
    index = list(rollout_index)
    if len(index) != len(batch):
        raise ValueError(f"rollout_index has {len(index)} entries for {len(batch)} rows")
    if any(b < a for a, b in zip(index, index[1:], strict=False)):
        raise ValueError("rollout_index must be non-decreasing (each rollout's rows together, in order)")
    # firsts[k]: the first row of the k-th rollout present; a final entry closes the last one.
    firsts = [i for i in range(len(index)) if i == 0 or index[i] != index[i - 1]] + [len(index)]
    mine = even_slices(len(firsts) - 1, num_processes)[process_index]
    parts = even_slices(mine.stop - mine.start, num_micro_batches)
    return [batch[firsts[mine.start + s.start] : firsts[mine.start + s.stop]] for s in parts]


def pad_and_stack(
    id_lists: Sequence[Sequence[int]],
    pad_id: int,
    side: str = "right",
    *,
    loss_masks: Sequence[Sequence[int]] | None = None,
    width: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Pad token lists to one width: ``(ids_BT, attention_mask_BT, loss_mask_BT)``, all int64.

    ``attention_mask_BT`` is 1 on every real token. ``loss_mask_BT`` is ``loss_masks``
    padded with 0 (each the length of its ids); without ``loss_masks`` it is 1 on every
    real token. ``width`` (>= the longest list) pads further.
    """
    if side not in ("left", "right"):
        raise ValueError(f"side={side!r} must be 'left' or 'right'")
    lengths = [len(ids) for ids in id_lists]
    T = max(lengths, default=0) if width is None else width
    if lengths and max(lengths) > T:
        raise ValueError(f"width={width} is shorter than the longest sequence ({max(lengths)})")
    if loss_masks is None:
        loss_masks = [[1] * n for n in lengths]
    elif len(loss_masks) != len(id_lists) or any(
        len(m) != n for m, n in zip(loss_masks, lengths, strict=True)
    ):
        raise ValueError("each loss mask must have the length of its token list")
    B = len(id_lists)
    ids_BT = torch.full((B, T), pad_id, dtype=torch.long)
    attention_mask_BT = torch.zeros((B, T), dtype=torch.long)
    loss_mask_BT = torch.zeros((B, T), dtype=torch.long)
    for b, (ids, mask, n) in enumerate(zip(id_lists, loss_masks, lengths, strict=True)):
        cols = slice(0, n) if side == "right" else slice(T - n, T)
        ids_BT[b, cols] = torch.tensor(list(ids), dtype=torch.long)
        attention_mask_BT[b, cols] = 1
        loss_mask_BT[b, cols] = torch.tensor(list(mask), dtype=torch.long)
    return ids_BT, attention_mask_BT, loss_mask_BT


@dataclass
class TrainBatch:
    """Tensors of one batch of samples, ready for the model and the loss (see the module docstring).

    ``old_logprobs_BT`` is None when built. When a batch outlives one optimizer step
    (``num_iterations > 1`` or ``steps_per_generation > gradient_accumulation_steps``)
    the trainer fills it with its own log-probs before the first step and reuses it;
    otherwise it can stay None (``compute_loss`` then uses the current log-probs,
    detached, which are the same values).
    """

    input_ids_BT: Tensor  # int64
    attention_mask_BT: Tensor  # int64, 1 = real token (prompt or completion)
    loss_mask_BT: Tensor  # int64, 1 = trained completion token
    sampling_logprobs_BT: Tensor  # float32, server's log-prob of each token, 0 off the loss mask
    advantages_B: Tensor  # float32
    rewards_B: Tensor  # float32
    completion_start: int  # no completion token before this column
    old_logprobs_BT: Tensor | None = None

    def __post_init__(self) -> None:
        B, T = self.input_ids_BT.shape
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor):
                want = (B, T) if f.name.endswith("_BT") else (B,)
                if tuple(value.shape) != want:
                    raise ValueError(f"{f.name} has shape {tuple(value.shape)}, expected {want}")
        if not 0 <= self.completion_start <= T:
            raise ValueError(f"completion_start={self.completion_start} is outside 0..{T}")

    def __len__(self) -> int:
        return self.input_ids_BT.shape[0]

    def __getitem__(self, rows: slice | Tensor | list[int]) -> TrainBatch:
        """The rows ``rows`` (a slice, index list or bool mask over B) as a new batch."""
        if isinstance(rows, int):
            rows = slice(rows, rows + 1)
        return TrainBatch(**{k: v[rows] if isinstance(v, Tensor) else v for k, v in self._items()})

    def to(self, device: torch.device | str) -> TrainBatch:
        return TrainBatch(**{k: v.to(device) if isinstance(v, Tensor) else v for k, v in self._items()})

    def to_dict(self) -> dict[str, Any]:
        """Field name -> value, for the ``Trainer`` boundary (``old_logprobs_BT`` only when set)."""
        return {k: v for k, v in self._items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainBatch:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    def _items(self) -> list[tuple[str, Any]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self)]


def build_train_batch(
    processed: ProcessedOutputs, advantages: Tensor | Sequence[float], pad_id: int
) -> TrainBatch:
    """Concatenate each sample's prompt and completion into a right-padded ``TrainBatch``.

    ``advantages`` has one entry per rollout; a rollout trained as several samples
    (``processed.rollout_index``) gives each of them its advantage. Without
    ``rollout_index`` samples and rollouts are the same. The attention mask covers
    the prompt (``processed.prompt_mask``) and the whole completion; the loss mask is
    0 on the prompt and ``processed.completion_mask`` on the completion.
    """
    n = len(processed)
    advantages = torch.as_tensor(advantages, dtype=torch.float32)
    index = torch.as_tensor(processed.rollout_index or list(range(n)), dtype=torch.long)
    if len(index) != n:
        raise ValueError(f"rollout_index has {len(index)} entries for {n} samples")
    if n and int(index.max()) >= len(advantages):
        raise ValueError(f"{len(advantages)} advantages for rollouts up to index {int(index.max())}")
    ids = [list(p) + list(c) for p, c in zip(processed.prompt_ids, processed.completion_ids, strict=True)]
    loss_masks = [
        [0] * len(p) + list(m) for p, m in zip(processed.prompt_ids, processed.completion_mask, strict=True)
    ]
    ids_BT, attention_mask_BT, loss_mask_BT = pad_and_stack(ids, pad_id, "right", loss_masks=loss_masks)
    sampling_BT = torch.zeros(ids_BT.shape, dtype=torch.float32)
    for b, (p, lp) in enumerate(zip(processed.prompt_ids, processed.completion_logprobs, strict=True)):
        # The prompt part follows the environment's prompt mask (normally all 1s).
        attention_mask_BT[b, : len(p)] = torch.as_tensor(processed.prompt_mask[b], dtype=torch.long)
        sampling_BT[b, len(p) : len(p) + len(lp)] = torch.as_tensor(lp, dtype=torch.float32)
    sampling_BT = torch.where(loss_mask_BT.bool(), sampling_BT, 0.0)
    shortest_prompt = min((len(p) for p in processed.prompt_ids), default=1)
    # The first position has no preceding logit to score it, so it is never trained.
    loss_mask_BT[:, :1] = 0
    return TrainBatch(
        input_ids_BT=ids_BT,
        attention_mask_BT=attention_mask_BT,
        loss_mask_BT=loss_mask_BT,
        sampling_logprobs_BT=sampling_BT,
        advantages_B=advantages[index] if n else torch.zeros(0),
        rewards_B=torch.as_tensor(processed.rewards, dtype=torch.float32).reshape(n),
        completion_start=min(max(1, shortest_prompt), ids_BT.shape[1]),
    )
