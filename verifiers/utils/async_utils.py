"""Small helpers for mixing sync and async code.

Environments accept user hooks (``is_completed``, ``env_response``, tools,
reward functions) that may be sync or async, and clients that may be
``AsyncOpenAI`` or sync ``OpenAI``. These helpers keep that plumbing in one place.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


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
