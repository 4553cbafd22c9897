"""Progress for the CLI's long stages (installing a package, converting a model).

A stage prints one line when it starts and one when it ends, with the time it took;
in between, a stage that runs long says every ``every`` seconds that it is still
running, so a terminal (or a CI log) that shows nothing new for a minute means
something is stuck rather than busy.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import TracebackType

HEARTBEAT_S = 15.0


class Heartbeat:
    """``with Heartbeat(say): ...`` calls ``say(seconds_so_far)`` every ``every`` seconds while
    the block runs (from a daemon thread, which stops as soon as the block ends)."""

    def __init__(self, say: Callable[[float], None], every: float | None = None):
        self.say = say
        self.every = HEARTBEAT_S if every is None else every
        self.started = time.perf_counter()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="vf-progress", daemon=True)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def _beat(self) -> None:
        while not self._done.wait(self.every):
            self.say(self.elapsed)

    def __enter__(self) -> Heartbeat:
        self.started = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done.set()
        self._thread.join()
