"""Finding an inference server that hangs: alive, but not answering, or answering without progress.

A server that exits is the launcher's business (it sees the exit status). A server that
stays alive but stops serving is found here, from a probe of ``GET /vf/progress``
(verifiers/inference/server/routes.py) every :data:`PROBE_INTERVAL_S` seconds:

- **not answering**: no HTTP answer at all for ``answer_timeout_s`` (the API process is
  stopped, deadlocked, or its event loop is blocked);
- **no progress**: it answers, yet for ``progress_timeout_s`` the engine has not moved while
  something waited on it: requests pending with generation not paused on purpose (its step
  counter still), or one of vf-vllm's own calls into the engine unanswered (a weight update's
  or an adapter's, made while generation is paused: none of those calls finished). The engine
  core is stopped or deadlocked; the API process still answers, since the route reads counters
  it keeps itself.

:class:`ServerWatch` is the decision alone, fed probe results and times (tests use a fake
clock). :class:`Prober` runs it on a daemon thread against a URL; the launcher reads
:meth:`Prober.hang` from its supervision loop, which never waits on a probe.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

# One probe every 5 s: a hang is found within its bound plus about one interval, and the
# server answers a few small requests a minute (their access-log lines are dropped).
PROBE_INTERVAL_S = 5.0
# A probe's own HTTP timeout; a slower answer counts as none at that probe, and the bound,
# not one probe, decides.
PROBE_TIMEOUT_S = 5.0
PROGRESS_ROUTE = "/vf/progress"


@dataclass(frozen=True)
class Progress:
    """What ``/vf/progress`` said."""

    steps: int  # engine output batches received so far
    tokens: int  # tokens generated so far
    pending: int  # requests handed to the engine and not finished
    paused: bool  # generation paused on purpose (weight update, sleep): no output expected
    calls: int = 0  # vf-vllm's calls into the engine waiting for an answer (0 from older servers)
    calls_done: int = 0  # and those answered so far

    @classmethod
    def from_answer(cls, body: Any) -> Progress | None:
        """The counters of a ``/vf/progress`` body, or None when it holds none to go by (another
        server, or an engine whose outputs vf-vllm could not count)."""
        if not isinstance(body, dict) or body.get("counted") is not True:
            return None
        try:
            return cls(
                steps=int(body["steps"]),
                tokens=int(body["tokens"]),
                pending=int(body.get("pending") or 0),
                paused=bool(body.get("paused")),
                calls=int(body.get("engine_calls") or 0),
                calls_done=int(body.get("engine_calls_done") or 0),
            )
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Probe:
    """One probe: whether anything answered over HTTP, and the counters if it gave them."""

    answered: bool
    progress: Progress | None = None


@dataclass(frozen=True)
class Hang:
    """A hang found: which kind, for how long, and the bound it passed."""

    kind: Literal["no_answer", "no_progress"]
    seconds: float
    bound: float
    pending: int = 0
    calls: int = 0  # vf-vllm's engine calls unanswered (an update's) when generation was paused

    def describe(self, pid: int, when: str) -> str:
        """The launcher's line up to its verdict, e.g. ``Inference server (pid 1234) did not answer
        /vf/progress for 31 s at 03:12:45 (stopped or deadlocked; inference.hang_timeout_s = 30)``
        (``when``: "at 03:12:45")."""
        if self.kind == "no_answer":
            return (
                f"Inference server (pid {pid}) did not answer {PROGRESS_ROUTE} for {self.seconds:.0f} s "
                f"{when} (stopped or deadlocked; inference.hang_timeout_s = {self.bound:g})"
            )
        if self.calls:  # paused for a weight update or an adapter: vf-vllm's own call waits
            waiting = f"a weight update's or adapter's engine call unanswered ({self.calls} waiting)"
        else:
            waiting = f"{self.pending} request{'s' if self.pending != 1 else ''} pending"
        return (
            f"vLLM engine core of the inference server (pid {pid}) made no progress for "
            f"{self.seconds:.0f} s with {waiting} {when} (stopped or deadlocked; "
            f"inference.progress_timeout_s = {self.bound:g})"
        )


class ServerWatch:
    """Decides from probe results whether the server hangs. Not thread-safe: one caller.

    A bound of 0 turns that check off. Times are the caller's clock (``time.monotonic``).
    """

    def __init__(self, answer_timeout_s: float, progress_timeout_s: float, now: float):
        self.answer_timeout_s = answer_timeout_s
        self.progress_timeout_s = progress_timeout_s
        self.reset(now)

    def reset(self, now: float) -> None:
        """A (re)started server, ready at ``now``: nothing is held against it yet."""
        self.last_answer = now
        self.counter: tuple[int, int, int] | None = None
        # When the engine was first seen stuck at ``counter`` with work pending; None: not stuck.
        self.stuck_since: float | None = None

    def observe(self, probe: Probe, now: float) -> Hang | None:
        """Take one probe's result (at ``now``); a :class:`Hang` once a bound is passed."""
        if not probe.answered:
            silent = now - self.last_answer
            if self.answer_timeout_s and silent >= self.answer_timeout_s:
                return Hang("no_answer", silent, self.answer_timeout_s)
            return None  # the progress clock goes on: an engine stuck behind a slow API is stuck too
        self.last_answer = now
        p = probe.progress
        if p is None:
            self.counter = self.stuck_since = None  # nothing to go by
            return None
        counter = (p.steps, p.tokens, p.calls_done)
        waiting = (p.pending > 0 and not p.paused) or p.calls > 0
        if not waiting or counter != self.counter:
            # Idle, paused on purpose, or moving: a stall can only start from here. Its start is
            # taken at the first probe that sees it (the counter may have moved just before):
            # a stall is found at most one interval late, never early.
            self.counter = counter
            self.stuck_since = None
            return None
        if self.stuck_since is None:
            self.stuck_since = now
            return None
        stuck = now - self.stuck_since
        if self.progress_timeout_s and stuck >= self.progress_timeout_s:
            calls = p.calls if p.paused or p.pending <= 0 else 0
            return Hang("no_progress", stuck, self.progress_timeout_s, pending=p.pending, calls=calls)
        return None


def probe(url: str, timeout: float | None = None) -> Probe:
    """``GET {url}/vf/progress`` once. Any HTTP answer counts as answering (a 404 from a server
    without the route, a 503 from a dying one); only a 200 with counters gives progress."""
    # No proxies: the server is local, and a proxy from the environment would answer instead.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url + PROGRESS_ROUTE, timeout=timeout or PROBE_TIMEOUT_S) as resp:
            body = resp.read()
    except urllib.error.HTTPError:
        return Probe(answered=True)
    except Exception:  # noqa: BLE001 - refused, reset, timed out: no answer
        return Probe(answered=False)
    try:
        return Probe(answered=True, progress=Progress.from_answer(json.loads(body)))
    except ValueError:
        return Probe(answered=True)


class Prober:
    """Runs a :class:`ServerWatch` against ``url`` on a daemon thread while armed.

    The launcher arms it once the server is ready (and again after each restart), disarms it
    before a restart (a starting server answers nothing), and reads :meth:`hang`, which never
    blocks. After a hang the prober disarms itself until armed again.
    """

    def __init__(
        self,
        url: str,
        answer_timeout_s: float,
        progress_timeout_s: float,
        interval_s: float | None = None,
        probe_fn: Callable[[str], Probe] = probe,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.url, self.probe_fn, self.clock = url, probe_fn, clock
        self.interval_s = PROBE_INTERVAL_S if interval_s is None else interval_s
        self.enabled = bool(answer_timeout_s or progress_timeout_s)
        self.watch = ServerWatch(answer_timeout_s, progress_timeout_s, clock())
        self.lock = threading.Lock()
        self.armed = threading.Event()
        self.closed = threading.Event()
        self.generation = 0  # bumped at each arm: a probe begun before it is not counted
        self.found: Hang | None = None
        self.thread: threading.Thread | None = None

    def arm(self) -> None:
        """Watch a server that is ready now (the first start or a restart)."""
        if not self.enabled:
            return
        with self.lock:
            self.generation += 1
            self.watch.reset(self.clock())
            self.found = None
        self.armed.set()
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, daemon=True, name="vf-rl-server-watch")
            self.thread.start()

    def disarm(self) -> None:
        with self.lock:
            self.generation += 1
            self.armed.clear()

    def close(self) -> None:
        self.disarm()
        self.closed.set()
        self.armed.set()  # wakes the thread to see ``closed``

    def hang(self) -> Hang | None:
        """The hang found since the last :meth:`arm`, if any."""
        with self.lock:
            return self.found

    def _run(self) -> None:
        while not self.closed.is_set():
            self.armed.wait()
            if self.closed.is_set():
                return
            with self.lock:
                generation = self.generation
            result = self.probe_fn(self.url)
            with self.lock:
                if generation == self.generation and self.armed.is_set():
                    hang = self.watch.observe(result, self.clock())
                    if hang is not None:
                        self.found = hang
                        self.armed.clear()  # one report; the launcher arms again after the restart
            self.closed.wait(self.interval_s)
