"""The trainer's heartbeats, which ``vf-rl`` reads to find a trainer rank that stopped (cli/rl/trainer_watch.py).

Only under ``vf-rl``: it sets ``$VF_RL_HEARTBEAT_DIR`` (a folder under the run's logs) in the
trainer's environment; without it nothing here writes anything. Each rank (``$RANK``, 0 for one
process) keeps two files there, each holding the rank's pid; what counts is their modification
time:

- ``rank<r>.live``: touched every ``LIVE_BEAT_S`` seconds by a daemon thread. A daemon thread
  keeps beating while the main thread is deadlocked, so this beat proves only that the process
  runs at all: it stops when the process is stopped (SIGSTOP, a debugger), and vf-rl finds that
  within its short liveness bound.
- ``rank<r>.step``: touched from the training loop itself (``progress_callback``: every step,
  micro-step, save, log and eval batch), so it proves progress; it is created when training
  begins (model loading and the first wait for the server come before it). Its bound,
  ``trainer.hang_timeout_s``, must outlast the longest normal gap between two such points.

The same thread ends the rank once the process that started it is gone (its parent pid changed:
re-parented to init or a subreaper): ``vf-rl`` itself for one process, torch's elastic agent
(``accelerate launch``) for two or more, which starts each rank in a session of its own, so that a
SIGKILL of the agent (vf-rl's ``kill_trainer`` fault, the OOM killer) reached no rank. Orphaned
ranks went on training, and a restarted trainer then trained beside them. The rank prints one line
and exits at once (status :data:`ORPHAN_STATUS`); its last complete checkpoint is what a restart
resumes from.

``$VF_RL_ATTEMPT`` (1, 2, ...) is the trainer's attempt in a vf-rl run: a trainer restarted after a
crash or a hang is attempt 2 and on (output.py marks the steps it logs again as redone).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

ENV_DIR = "VF_RL_HEARTBEAT_DIR"
ENV_ATTEMPT = "VF_RL_ATTEMPT"
LIVE_BEAT_S = 2.0  # the liveness thread's period: far below vf-rl's bound (trainer_watch.LIVE_BOUND_S)
LIVE = "live"
STEP = "step"
ORPHAN_STATUS = 1

_STARTED: list[Heartbeat] = []  # one per process


def beat_path(folder: str | os.PathLike, rank: int, kind: str) -> Path:
    """``<folder>/rank<rank>.<kind>`` (``kind``: ``LIVE`` or ``STEP``)."""
    return Path(folder) / f"rank{rank}.{kind}"


def attempt() -> int | None:
    """This trainer's attempt in a vf-rl run (``$VF_RL_ATTEMPT``), None outside vf-rl or when unreadable."""
    try:
        value = int(os.environ.get(ENV_ATTEMPT, ""))
    except ValueError:
        return None
    return value if value >= 1 else None


class Heartbeat:
    """One rank's two beat files (see the module docstring)."""

    def __init__(
        self,
        folder: str | os.PathLike,
        rank: int,
        pid: int | None = None,
        parent: int | None = None,
        on_orphan: Callable[[int], None] | None = None,
    ):
        self.folder, self.rank, self.pid = Path(folder), rank, pid if pid is not None else os.getpid()
        self.parent = parent  # the launcher's pid, watched by the thread; None: not watched
        self.on_orphan = on_orphan or _end_orphan
        self.stop = threading.Event()

    def _touch(self, kind: str) -> None:
        path = beat_path(self.folder, self.rank, kind)
        try:
            try:
                os.utime(path)
            except FileNotFoundError:  # the first beat (or vf-rl cleared the folder): write the pid
                self.folder.mkdir(parents=True, exist_ok=True)
                tmp = path.with_name(path.name + f".{self.pid}.tmp")
                tmp.write_text(str(self.pid))
                os.replace(tmp, path)  # whole or absent: vf-rl never reads half a pid
        except OSError:
            pass  # a beat that cannot be written must never stop training; vf-rl sees it missing

    def live(self) -> None:
        self._touch(LIVE)

    def progress(self) -> None:
        """A point of progress in the training loop (main thread)."""
        self._touch(STEP)

    def start(self, period: float = LIVE_BEAT_S) -> Heartbeat:
        """Beat ``rank<r>.live`` now and every ``period`` seconds from a daemon thread."""
        self.live()

        def loop() -> None:
            while not self.stop.wait(period):
                if self.parent is not None and os.getppid() != self.parent:
                    self.on_orphan(self.parent)
                    return
                self.live()

        threading.Thread(target=loop, name="vf-heartbeat", daemon=True).start()
        return self


def start_from_env() -> Heartbeat | None:
    """This process's heartbeat when vf-rl asked for one (``$VF_RL_HEARTBEAT_DIR``), started once; else None."""
    folder = os.environ.get(ENV_DIR)
    if not folder:
        return None
    if not _STARTED:
        try:
            rank = int(os.environ.get("RANK", "0"))
        except ValueError:
            rank = 0
        _STARTED.append(Heartbeat(folder, rank, parent=os.getppid()).start())
    return _STARTED[0]


def _end_orphan(parent: int) -> None:
    """The launcher (pid ``parent``) is gone: end this rank now (see the module docstring)."""
    rank = os.environ.get("RANK", "0")
    print(
        f"trainer rank {rank}: the process that started it (pid {parent}) is gone; ending it "
        "(a restart resumes from the last complete checkpoint)",
        file=sys.stderr,
        flush=True,
    )
    os._exit(ORPHAN_STATUS)


def progress_callback(beat: Heartbeat) -> Any:
    """A ``TrainerCallback`` that beats ``rank<r>.step`` at every point of progress of the training loop.

    Many points, not only step ends: a step's micro-batches, a checkpoint save and an eval's
    batches each beat, so that the bound only has to outlast the longest single piece of work
    (a generation wait, one checkpoint write), not a whole step with its eval."""
    from transformers import TrainerCallback

    def beat_now(self: Any, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        beat.progress()

    hooks = (
        "on_train_begin",
        "on_step_begin",
        "on_substep_end",
        "on_step_end",
        "on_save",
        "on_log",
        "on_evaluate",
        "on_prediction_step",
    )
    cls = type("HeartbeatCallback", (TrainerCallback,), {name: beat_now for name in hooks})
    return cls()
