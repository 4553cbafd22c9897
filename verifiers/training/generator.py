"""Background generation of training batches: ``BatchGenerator``.

A thread with its own event loop runs a producer (``RolloutProducer`` from
producer.py: what one batch is and how it is produced) ahead of training.
Batch ``i`` may start only once ``i - num_batches_ahead`` batches are trained
(so no sample is more than ``num_batches_ahead`` policy versions old), at most
``max_queue_size`` finished batches wait, and a failure in the thread is raised
in the main thread as ``GenerationError`` with the cause chained.
``build_generator`` wires producer and thread from a ``GRPOConfig``.

Faults the generator rides out, each counted in the batch's metrics and logged once:

- A batch that takes longer than ``timeout`` is cancelled and generated again
  from the same prompts (the prompt cursor is rewound), up to ``max_retries``
  times (``errors/generation_timeout``); then it is an error.
- A server that stops answering (rollouts fail with ``ServerUnreachableError``):
  the batch is dropped and rewound, the thread polls the server with backoff
  until it is back (at most ``server_timeout`` seconds), asks the trainer for a
  weight re-sync (a restarted server serves its base weights), waits for it,
  and generates the batch again (``errors/server_restarts``). The trainer sees
  the request as ``get(i, resync=True)`` returning :data:`RESYNC`.

Batch indices count generation batches from the start of training; a policy
version is the number of generation batches trained (and synced) so far.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from verifiers.envs.model_client import client_url
from verifiers.errors import GenerationError, ServerUnreachableError

# GeneratedBatch stays importable from here: checkpoints pickle pending batches by
# module path, and those saved before producer.py existed name this module.
from verifiers.training.producer import (
    GeneratedBatch,
    PromptStream,
    RolloutProducer,
    group_filter_from_config,
    sampling_args_from_config,
)
from verifiers.types import GenerateOutputs, ProcessedOutputs
from verifiers.utils.logging import warn_once

logger = logging.getLogger("verifiers.training.generator")

RESYNC = "vf:resync"
"""What ``BatchGenerator.get(i, resync=True)`` returns when the server came back from an
outage and the trainer must push its weights again before the batch can be generated."""


class Producer(Protocol):
    """What ``BatchGenerator`` runs: one batch per call, plus resumable state."""

    async def produce(self, index: int, policy_version: int) -> GeneratedBatch: ...

    def state_dict(self) -> dict[str, Any]: ...

    # Optional: ``load_state_dict(state)`` puts the producer back where ``state_dict()``
    # was taken, so a failed attempt at a batch is retried with the same prompts.


class BatchGenerator:
    """Runs a ``Producer`` ahead of training in a background thread with its own event loop.

    ``get(i)`` blocks until batch ``i`` is ready; ``mark_trained(n)`` tells the
    thread that ``n`` batches are trained and synced (the policy version), which
    lets it start batch ``n + num_batches_ahead``. With ``num_batches_ahead=0``
    batch ``i`` starts only after batch ``i - 1`` is trained: synchronous.
    ``run(coro)`` runs any coroutine (e.g. an evaluation) in the same loop, so one
    async HTTP client serves both. To resume, pass ``start_index`` (batches trained),
    ``next_index`` (first batch never generated) and the ``pending`` batches from
    ``state_dict()``.

    Each attempt at a batch may take ``timeout`` seconds; a batch is attempted
    ``1 + max_retries`` times before its timeout is an error. ``server`` (an
    object with ``ping() -> dict | None``, e.g. ``VLLMClient``) enables riding out
    server outages (see the module docstring); the trainer reports every
    weight sync with ``resynced()``.
    """

    def __init__(
        self,
        producer: Producer,
        *,
        num_batches_ahead: int = 1,
        max_queue_size: int | None = None,
        timeout: float = 600.0,
        start_index: int = 0,
        next_index: int | None = None,
        pending: Sequence[GeneratedBatch] = (),
        max_retries: int = 2,
        server: Any = None,
        server_timeout: float = 300.0,
    ):
        if num_batches_ahead < 0:
            raise GenerationError(f"num_batches_ahead must be >= 0, got {num_batches_ahead}")
        self.producer = producer
        self.ahead = num_batches_ahead
        self.max_queue_size = max(1, max_queue_size if max_queue_size is not None else num_batches_ahead)
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.server, self.server_timeout = server, server_timeout
        self._cond = threading.Condition()
        self._ready: dict[int, GeneratedBatch] = {b.index: b for b in pending}
        self._trained = start_index
        # Resuming: batches below ``next_index`` were generated before (pending, or in training).
        self._next = max([start_index - 1, *self._ready, (next_index or 0) - 1]) + 1
        self._in_flight: int | None = None
        self._error: tuple[int, BaseException] | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._worker_task: asyncio.Task | None = None
        self._started = threading.Event()
        self._progress = time.monotonic()  # last time the thread started or recovered an attempt
        self._recovering = False  # waiting for the server to come back, or for a re-sync
        self._resync_wanted = False
        self._syncs = 0  # weight syncs the trainer reported (resynced())
        self._rewind_state: dict[str, Any] | None = None  # producer state before the in-flight batch

    # ---- main thread ----
    def start(self) -> BatchGenerator:
        self._thread = threading.Thread(target=self._thread_main, name="vf-generator", daemon=True)
        self._thread.start()
        if not self._started.wait(30):
            raise GenerationError("generator thread did not start within 30 s")
        return self

    def get(self, index: int, resync: bool = False) -> GeneratedBatch | str:
        """Batch ``index``; raises ``GenerationError`` on failure.

        Waits while the thread works on it (each attempt is bounded by ``timeout``,
        recovery from an outage by ``server_timeout``). With ``resync=True`` it
        returns :data:`RESYNC` instead when the thread needs the weights pushed
        again; the caller syncs (which calls ``resynced()``) and asks again.
        """
        if index > self._trained + self.ahead:
            raise GenerationError(
                f"batch {index} requested but only {self._trained} batches are trained "
                f"(num_batches_ahead={self.ahead}); call mark_trained first"
            )
        called = time.monotonic()
        with self._cond:
            while index not in self._ready:
                self._raise_if_failed(index)
                if index < self._next and self._in_flight != index:
                    raise GenerationError(f"batch {index} was already consumed or skipped")
                if resync and self._resync_wanted:
                    return RESYNC
                # A safety net: the thread bounds each attempt itself, so this fires only if
                # it stalls outside one (1 s of grace lets its own timeout report first).
                deadline = max(called, self._progress) + self.timeout + 1.0
                remaining = deadline - time.monotonic()
                if self._recovering:
                    remaining = 1.0
                if remaining <= 0:
                    raise GenerationError(
                        f"batch {index} not ready after {self.timeout:.0f} s",
                        hint="raise async_generation_timeout, or check that the vLLM server is generating",
                    )
                self._cond.wait(min(remaining, 1.0))
            batch = self._ready.pop(index)
        self._notify_thread()  # a queue slot is free
        if index - batch.policy_version > self.ahead:
            raise GenerationError(
                f"batch {index} is {index - batch.policy_version} policy versions old "
                f"(num_batches_ahead={self.ahead} allows at most {self.ahead})"
            )
        return batch

    def resynced(self) -> None:
        """The trainer pushed its weights to the server (call after every successful sync)."""
        with self._cond:
            self._syncs += 1
            self._resync_wanted = False
            self._cond.notify_all()
        self._notify_thread()

    def mark_trained(self, num_trained: int) -> None:
        with self._cond:
            self._trained = max(self._trained, num_trained)
        self._notify_thread()

    @property
    def trained(self) -> int:
        return self._trained

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no batch is being generated; returns whether none is.

        The trainer calls it before pushing weights, so that every batch is sampled
        from one policy version (weights changing mid-batch would make a seeded run
        depend on timing). Returns at once while the thread waits for the server to
        come back (it needs a sync), and gives up after ``timeout`` (default: ``self.timeout``).
        """
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        with self._cond:
            while self._in_flight is not None and self._error is None and self.alive and not self._recovering:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 1.0))
            return self._in_flight is None

    def run(self, coro: Awaitable[Any], timeout: float | None = None) -> Any:
        """Run ``coro`` in the generator's event loop and return its result."""
        if self._loop is None or not self.alive:
            raise GenerationError("generator is not running")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)  # type: ignore[arg-type]
        try:
            return future.result(timeout if timeout is not None else self.timeout)
        except TimeoutError as e:
            future.cancel()
            raise GenerationError(f"coroutine did not finish within {timeout or self.timeout:.0f} s") from e

    def state_dict(self) -> dict[str, Any]:
        """Pending batches and producer state; waits for an in-flight batch so nothing is lost."""
        deadline = time.monotonic() + self.timeout
        with self._cond:
            while self._in_flight is not None and self._error is None and self.alive:
                if self._recovering and self._rewind_state is not None:
                    # The server is away: save the in-flight batch as never started (the
                    # producer as it was before it), rather than wait for the server.
                    return {
                        "trained": self._trained,
                        "next": self._in_flight,
                        "pending": [self._ready[i] for i in sorted(self._ready)],
                        "producer": dict(self._rewind_state),
                    }
                if time.monotonic() > deadline:
                    raise GenerationError(
                        f"batch {self._in_flight} still generating after {self.timeout:.0f} s"
                    )
                self._cond.wait(1.0)
            # Holding the lock, the thread cannot start another batch: a consistent snapshot.
            return {
                "trained": self._trained,
                "next": self._next,
                "pending": [self._ready[i] for i in sorted(self._ready)],
                "producer": self.producer.state_dict(),
            }

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, join_timeout: float = 30.0) -> None:
        """Stop the thread, cancelling an in-flight batch; idempotent."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        loop, task = self._loop, self._worker_task
        if loop is not None and task is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(task.cancel)
            except RuntimeError:  # loop closed between the check and the call
                pass
        if self._thread is not None:
            self._thread.join(join_timeout)
            if self._thread.is_alive():
                logger.warning(
                    "generator thread did not stop within %.0f s; leaving it (daemon)", join_timeout
                )

    def _raise_if_failed(self, index: int) -> None:
        if self._error is not None:
            failed, exc = self._error
            raise GenerationError(f"generating batch {failed} failed: {type(exc).__name__}: {exc}") from exc
        if self._thread is not None and not self._thread.is_alive():
            raise GenerationError(f"generator thread is not running (waiting for batch {index})")

    def _notify_thread(self) -> None:
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:
                pass

    # ---- generator thread ----
    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        finally:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:
                t.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()
            with self._cond:
                self._cond.notify_all()

    async def _main(self) -> None:
        self._wake = asyncio.Event()
        self._worker_task = asyncio.current_task()
        self._started.set()
        try:
            await self._work()
        except asyncio.CancelledError:
            if not self._stopping:
                raise

    def _may_start(self) -> bool:
        return self._next <= self._trained + self.ahead and len(self._ready) < self.max_queue_size

    async def _work(self) -> None:
        assert self._wake is not None
        while True:
            # Clear before checking: a wake-up scheduled after our check still wakes us.
            self._wake.clear()
            with self._cond:
                if self._stopping:
                    return
                index = self._next if self._may_start() else None
                if index is not None:
                    self._in_flight = index
                    self._rewind_state = self._producer_state()
            if index is None:
                await self._wake.wait()
                continue
            try:
                batch = await self._produce_with_retries(index)
            except asyncio.CancelledError:
                with self._cond:
                    self._in_flight = None
                    self._cond.notify_all()
                raise
            except BaseException as e:  # noqa: BLE001 - surfaced in the main thread by get()
                with self._cond:
                    self._error, self._in_flight = (index, e), None
                    self._cond.notify_all()
                return
            with self._cond:
                self._ready[index] = batch
                self._next, self._in_flight = index + 1, None
                self._cond.notify_all()
            logger.debug(
                "batch %d ready in %.2f s (policy version %d)",
                index,
                batch.generation_s,
                batch.policy_version,
            )

    def _producer_state(self) -> dict[str, Any] | None:
        if not hasattr(self.producer, "load_state_dict"):
            return None
        return dict(self.producer.state_dict())

    def _rewind(self) -> None:
        """Put the producer back to where it was before this batch: the retry takes the same prompts."""
        if self._rewind_state is not None:
            self.producer.load_state_dict(dict(self._rewind_state))

    async def _produce_with_retries(self, index: int) -> GeneratedBatch:
        """One batch, retried after a timeout or a server outage (counted in its metrics)."""
        timeouts = outages = 0
        while True:
            with self._cond:
                version, self._progress = self._trained, time.monotonic()
            try:
                batch = await asyncio.wait_for(self.producer.produce(index, version), self.timeout)
                break
            except asyncio.TimeoutError:
                timeouts += 1
                if timeouts > self.max_retries:
                    raise GenerationError(
                        f"batch {index} took longer than {self.timeout:g} s, {timeouts} times",
                        hint="raise async_generation_timeout, or check that the vLLM server is generating",
                    ) from None
                warn_once(
                    logger,
                    "generation-timeout",
                    "generation batch %d took longer than async_generation_timeout=%g s; cancelled and "
                    "generating it again from the same prompts (logged once; counted in "
                    "errors/generation_timeout)",
                    index,
                    self.timeout,
                )
            except ServerUnreachableError as e:
                if self.server is None or outages >= 10:
                    raise
                outages += 1
                await self._recover(index, e)
            self._rewind()
        batch.metrics["errors/generation_timeout"] = float(timeouts)
        batch.metrics["errors/server_restarts"] = float(outages)
        return batch

    async def _recover(self, index: int, err: BaseException) -> None:
        """Wait (backoff) until the server is back, then until the trainer re-synced its weights."""
        assert self._wake is not None
        warn_once(
            logger,
            "server-lost",
            "the vLLM server stopped answering (%s); waiting up to %.0f s for it to come back, then "
            "re-syncing the weights and going on (logged once; counted in errors/server_restarts)",
            err,
            self.server_timeout,
        )
        with self._cond:
            self._recovering = True
        try:
            health = await self._await_server()
            restarted = getattr(self.server, "lost_weights", lambda h: True)(health)
            logger.info(
                "the vLLM server is back%s; batch %d is generated again after a weight re-sync",
                " (restarted: it lost the synced weights)" if restarted else "",
                index,
            )
            deadline = time.monotonic() + self.server_timeout
            with self._cond:
                synced_before, self._resync_wanted = self._syncs, True
                self._cond.notify_all()
            while True:
                self._wake.clear()  # before checking: a wake-up after the check still wakes us
                with self._cond:
                    if self._stopping or self._syncs > synced_before:
                        break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise GenerationError(
                        f"the trainer did not re-sync its weights within {self.server_timeout:.0f} s "
                        f"after the server came back (batch {index})"
                    )
                try:
                    await asyncio.wait_for(self._wake.wait(), min(left, 1.0))
                except asyncio.TimeoutError:
                    pass
        finally:
            with self._cond:
                self._recovering = self._resync_wanted = False
                self._progress = time.monotonic()
                self._cond.notify_all()

    async def _await_server(self) -> dict[str, Any]:
        """Poll ``server.ping()`` with exponential backoff until it answers ready."""
        deadline = time.monotonic() + self.server_timeout
        delay = 0.5
        while True:
            health = await asyncio.to_thread(self.server.ping)
            if health is not None:
                return health
            left = deadline - time.monotonic()
            if left <= 0:
                raise ServerUnreachableError(
                    f"the model server did not come back within {self.server_timeout:.0f} s",
                    hint="restart vf-vllm on the same host and port, or raise vllm_server_timeout",
                    url=client_url(self.server) or None,
                )
            await asyncio.sleep(min(delay, left))
            delay = min(delay * 2, 8.0)


def build_generator(
    env: Any,
    client: Any,
    model: str,
    dataset: Any,
    args: Any,
    process: Callable[[GenerateOutputs], ProcessedOutputs | None],
    *,
    trained: int,
    state: dict[str, Any] | None = None,
) -> BatchGenerator:
    """A started ``BatchGenerator`` for a ``GRPOConfig``; ``state`` (from a checkpoint) resumes it.

    Without a saved state the prompt cursor is estimated from the batches trained
    (exact unless difficulty filtering drew extra prompts).
    """
    prompts = args.generation_batch_size // args.num_generations
    cursor = state["producer"]["cursor"] if state else trained * prompts
    producer = RolloutProducer(
        env,
        client,
        model,
        dataset,
        PromptStream(len(dataset), seed=args.seed, shuffle=args.shuffle_dataset, cursor=cursor),
        num_prompts=prompts,
        num_generations=args.num_generations,
        sampling_args=sampling_args_from_config(args),
        max_concurrent=args.max_concurrent,
        process=process,
        keep_groups=group_filter_from_config(args),
        max_filter_rounds=args.max_filter_rounds,
        seed=args.seed,
    )
    return BatchGenerator(
        producer,
        num_batches_ahead=args.num_batches_ahead,
        max_queue_size=args.async_max_queue_size,
        timeout=args.async_generation_timeout,
        start_index=trained,
        next_index=state["next"] if state else None,
        pending=state["pending"] if state else (),
        server=client if callable(getattr(client, "ping", None)) else None,
        server_timeout=args.vllm_server_timeout,
    ).start()
