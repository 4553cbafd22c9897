"""What a GRPO checkpoint adds to ``transformers.Trainer``'s: the rollouts in flight.

``Trainer`` already saves and restores the model or adapter, optimizer,
scheduler, RNG and ``trainer_state.json`` (the optimizer step, so its dataloader
of step tickets skips to the right place). A GRPO run also has state outside the
model:

- ``generator_state.pt`` (main process): the prompt cursor (how far into the
  dataset the generator has read) and the generated batches not yet trained. They
  were sampled from older weights, which a resumed run cannot reproduce, so they
  are saved rather than regenerated.
- ``grpo_buffer_rank{r}.pt`` (every process): the generation batch being trained
  when the checkpoint was taken, if the step fell inside one (``num_iterations >
  1`` or ``steps_per_generation > gradient_accumulation_steps``), with the old and
  reference log-probs computed at its start.

Files are pickles of our own dataclasses, written atomically (temp file + rename).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger("verifiers.training.checkpoint")

GENERATOR_FILE = "generator_state.pt"
BUFFER_FILE = "grpo_buffer_rank{rank}.pt"


def _save(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _load(path: Path) -> Any | None:
    if not path.is_file():
        return None
    # Our own pickled dataclasses (rollouts, token lists, tensors): not loadable with weights_only.
    return torch.load(path, map_location="cpu", weights_only=False)


def save_generator_state(checkpoint_dir: str | os.PathLike, state: dict[str, Any]) -> None:
    _save(state, Path(checkpoint_dir) / GENERATOR_FILE)


def load_generator_state(checkpoint_dir: str | os.PathLike) -> dict[str, Any] | None:
    return _load(Path(checkpoint_dir) / GENERATOR_FILE)


def save_buffer(checkpoint_dir: str | os.PathLike, rank: int, buffer: Any) -> None:
    _save(buffer, Path(checkpoint_dir) / BUFFER_FILE.format(rank=rank))


def load_buffer(checkpoint_dir: str | os.PathLike, rank: int) -> Any | None:
    return _load(Path(checkpoint_dir) / BUFFER_FILE.format(rank=rank))


def has_optimizer_state(checkpoint_dir: str | os.PathLike) -> bool:
    """Whether ``Trainer`` saved optimizer state here (not with ``save_only_model=True``)."""
    d = Path(checkpoint_dir)
    return any((d / name).exists() for name in ("optimizer.pt", "optimizer.bin")) or any(
        d.glob("global_step*")
    )
