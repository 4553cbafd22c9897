"""Small helpers for mixing sync and async code.

Environments accept user hooks (``is_completed``, ``env_response``, tools,
reward functions) that may be sync or async, and clients that may be
``AsyncOpenAI`` or sync ``OpenAI``. These helpers keep that plumbing in one place.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import dataclasses
import functools
import inspect
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

T = TypeVar("T")

# 0.1.x's maybe_retry is refused with a reason: verifiers.compat's import hook gives this module
# its refusing __getattr__ (utils sits below compat and imports nothing from it).


async def resolve(value: T | Awaitable[T]) -> T:
    """Return ``value``, awaiting it first if it is awaitable (a callable is returned as it is)."""
    if inspect.isawaitable(value):
        return await value
    return value  # type: ignore[return-value]


async def maybe_await(value: T | Awaitable[T] | Callable[..., Any], *args: Any, **kwargs: Any) -> T:
    """Return ``value``, awaiting it first if it is awaitable.

    0.1.x form, still accepted: ``await maybe_await(func, *args, **kwargs)``
    calls ``func`` (a sync or async callable) and returns its awaited result.
    A callable ``value`` is always called this way, also without arguments,
    as 0.1.x did; pass results, not functions, to get them back unchanged.
    """
    if callable(value) and not inspect.isawaitable(value):
        value = value(*args, **kwargs)
    elif args or kwargs:
        raise TypeError(f"maybe_await got arguments for {type(value).__name__!r}, which is not callable")
    return await resolve(value)


async def _maybe_await_func(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """0.1.x's form of :func:`maybe_await`: call ``func(*args, **kwargs)``, await its result if needed."""
    return await maybe_await(func, *args, **kwargs)


# verifiers.compat.forms.forms_of reads it: the release walk accepts 0.1.x's (func, ...) signature too.
maybe_await.__vf_forms__ = (_maybe_await_func,)  # type: ignore[attr-defined]


async def maybe_call_with_named_args(func: Callable[..., Any], **objects: Any) -> Any:
    """Call ``func`` with those of ``objects`` its signature names (all of them if it takes
    ``**kwargs``), awaiting the result if needed (0.1.14)."""
    params = inspect.signature(func).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        objects = {k: v for k, v in objects.items() if k in params}
    return await maybe_await(func, **objects)


async def with_sem(sem: AbstractAsyncContextManager[Any], coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` inside ``async with sem`` (0.1.10+); a ``coro`` never started (cancelled
    while waiting for ``sem``) is closed, so it does not warn that it was never awaited."""
    try:
        async with sem:
            return await coro
    finally:
        coro.close()


class NullContext:
    """A ``with`` block that does nothing (0.1.12+)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return False


class NullAsyncContext:
    """An ``async with`` block that does nothing: the semaphore of no limit (0.1.6+)."""

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: Any) -> bool:
        return False


async def maybe_semaphore(limit: int | None = None) -> AbstractAsyncContextManager[Any]:
    """``asyncio.Semaphore(limit)`` for a positive ``limit``, else a :class:`NullAsyncContext` (0.1.6+)."""
    if limit and limit > 0:
        return asyncio.Semaphore(limit)
    return NullAsyncContext()


class EventLoopLagMonitor:
    """Measures how late the event loop wakes up (0.1.9+): :meth:`run` (or
    :meth:`run_in_background`) sleeps ``measure_interval`` seconds at a time and keeps the
    last ``max_measurements`` delays beyond it in ``lags`` (seconds). ``logger`` (0.1.9-0.1.11)
    gets one info line when it is made."""

    def __init__(
        self, measure_interval: float = 0.1, max_measurements: int = 1000, logger: Any | None = None
    ):
        if measure_interval <= 0 or max_measurements <= 0:
            raise ValueError("measure_interval and max_measurements must be positive")
        import logging
        from collections import deque

        self.measure_interval = measure_interval
        self.max_measurements = max_measurements
        self.logger = logger or logging.getLogger(f"{__name__}.{type(self).__name__}")
        self.lags: deque[float] = deque(maxlen=max_measurements)
        self.logger.info(
            "event loop lag monitor: every %ss, last %d measurements", measure_interval, max_measurements
        )

    async def measure_lag(self) -> float:
        """One measurement: how much later than ``measure_interval`` a sleep of it returned."""
        due = time.perf_counter() + self.measure_interval
        await asyncio.sleep(self.measure_interval)
        return time.perf_counter() - due

    def get_lags(self) -> list[float]:
        """The measured lags, oldest first."""
        return list(self.lags)

    def reset_lags(self) -> None:
        """Forget the measured lags."""
        self.lags.clear()

    async def run(self) -> None:
        """Measure forever (cancel the task to stop)."""
        while True:
            self.lags.append(await self.measure_lag())

    def run_in_background(self) -> asyncio.Task[None]:
        """:meth:`run` as a task of the running loop."""
        return asyncio.create_task(self.run())


@dataclasses.dataclass
class EventLoopLagStats:
    """Summary of an :class:`EventLoopLagMonitor`'s lags in seconds (0.1.12+)."""

    min: float = 0.0
    mean: float = 0.0
    median: float = 0.0
    p90: float = 0.0
    p99: float = 0.0
    max: float = 0.0
    n: int = 0

    def __str__(self) -> str:
        from verifiers.utils.logging import print_time

        if self.n == 0:
            return "no samples"
        times = " ".join(
            f"{k}={print_time(getattr(self, k))}" for k in ("min", "mean", "median", "p90", "p99", "max")
        )
        return f"{times} (n={self.n})"

    @classmethod
    def from_monitor(cls, monitor: EventLoopLagMonitor) -> EventLoopLagStats:
        lags = sorted(monitor.lags)
        if not lags:
            return cls()

        def percentile(q: float) -> float:  # linear interpolation, as numpy's default
            pos = (len(lags) - 1) * q / 100
            low = int(pos)
            high = min(low + 1, len(lags) - 1)
            return lags[low] + (lags[high] - lags[low]) * (pos - low)

        return cls(
            min=lags[0],
            mean=sum(lags) / len(lags),
            median=percentile(50),
            p90=percentile(90),
            p99=percentile(99),
            max=lags[-1],
            n=len(lags),
        )


def is_async_callable(fn: Any) -> bool:
    """True if calling ``fn`` returns a coroutine (looks through decorators and partials)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    try:
        target = inspect.unwrap(fn)
    except ValueError:  # a __wrapped__ cycle
        target = fn
    if inspect.iscoroutinefunction(target):
        return True
    # A callable object whose __call__ is async.
    call = getattr(target, "__call__", None)  # noqa: B004 - we want the method, not callable()
    return call is not None and not inspect.isfunction(target) and inspect.iscoroutinefunction(call)


class DaemonThreadPool(concurrent.futures.Executor):
    """An executor whose workers are daemon threads: a call that never returns cannot block exit.

    ``ThreadPoolExecutor`` joins its workers when the interpreter exits, so one sync tool stuck
    forever (its rollout long since timed out and cancelled) kept a finished training run from
    exiting. Here the stuck thread is simply abandoned at exit. Workers start on demand, up to
    ``max_workers``, and an idle one is reused; ``shutdown`` stops idle workers and, with
    ``wait``, joins the busy ones.
    """

    _STOP = object()

    def __init__(self, max_workers: int, thread_name_prefix: str = "verifiers-daemon"):
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        import queue

        self.max_workers, self._prefix = max_workers, thread_name_prefix
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # workers waiting for a job
        self._shutdown = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot schedule new calls after shutdown")
            self._jobs.put((future, fn, args, kwargs))
            if self._idle > 0:
                self._idle -= 1  # that worker takes this job
            elif len(self._threads) < self.max_workers:
                t = threading.Thread(
                    target=self._work, name=f"{self._prefix}_{len(self._threads)}", daemon=True
                )
                self._threads.append(t)
                t.start()
            # else: every worker is busy; the job waits in the queue for the first one free.
        return future

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is self._STOP:
                return
            future, fn, args, kwargs = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as e:  # noqa: BLE001 - handed to the caller through the future
                    future.set_exception(e)
            del job, future, fn, args, kwargs  # hold no result while idle
            with self._lock:
                self._idle += 1

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            threads = list(self._threads)
        if cancel_futures:
            import queue

            pending = []
            while True:
                try:
                    pending.append(self._jobs.get_nowait())
                except queue.Empty:
                    break
            for job in pending:
                if job is not self._STOP:
                    job[0].cancel()
        for _ in threads:
            self._jobs.put(self._STOP)
        if wait:
            for t in threads:
                t.join()


async def run_in_thread(
    fn: Callable[..., T], *args: Any, executor: concurrent.futures.Executor | None = None, **kwargs: Any
) -> T:
    """Run a blocking ``fn(*args, **kwargs)`` in ``executor`` (default: the loop's) without blocking the loop."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, functools.partial(fn, *args, **kwargs))


async def call_maybe_async(
    fn: Callable[..., Any],
    *args: Any,
    executor: concurrent.futures.Executor | None = None,
    in_thread: bool = False,
    **kwargs: Any,
) -> Any:
    """Call a sync or async ``fn`` and return its result.

    Async callables are awaited on the loop. Sync ones are called inline (cheap
    hooks) or, with ``in_thread=True``, in ``executor`` so a blocking call (a
    tool, a sync HTTP client) does not stall other rollouts. A sync callable that
    still returns an awaitable has it awaited.
    """
    if is_async_callable(fn):
        return await fn(*args, **kwargs)
    if in_thread:
        result = await run_in_thread(fn, *args, executor=executor, **kwargs)
    else:
        result = fn(*args, **kwargs)
    return await resolve(result)


class _LoopThread:
    """One long-lived event loop in a daemon thread, shared by every sync wrapper.

    Why not ``asyncio.run`` per call: an ``AsyncOpenAI`` client pools its
    connections on the loop that first used them, so reusing the client from a
    second, fresh loop fails with "Event loop is closed". Running every sync
    ``generate``/``evaluate`` on the same loop lets users call them repeatedly
    with one client, from a script or from inside a running loop (Jupyter).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if (
                self._loop is None
                or self._loop.is_closed()
                or not self._thread
                or not self._thread.is_alive()
            ):
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def _run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                self._thread = threading.Thread(target=_run, name="verifiers-sync-loop", daemon=True)
                self._thread.start()
                ready.wait()
                self._loop = loop
            return self._loop

    def close(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(timeout=5)


_LOOP_THREAD = _LoopThread()
atexit.register(_LOOP_THREAD.close)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from sync code and return its result.

    Works from a plain script and from inside a running event loop (where
    ``asyncio.run`` would refuse): the coroutine runs on a shared background
    loop thread (see :class:`_LoopThread`) while this thread waits. If this
    thread is interrupted (Ctrl-C), the coroutine is cancelled.
    """
    loop = _LOOP_THREAD.loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:  # called from a hook already running on the shared loop: would deadlock
        coro.close()
        raise RuntimeError("run_sync called from the verifiers sync loop; await the coroutine instead")
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return future.result()
    except BaseException:
        future.cancel()
        raise
