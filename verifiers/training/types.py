"""What crosses training's stages: the values one stage hands another, below them all.

A stage package imports these from here, never from a sibling stage (tests/test_import_graph.py
keeps the stages in their order), so the producer of a value and its consumers share only this
module:

- ``GeneratedBatch``: one generation batch, as generation/ hands it to batch/ (and a
  checkpoint saves the pending ones, lifecycle/checkpoint.py).
- ``PreparedBatch``: the batch being trained, this process's micro-batches, as batch/ hands
  it to the trainer (and a mid-batch checkpoint saves it).
- ``Resync``: what the generator returns instead of a batch when the server came back from an
  outage (generation/generator.py, verifiers/inference/client/recovery.py).

Plain data: nothing heavy is imported (the outputs' types are ``verifiers.types``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verifiers.types import GenerateOutputs, ProcessedOutputs


@dataclass
class GeneratedBatch:
    """One generation batch: ``num_prompts * num_generations`` rollouts, group-major.

    Rollout ``k`` belongs to group ``k // num_generations``. ``processed`` holds
    the token data (one sample per rollout, or more when a chat template rewrote
    turns; ``processed.rollout_index`` maps samples back).
    """

    index: int
    policy_version: int
    num_generations: int
    outputs: GenerateOutputs
    processed: ProcessedOutputs | None
    generation_s: float
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class PreparedBatch:
    """The trained batch: this process's micro-batches, ready for the loss.

    ``micro[m]`` holds ``input_ids_BT``, ``attention_mask_BT``, ``start`` and the token
    tensors sliced to ``[:, start:]`` (``scoring_inputs``), ``advantages_B``, and, once the
    trainer scored it, ``old_logprobs_BT`` / ``ref_logprobs_BT`` where ``scores_needed``
    says. Saved as data in mid-batch checkpoints (lifecycle/checkpoint.py).
    """

    index: int
    micro: list[dict[str, Any]]
    step_counts: list[float] = field(default_factory=list)  # each optimizer step's loss normalizer
    rollout_ids: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Resync:
    """What ``BatchGenerator.get(index, resync=True)`` returns instead of batch ``index`` when the
    server came back from an outage: push the weights (the generator's ``resynced()`` is then
    called) and ask for the batch again."""

    index: int
