"""``BatchQueue``: which generation batch may start, which are ready, and how stale they may be.

The bookkeeping between ``BatchGenerator``'s thread and the trainer, without
threads: batch ``i`` may start only once ``i - ahead`` batches are trained (so
no sample is more than ``ahead`` policy versions old), at most ``max_size``
finished batches wait, and a failure is kept until the trainer asks for a batch.
``BatchGenerator`` holds its lock around every call.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from verifiers.errors import GenerationError
from verifiers.training.types import GeneratedBatch


@dataclass
class BatchQueue:
    """``trained``: batches trained and synced (the policy version); ``next``: the first batch
    never started; ``in_flight``: the batch being generated, with ``rewind`` the producer's state
    before it (a retry takes the same prompts; a checkpoint saves it as never started)."""

    ahead: int
    max_size: int
    trained: int = 0
    next: int = 0
    ready: dict[int, GeneratedBatch] = field(default_factory=dict)
    in_flight: int | None = None
    rewind: dict[str, Any] | None = None
    error: tuple[int, BaseException] | None = None

    @classmethod
    def resume(
        cls,
        ahead: int,
        max_size: int | None,
        trained: int = 0,
        next_index: int | None = None,
        pending: Sequence[GeneratedBatch] = (),
    ) -> BatchQueue:
        """A queue ``trained`` batches into a run; ``pending`` and every batch below ``next_index``
        were generated before (waiting, or in training)."""
        if ahead < 0:
            raise GenerationError(f"num_batches_ahead must be >= 0, got {ahead}")
        ready = {b.index: b for b in pending}
        nxt = max([trained - 1, *ready, (next_index or 0) - 1]) + 1
        size = max(1, max_size if max_size is not None else ahead)
        return cls(ahead=ahead, max_size=size, trained=trained, next=nxt, ready=ready)

    # ---- generator thread ----
    def next_to_start(self) -> int | None:
        """``next`` if it is within ``ahead`` of the trained batches and a slot is free."""
        if self.next <= self.trained + self.ahead and len(self.ready) < self.max_size:
            return self.next
        return None

    def start(self, index: int, rewind: dict[str, Any] | None) -> None:
        self.in_flight, self.rewind = index, rewind

    def finish(self, index: int, batch: GeneratedBatch) -> None:
        self.ready[index] = batch
        self.next, self.in_flight = index + 1, None

    def fail(self, index: int, error: BaseException) -> None:
        self.error, self.in_flight = (index, error), None

    # ---- trainer ----
    def check_request(self, index: int) -> None:
        if index > self.trained + self.ahead:
            raise GenerationError(
                f"batch {index} requested but only {self.trained} batches are trained "
                f"(num_batches_ahead={self.ahead}); call mark_trained first"
            )

    def take(self, index: int) -> GeneratedBatch | None:
        """Batch ``index`` if ready (removed from the queue); None while it is still to come."""
        if index in self.ready:
            return self.ready.pop(index)
        if self.error is not None:
            failed, exc = self.error
            raise GenerationError(f"generating batch {failed} failed: {type(exc).__name__}: {exc}") from exc
        if index < self.next and self.in_flight != index:
            raise GenerationError(f"batch {index} was already consumed or skipped")
        return None

    def check_fresh(self, batch: GeneratedBatch) -> GeneratedBatch:
        lag = batch.index - batch.policy_version
        if lag > self.ahead:
            raise GenerationError(
                f"batch {batch.index} is {lag} policy versions old "
                f"(num_batches_ahead={self.ahead} allows at most {self.ahead})"
            )
        return batch

    def snapshot(self, producer_state: dict[str, Any]) -> dict[str, Any]:
        """What a checkpoint saves: ``trained``, ``next``, the ``pending`` batches and ``producer``."""
        return {
            "trained": self.trained,
            "next": self.next,
            "pending": [self.ready[i] for i in sorted(self.ready)],
            "producer": producer_state,
        }
