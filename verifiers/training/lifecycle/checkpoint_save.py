"""How ``GRPOTrainer`` writes ``checkpoint-<step>``: ``Trainer``'s files, then ours, then the mark,
then rotation; a disk failure at any point is one ``CheckpointError`` on every process.

``save_checkpoint`` takes a ``CheckpointSave``: what a save needs (the accelerator, the
folder, the step, the batch in training, the generator's state, the curves, a callable
that writes ``Trainer``'s own files), never the trainer itself.

Order, and why:

1. ``unmark``: a folder being (re)written (a step saved again after a resume) is
   incomplete until it is marked again.
2. ``Trainer``'s save (model or adapter, optimizer, scheduler, RNG, ``trainer_state.json``)
   without its rotation (``trainer_files``): it would delete old checkpoints before this
   one is whole.
3. Our data files (checkpoint.py): this process's batch in training, and on the main
   process the generator state; curves.
4. Every process learns whether any process failed to write (``max_over_processes`` over
   the failure flags, which also waits for everyone's files), so they all raise, or
   none does: a process that carried on alone would hang at its next collective.
5. The mark (files flushed to disk first), then ``rotate`` (checkpoint.py), which keeps
   the newest ``save_total_limit`` complete checkpoints: never before the mark.
6. One full garbage collection: what the save left in reference cycles is freed now.

(A failure inside DeepSpeed's own save, which is collective, can leave the other processes
in that collective instead: the process group's timeout ends them.)

On a failure before the mark, the half-written folder is removed (space back on a full
disk; on a read-only disk it stays, unmarked, and resuming skips it): the last complete
checkpoint is untouched and ``resume_from_checkpoint=True`` picks it.
"""

from __future__ import annotations

import gc
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from verifiers.errors import CheckpointError
from verifiers.training.lifecycle import checkpoint as ckpt
from verifiers.training.processes import max_over_processes

if TYPE_CHECKING:
    from verifiers.training.types import PreparedBatch


@dataclass(frozen=True)
class CheckpointSave:
    """What writing ``<run_dir>/checkpoint-<step>`` needs, on one process."""

    accelerator: Any  # accelerate's Accelerator: process index, main process, collectives
    device: Any  # where the collectives' flag tensors live (args.device)
    run_dir: str  # the folder holding the checkpoints (Trainer._get_output_dir)
    step: int  # the optimizer step saved (state.global_step)
    should_save: bool  # this process writes the shared files (args.should_save)
    save_total_limit: int | None  # complete checkpoints kept after this one is marked
    # Never rotated out: state.best_model_checkpoint, read after trainer_files (which may set it).
    keep: Callable[[], str | None]
    trainer_files: Callable[[], None]  # Trainer's own files, its rotation left out
    prepared: PreparedBatch | None  # this process's batch in training, None between batches
    # Main process: the generator's state (BatchGenerator.state_dict); None without a generator.
    generator_state: Callable[[], dict[str, Any]] | None
    plot: Callable[..., None]  # the curves, drawn once into each folder given (main process)

    @property
    def folder(self) -> str:
        return os.path.join(self.run_dir, f"checkpoint-{self.step}")


def save_checkpoint(save: CheckpointSave) -> None:
    """Write the checkpoint in the order above; raises ``CheckpointError`` on every process if any failed."""
    folder = save.folder
    error = _attempt(folder, lambda: _write_files(save))
    _raise_if_any(save, error, remove=True)
    if save.should_save:
        error = _attempt(folder, lambda: ckpt.mark_complete(folder, save.step))
        if error is None:
            action = f"delete old checkpoints (save_total_limit={save.save_total_limit})"
            rotate = lambda: ckpt.rotate(save.run_dir, save.save_total_limit, keep=save.keep())  # noqa: E731
            error = _attempt(folder, rotate, action)
    _raise_if_any(save, error, remove=not ckpt.is_complete(folder))
    # A save leaves tens of thousands of objects in reference cycles: the curves figure alone is
    # ~15,000 (matplotlib's artists and transforms point at each other), plus torch.save's pickler
    # and json's encoder closures. Left to the collector they wait for its next full pass (every
    # ~200 steps in the soak) and RSS carries them meanwhile. One full collection here (~0.2 s
    # with torch loaded, next to a save's seconds) frees them at once.
    gc.collect()


def _write_files(save: CheckpointSave) -> None:
    if save.should_save:
        ckpt.unmark(save.folder)
    save.trainer_files()
    ckpt.save_prepared_batch(save.folder, save.accelerator.process_index, save.prepared)
    if save.accelerator.is_main_process:
        if save.generator_state is not None:
            ckpt.save_generator_state(save.folder, save.generator_state())
        save.plot(save.folder, save.run_dir)


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


def _raise_if_any(save: CheckpointSave, error: CheckpointError | None, remove: bool) -> None:
    """Collective: raise on every process if any failed (its own error, or one naming the other's)."""
    failed = max_over_processes(save.accelerator, 1 if error is not None else 0, save.device)
    if not failed:
        return
    if remove and save.should_save:
        shutil.rmtree(save.folder, ignore_errors=True)  # space back on a full disk; unmarked either way
    if error is None:
        error = CheckpointError(
            f"could not write {os.path.basename(save.folder)}: another process failed to write its part",
            "see that process's error line",
        )
    raise error
