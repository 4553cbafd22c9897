"""Stopping a training run on SIGINT or SIGTERM: finish the step, save it, exit 130 or 143.

``GRPOTrainer.train`` installs ``StopSignals`` for the length of the call (main
thread only; the previous handlers come back afterwards). The first signal only
sets a flag, wakes a trainer waiting for a batch (``BatchGenerator.interrupt``)
and prints one line on the main process. The run then stops at the next safe point:

- training a step: at the step's end (``StopAtStepEnd.on_step_end``, after the
  optimizer step and the weight sync), where every process must agree, so the
  flags are combined (any process's signal stops all: ``max_over_processes``), and the
  step's checkpoint is saved by ``Trainer``'s own save (``control.should_save``);
- waiting for a batch (or for the server to come back): ``get`` raises
  ``StopRequested`` on the main process, which is broadcast in place of the batch,
  so every process leaves the step before training on anything; ``conclude`` then
  saves the last completed step, unless a complete checkpoint of it exists;
- waiting for the server in the main thread (its start, or a weight sync during an
  outage; one process only): the handler raises ``StopRequested`` there
  (``interruptible``). With several processes those waits run to their timeout
  (``vllm_server_timeout``) first.

``conclude`` prints ``Stopped by SIGTERM after step 12/200; checkpoint saved to ...``
and raises ``TrainingStopped`` (a ``SystemExit`` with status 128 + signal).

A second signal more than ``ECHO_WINDOW_S`` after the first exits at once
(``os._exit``, same status, no checkpoint). Signals closer together are one: a
terminal's Ctrl-C reaches every process of the foreground group, and launchers
(vf-rl, torchrun's elastic agent) forward the same signal to their workers.

Under ``accelerate launch`` / torchrun the workers run in their own sessions (a
terminal's Ctrl-C reaches only the launcher). The elastic agent, on SIGINT or
SIGTERM, sends the same signal to each worker's process group, waits
``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` seconds (default 30; ``torchrun
--shutdown-timeout``; torch/distributed/elastic/multiprocessing/api.py ``_close``),
then SIGKILLs the workers still running, and exits 1 itself (``SignalException``).
The step in progress and the checkpoint must fit in that time, or the run ends as
if killed (the last *complete* checkpoint still resumes exactly): raise it for
long steps.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from transformers import TrainerCallback

from verifiers.errors import StopRequested, TrainingStopped
from verifiers.training.lifecycle import checkpoint as ckpt
from verifiers.training.processes import broadcast, max_over_processes
from verifiers.utils import owned_files

SIGNALS = (signal.SIGINT, signal.SIGTERM)
ECHO_WINDOW_S = 1.0  # a second signal sooner than this is the first one echoed by a launcher


class StopSignals:
    """SIGINT / SIGTERM handlers for one ``train()`` call; ``signum`` is the first signal received."""

    def __init__(self, announce: bool = True, on_first: Callable[[], Any] | None = None):
        self.announce = announce  # print the acknowledgement line (the main process only)
        self.on_first = on_first  # called in the handler on the first signal: wakes a waiting trainer
        self.signum: int | None = None
        self._raise_here = False  # inside interruptible(): the first signal raises StopRequested
        self._first_at = 0.0
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def install(self) -> bool:
        """Install the handlers; only the main thread may (elsewhere: returns False, default handling)."""
        self.signum = None
        if threading.current_thread() is not threading.main_thread():
            return False
        for s in SIGNALS:
            self._previous[s] = signal.signal(s, self._handle)
        return True

    @contextmanager
    def interruptible(self, allowed: bool = True) -> Iterator[None]:
        """A blocking wait (e.g. for a lost server) that a stop signal ends by raising
        ``StopRequested`` from the handler. Only where ``allowed``: with one process (a raise
        in one process of several would leave the others in a collective)."""
        if not allowed or self.signum is not None:  # a signal before it: the step finishes as usual
            yield
            return
        outer, self._raise_here = self._raise_here, True
        try:
            yield
        finally:
            self._raise_here = outer

    def restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        now = time.monotonic()
        if self.signum is None:
            self.signum, self._first_at = signum, now
            if self.announce:
                _write(f"{name} received: stopping after the current step and saving a checkpoint "
                       f"({name} again to stop at once)")  # fmt: skip
            if self.on_first is not None:
                self.on_first()
            if self._raise_here:
                self._raise_here = False
                raise StopRequested(f"{name} while waiting")
            return
        if now - self._first_at < ECHO_WINDOW_S:
            return
        _write(f"Stopped at once by a second {name} (no checkpoint saved)")
        owned_files.release_all()  # the weight-transfer file in /dev/shm: os._exit runs no finalizer
        os._exit(128 + signum)  # at once: no step, no save, no thread joins


def _write(line: str) -> None:
    # os.write, not print: a signal handler may run while the main thread is inside print.
    try:
        os.write(sys.stderr.fileno(), (line + "\n").encode())
    except (OSError, ValueError):
        pass


class StopAtStepEnd(TrainerCallback):
    """After each optimizer step: if any process was signalled, save this step and stop training.

    Add it after the callback that syncs the weights, so the step saved is the synced one."""

    def __init__(self, accelerator: Any, signals: StopSignals):
        self.accelerator, self.signals = accelerator, signals

    def on_step_end(self, args, state, control, **kwargs):
        if max_over_processes(self.accelerator, self.signals.signum, args.device):
            control.should_save = True
            control.should_training_stop = True


def conclude(
    accelerator: Any,
    signum: int,
    *,
    output_dir: str,
    step: int,
    max_steps: int,
    save: Callable[[], None],
) -> None:
    """After a stop at ``step`` (of ``max_steps``): ``save()`` that step (every process: the save is
    collective) unless a complete checkpoint of it exists in ``output_dir``, print the line, raise
    ``TrainingStopped`` (every process)."""
    folder = os.path.join(output_dir, f"checkpoint-{step}")
    saved = broadcast(accelerator, ckpt.is_complete(folder))  # one view for every process
    if step > 0 and not saved:
        save()
        saved = True
    name = signal.Signals(signum).name
    if accelerator.is_main_process:  # one line per run
        line = (
            f"Stopped by {name} after step {step}/{max_steps}; checkpoint saved to {folder} "
            "(resume with resume_from_checkpoint=True)"
            if step > 0 and saved
            else f"Stopped by {name} before the first step; nothing to save"
        )
        print(line, file=sys.stderr, flush=True)
    raise TrainingStopped(signum, step, folder if step > 0 else None)
