"""How ``GRPOTrainer`` writes ``checkpoint-<step>``: ``Trainer``'s files, then ours, then the mark,
then rotation; a disk failure at any point is one ``CheckpointError`` on every process.

Order, and why:

1. ``unmark``: a folder being (re)written (a step saved again after a resume) is
   incomplete until it is marked again.
2. ``Trainer``'s save (model or adapter, optimizer, scheduler, RNG, ``trainer_state.json``)
   with its rotation switched off: it would delete old checkpoints before this one
   is whole.
3. Our data files (checkpoint.py): this process's batch in training, and on the main
   process the generator state; curves.
4. Every process learns whether any process failed to write (``max_over_processes`` over
   the failure flags, which also waits for everyone's files), so they all raise, or
   none does: a process that carried on alone would hang at its next collective.
5. The mark (files flushed to disk first), then ``rotate`` (checkpoint.py), which keeps
   the newest ``save_total_limit`` complete checkpoints: never before the mark.

(A failure inside DeepSpeed's own save, which is collective, can leave the other processes
in that collective instead: the process group's timeout ends them.)

On a failure before the mark, the half-written folder is removed (space back on a full
disk; on a read-only disk it stays, unmarked, and resuming skips it): the last complete
checkpoint is untouched and ``resume_from_checkpoint=True`` picks it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from verifiers.errors import CheckpointError
from verifiers.training.lifecycle import checkpoint as ckpt
from verifiers.training.lifecycle.processes import max_over_processes

if TYPE_CHECKING:
    from verifiers.training.trainer import GRPOTrainer


def save_checkpoint(trainer: GRPOTrainer, trial: Any, trainer_save: Callable[[Any, Any], None]) -> None:
    """``trainer_save`` is ``transformers.Trainer._save_checkpoint`` bound to ``trainer``."""
    args = trainer.args
    out = trainer._get_output_dir(trial)
    step = trainer.state.global_step
    folder = os.path.join(out, f"checkpoint-{step}")
    error = _attempt(folder, lambda: _write_files(trainer, trial, trainer_save, folder, out))
    _raise_if_any(trainer, error, folder, remove=True)
    if args.should_save:
        error = _attempt(folder, lambda: ckpt.mark_complete(folder, step))
        if error is None:
            action = f"delete old checkpoints (save_total_limit={args.save_total_limit})"
            keep = trainer.state.best_model_checkpoint
            error = _attempt(folder, lambda: ckpt.rotate(out, args.save_total_limit, keep=keep), action)
    _raise_if_any(trainer, error, folder, remove=not ckpt.is_complete(folder))


def _write_files(trainer: GRPOTrainer, trial: Any, trainer_save: Callable, folder: str, out: str) -> None:
    args = trainer.args
    if args.should_save:
        ckpt.unmark(folder)
    limit, args.save_total_limit = args.save_total_limit, None
    try:
        trainer_save(trainer.model, trial)
    finally:
        args.save_total_limit = limit
    step = trainer.state.global_step
    mid_batch = step * args.gradient_accumulation_steps % trainer.micro_per_batch != 0
    ckpt.save_buffer(folder, trainer.accelerator.process_index, trainer._buffer if mid_batch else None)
    if trainer.accelerator.is_main_process:
        if trainer.generator is not None:
            # Stopping on a signal: do not wait for the batch being generated (generator.py).
            state = trainer.generator.state_dict(wait=not trainer.stop_signals.requested)
            ckpt.save_generator_state(folder, state)
        trainer._plot(folder)
        trainer._plot(out)


def _attempt(folder: str, write: Callable[[], None], action: str | None = None) -> CheckpointError | None:
    """Run ``write``; a disk failure comes back as a ``CheckpointError``, anything else is raised."""
    try:
        write()
    except Exception as exc:  # noqa: BLE001 - only disk failures are turned into values; the rest re-raised
        error = ckpt.disk_error(exc, folder, action)
        if error is None:
            raise
        error.__cause__ = exc
        return error
    return None


def _raise_if_any(trainer: GRPOTrainer, error: CheckpointError | None, folder: str, remove: bool) -> None:
    """Collective: raise on every process if any failed (its own error, or one naming the other's)."""
    failed = max_over_processes(trainer.accelerator, 1 if error is not None else 0, trainer.args.device)
    if not failed:
        return
    if remove and trainer.args.should_save:
        shutil.rmtree(folder, ignore_errors=True)  # space back on a full disk; unmarked either way
    if error is None:
        error = CheckpointError(
            f"could not write {os.path.basename(folder)}: another process failed to write its part",
            "see that process's error line",
        )
    raise error
