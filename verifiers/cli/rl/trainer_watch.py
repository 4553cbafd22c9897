"""Finding a trainer rank that is alive but makes no progress, from its heartbeat files.

The trainer's ranks beat files under ``logs/heartbeats/`` (training/lifecycle/heartbeat.py):
``rank<r>.live`` from a daemon thread every 2 s (stops only when the process is stopped:
SIGSTOP, a debugger), and ``rank<r>.step`` from the training loop (stops when the loop is stuck
too). The launcher calls :meth:`TrainerWatch.check` from its supervision loop; a beat older than
its bound names the rank in one line (:class:`Stall`), and the launcher kills the trainer's process
group and restarts it like a crash.

Age is counted on vf-rl's own monotonic clock from when the launcher first saw a file's current
modification time, never from the time stamp itself: a wall-clock jump, or vf-rl itself being
paused (Ctrl-Z) while the trainer beat on, never reads as a stall. The cost: a beat seen for the
first time counts as fresh, so detection can take up to one bound after the watch starts.

Everything here is a pure function of the files and the ``now`` passed in (tests use a fake clock).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from verifiers.training.lifecycle.heartbeat import LIVE, STEP

if TYPE_CHECKING:
    from verifiers.cli.run_config.load import RunConfig

# A live beat (every 2 s) older than this: the process is stopped. Fifteen beats missed: far past
# a slow scheduler on a loaded machine or a C call that holds the GIL for a few seconds (a pickle
# of a large batch), and still a small cost beside a stopped run.
LIVE_BOUND_S = 30.0
# Above the longest lone wait the trainer allows itself (config/collective.py): the 30-minute
# checkpoint-write floor of its collective timeout, a generation wait or a server outage.
HANG_MARGIN_S = 60.0

Key = tuple[int, str]  # (rank, LIVE or STEP)


@dataclass(frozen=True)
class Beat:
    """One beat file as read: its modification time and the pid it names (None when unreadable)."""

    stamp: float
    pid: int | None


@dataclass(frozen=True)
class Stall:
    """A rank whose beat is older than its bound."""

    rank: int
    pid: int | None
    kind: str  # LIVE: the process is stopped; STEP: the training loop is stuck
    silent_s: float

    def line(self) -> str:
        """``trainer rank 1 (pid 1234) made no progress for 31 s (stopped?)``."""
        pid = f" (pid {self.pid})" if self.pid is not None else ""
        why = "stopped?" if self.kind == LIVE else "hung in a step?"
        return f"trainer rank {self.rank}{pid} made no progress for {self.silent_s:.0f} s ({why})"


@dataclass
class TrainerWatch:
    """The beats of one trainer attempt: which stamp each file had, and since when (vf-rl's clock).

    ``step_bound_s`` None: the progress beat is not watched (``trainer.hang_timeout_s = 0``)."""

    folder: Path
    live_bound_s: float = LIVE_BOUND_S
    step_bound_s: float | None = None
    seen: dict[Key, tuple[float, float]] = field(default_factory=dict)  # key -> (stamp, first seen at)

    def reset(self) -> None:
        """Before a trainer (re)starts: forget the old beats, and remove their files."""
        self.seen.clear()
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True, exist_ok=True)

    def observe(self, beats: Mapping[Key, Beat], now: float) -> Stall | None:
        """Record ``beats`` as seen at ``now``; the rank past its bound, or None.

        A stopped process stops both its beats; its live beat names the sharper cause, so a live
        stall wins over a progress stall, then the longer silence."""
        stalls: list[Stall] = []
        for key, beat in sorted(beats.items()):
            before = self.seen.get(key)
            since = before[1] if before is not None and before[0] == beat.stamp else now
            self.seen[key] = (beat.stamp, since)
            rank, kind = key
            bound = self.live_bound_s if kind == LIVE else self.step_bound_s
            if bound is not None and now - since > bound:
                pid = beat.pid if beat.pid is not None else _pid(beats, rank)
                stalls.append(Stall(rank, pid, kind, now - since))
        if not stalls:
            return None
        return max(stalls, key=lambda s: (s.kind == LIVE, s.silent_s))

    def reached_training(self) -> bool:
        """Whether this attempt's training loop began (some rank beat its progress file)."""
        return any(kind == STEP for _, kind in read_beats(self.folder))

    def check(self, now: float) -> Stall | None:
        """:meth:`observe` of the files as they are now."""
        return self.observe(read_beats(self.folder), now)


def _pid(beats: Mapping[Key, Beat], rank: int) -> int | None:
    for (r, _), beat in beats.items():
        if r == rank and beat.pid is not None:
            return beat.pid
    return None


def read_beats(folder: Path) -> dict[Key, Beat]:
    """Every ``rank<r>.<kind>`` file in ``folder``: its modification time and pid."""
    found: dict[Key, Beat] = {}
    try:
        paths = list(folder.iterdir())
    except OSError:
        return found
    for path in paths:
        stem, _, kind = path.name.partition(".")
        if kind not in (LIVE, STEP) or not stem.startswith("rank") or not stem[4:].isdigit():
            continue
        try:
            stamp = path.stat().st_mtime
            text = path.read_text().strip()
        except OSError:
            continue  # replaced while we read it: the next check sees it
        found[(int(stem[4:]), kind)] = Beat(stamp, int(text) if text.isdigit() else None)
    return found


def hang_bound(config: RunConfig) -> float | None:
    """``trainer.hang_timeout_s`` as the progress beat's bound: None when 0 (off); when unset, the
    longest lone wait the trainer itself allows (its collective timeout's floor, a generation wait,
    a server outage) plus ``HANG_MARGIN_S``: a shorter bound would kill runs the trainer considers
    healthy (a large checkpoint write)."""
    set_to = config.trainer.hang_timeout_s
    if set_to is not None:
        return float(set_to) if set_to > 0 else None
    from verifiers.training.config.collective import CHECKPOINT_WRITE_S

    rl = config.rl_config()
    waits = (CHECKPOINT_WRITE_S, rl.vllm_server_timeout, rl.generation_timeout)
    return max(float(w) for w in waits) + HANG_MARGIN_S
