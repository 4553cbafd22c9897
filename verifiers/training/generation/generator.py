"""Background generation of training batches: ``BatchGenerator``.

A thread with its own event loop runs a producer (``RolloutProducer`` from
producer.py: what one batch is and how it is produced) ahead of training. Which
batch may start, and how stale a batch may be, is ``BatchQueue``'s business
(queue.py): batch ``i`` starts only once ``i - num_batches_ahead`` batches
are trained, and at most ``max_queue_size`` finished batches wait. A failure in
the thread is raised in the main thread as ``GenerationError`` with the cause
chained. ``build_generator`` wires producer and thread from a ``GRPOConfig``.

Faults the generator rides out, each counted in the batch's metrics and logged once:

- A batch that takes longer than ``timeout`` is cancelled and generated again
  from the same prompts (the prompt cursor is rewound), up to ``max_retries``
  times (``errors/generation_timeout``); then it is an error.
- A server that stops answering (rollouts fail with ``ServerUnreachableError``):
  the batch is dropped and rewound, and ``ServerRecovery`` (inference/client/recovery.py) waits
  for the server and for the trainer's weight re-sync, which the trainer sees as
  ``get(i, resync=True)`` returning a ``Resync``; then the batch is generated
  again (``errors/server_restarts``).

Batch indices count generation batches from the start of training; a policy
version is the number of generation batches trained (and synced) so far.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

from verifiers.errors import GenerationError, ServerUnreachableError, StopRequested
from verifiers.inference.client.recovery import ServerRecovery
from verifiers.training.generation.cpu_phases import choose_phases
from verifiers.training.generation.producer import (
    GeneratedBatch,
    PromptStream,
    RolloutProducer,
    TokenSettings,
    group_filter_from_config,
    producer_seed,
    sampling_args_from_config,
)
from verifiers.training.generation.queue import BatchQueue
from verifiers.training.types import Resync
from verifiers.utils.logging import warn_once

logger = logging.getLogger("verifiers.training.generation.generator")


class Producer(Protocol):
    """What ``BatchGenerator`` runs: one batch per call, plus resumable state."""

    async def produce(self, index: int, policy_version: int) -> GeneratedBatch: ...

    def state_dict(self) -> dict[str, Any]: ...

    # Optional: ``load_state_dict(state)`` puts the producer back where ``state_dict()``
    # was taken, so a failed attempt at a batch is retried with the same prompts; a ``model``
    # attribute receives ``set_model``'s name.


class Signal:
    """The generator's one synchronisation mechanism: a lock over the shared state, and a
    ``notify()`` that wakes both the threads waiting under it (the trainer) and the event
    loop of the generator thread (which must not block on a lock to wait)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: asyncio.Event | None = None

    def __enter__(self) -> None:
        self.cond.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self.cond.__exit__(*exc)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called in the generator thread, inside its running loop."""
        self._loop, self._event = loop, asyncio.Event()

    def notify(self) -> None:
        with self.cond:
            self.cond.notify_all()
        loop, event = self._loop, self._event
        if loop is not None and event is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # loop closed between the check and the call
                pass

    def wait(self, timeout: float) -> None:
        """Main thread, holding the lock: until ``notify()`` or ``timeout``."""
        self.cond.wait(timeout)

    def clear(self) -> None:
        """Generator thread, before checking the state: a ``notify()`` after the check still wakes it."""
        if self._event is not None:
            self._event.clear()

    async def async_wait(self, timeout: float | None = None) -> None:
        """Generator thread: until ``notify()`` (since the last ``clear()``) or ``timeout``."""
        assert self._event is not None
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except asyncio.TimeoutError:
            pass


class BatchGenerator:
    """Runs a ``Producer`` ahead of training in a background thread with its own event loop.

    ``get(i)`` blocks until batch ``i`` is ready; ``mark_trained(n)`` tells the
    thread that ``n`` batches are trained and synced (the policy version), which
    lets it start batch ``n + num_batches_ahead``. With ``num_batches_ahead=0``
    batch ``i`` starts only after batch ``i - 1`` is trained: synchronous.
    ``run(coro)`` runs any coroutine (e.g. an evaluation) in the same loop, so one
    async HTTP client serves both. To resume, pass ``start_index`` (batches trained),
    ``next_index`` (first batch never generated) and the ``pending`` batches from
    ``state_dict()``. With ``total`` (the batches the run will train), batch ``total``
    and later ones are never started: nothing is generated past the last step.

    Each attempt at a batch may take ``timeout`` seconds; a batch is attempted
    ``1 + max_retries`` times before its timeout is an error. ``server`` (an
    object with ``ping() -> dict | None``, e.g. ``VLLMClient``) enables riding out
    server outages (see the module docstring); the trainer reports every
    weight sync with ``resynced()`` and the model name to request with ``set_model()``.
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
        total: int | None = None,
    ):
        self.producer = producer
        self.total = total
        self.queue = BatchQueue.resume(num_batches_ahead, max_queue_size, start_index, next_index, pending)
        self.ahead = num_batches_ahead
        self.timeout = timeout
        self.max_retries = max(0, max_retries)
        self.server = server
        self.signal = Signal()  # guards queue, recovery and the fields below
        self.recovery = ServerRecovery(server, server_timeout, self.signal)
        self._model: str | None = None  # set_model's name, handed to the producer by the thread
        self._stopping = False
        self._interrupted = False  # interrupt(): a stop signal; get() stops waiting
        self._progress = time.monotonic()  # last time the thread started an attempt
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task | None = None  # the thread's main task (stop() cancels it)
        self._started = threading.Event()

    # ---- main thread ----
    def start(self) -> BatchGenerator:
        self._thread = threading.Thread(target=self._thread_main, name="vf-generator", daemon=True)
        self._thread.start()
        if not self._started.wait(30):
            raise GenerationError("generator thread did not start within 30 s")
        return self

    def get(self, index: int, resync: bool = False) -> GeneratedBatch | Resync | StopRequested:
        """Batch ``index``; raises ``GenerationError`` on failure.

        Waits while the thread works on it (each attempt is bounded by ``timeout``,
        recovery from an outage by ``server_timeout``). With ``resync=True`` it
        returns a :class:`Resync` instead when the thread needs the weights pushed
        again; the caller syncs (which calls ``resynced()``) and asks again. After
        ``interrupt()`` it stops waiting: a ``StopRequested`` is returned (``resync=True``:
        the trainer broadcasts it to its other processes) or raised. A batch already
        ready is still returned (the trainer checks for the stop at the step's end).
        """
        self.queue.check_request(index)
        called = time.monotonic()
        with self.signal:
            while (batch := self.queue.take(index)) is None:
                if self._interrupted:
                    stop = StopRequested(f"stopped while waiting for batch {index}")
                    if resync:
                        return stop
                    raise stop
                if not self.alive and self._thread is not None:
                    raise GenerationError(f"generator thread is not running (waiting for batch {index})")
                if resync and self.recovery.resync_wanted:
                    return Resync(index)
                # A safety net: the thread bounds each attempt itself, so this fires only if
                # it stalls outside one (1 s of grace lets its own timeout report first).
                since = max(called, self._progress, self.recovery.recovered_at)
                remaining = 1.0 if self.recovery.waiting else since + self.timeout + 1.0 - time.monotonic()
                if remaining <= 0:
                    raise GenerationError(
                        f"batch {index} not ready after {self.timeout:.0f} s",
                        hint="raise async_generation_timeout, or check that the vLLM server is generating",
                    )
                self.signal.wait(min(remaining, 1.0))
        self.signal.notify()  # a queue slot is free
        return self.queue.check_fresh(batch)

    def interrupt(self) -> None:
        """A stop signal arrived: wake a waiting ``get`` (which then raises ``StopRequested``).
        Safe in a signal handler: one attribute write, and ``notify`` takes a reentrant lock."""
        self._interrupted = True
        self.signal.notify()

    def set_model(self, name: str) -> None:
        """The model name rollouts request from now on (e.g. the LoRA adapter's after a sync)."""
        with self.signal:
            self._model = name

    def resynced(self) -> None:
        """The trainer pushed its weights to the server (call after every successful sync)."""
        self.recovery.resynced()

    def mark_trained(self, num_trained: int) -> None:
        with self.signal:
            self.queue.trained = max(self.queue.trained, num_trained)
        self.signal.notify()

    @property
    def trained(self) -> int:
        return self.queue.trained

    def _busy(self) -> bool:
        """A batch is being generated, the thread is alive, and it will finish without the trainer."""
        q = self.queue
        return q.in_flight is not None and q.error is None and self.alive and not self.recovery.waiting

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait until no batch is being generated; returns whether none is.

        The trainer calls it before pushing weights, so that every batch is sampled
        from one policy version (weights changing mid-batch would make a seeded run
        depend on timing). Returns at once while the thread waits for the server to
        come back (it needs a sync), and gives up after ``timeout`` (default: ``self.timeout``).
        """
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        with self.signal:
            while self._busy() and (left := deadline - time.monotonic()) > 0:
                self.signal.wait(min(left, 1.0))
            return self.queue.in_flight is None

    def run(self, coro: Awaitable[Any], timeout: float | None = None) -> Any:
        """Run ``coro`` in the generator's event loop and return its result."""
        loop = self._task.get_loop() if self._task is not None else None
        if loop is None or not self.alive:
            raise GenerationError("generator is not running")
        future = asyncio.run_coroutine_threadsafe(coro, loop)  # type: ignore[arg-type]
        try:
            return future.result(timeout if timeout is not None else self.timeout)
        except TimeoutError as e:
            future.cancel()
            raise GenerationError(f"coroutine did not finish within {timeout or self.timeout:.0f} s") from e

    def state_dict(self, wait: bool = True) -> dict[str, Any]:
        """Pending batches and producer state; waits for an in-flight batch so nothing is lost.

        ``wait=False`` (a run stopping on a signal) saves the in-flight batch as never
        started instead: it was started after the last weight push (``wait_idle``), so a
        resumed run generates it again from the same prompts and the same weights.
        """
        deadline = time.monotonic() + self.timeout
        q = self.queue
        with self.signal:
            while q.in_flight is not None and q.error is None and self.alive:
                if (self.recovery.waiting or not wait) and q.rewind is not None:
                    # The server is away, or the run is stopping: save the in-flight batch as
                    # never started (the producer as it was before it), rather than wait for it.
                    return {**q.snapshot(dict(q.rewind)), "next": q.in_flight}
                if time.monotonic() > deadline:
                    raise GenerationError(f"batch {q.in_flight} still generating after {self.timeout:.0f} s")
                self.signal.wait(1.0)
            # Holding the lock, the thread cannot start another batch: a consistent snapshot.
            return q.snapshot(self.producer.state_dict())

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self, join_timeout: float = 30.0) -> None:
        """Stop the thread, cancelling an in-flight batch; idempotent."""
        with self.signal:
            self._stopping = True
        self.signal.notify()
        task = self._task
        if task is not None and not task.get_loop().is_closed():
            try:
                task.get_loop().call_soon_threadsafe(task.cancel)
            except RuntimeError:  # loop closed between the check and the call
                pass
        if self._thread is not None:
            self._thread.join(join_timeout)
            if self._thread.is_alive():
                logger.warning(
                    "generator thread did not stop within %.0f s; leaving it (daemon)", join_timeout
                )

    # ---- generator thread ----
    def _thread_main(self) -> None:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
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
            self.signal.notify()

    async def _main(self) -> None:
        self.signal.bind(asyncio.get_running_loop())
        self._task = asyncio.current_task()
        self._started.set()
        try:
            await self._work()
        except asyncio.CancelledError:
            if not self._stopping:
                raise

    async def _work(self) -> None:
        while True:
            self.signal.clear()  # before checking: a wake-up scheduled after our check still wakes us
            with self.signal:
                if self._stopping:
                    return
                index = self.queue.next_to_start()
                if index is not None and self.total is not None and index >= self.total:
                    index = None  # past the run's last batch: never generated
                if index is not None:
                    self.queue.start(index, self._producer_state())
            if index is None:
                await self.signal.async_wait()
                continue
            try:
                batch = await self._produce_with_retries(index)
            except asyncio.CancelledError:
                with self.signal:
                    self.queue.in_flight = None
                self.signal.notify()
                raise
            except BaseException as e:  # noqa: BLE001 - surfaced in the main thread by get()
                with self.signal:
                    self.queue.fail(index, e)
                self.signal.notify()
                return
            with self.signal:
                self.queue.finish(index, batch)
            self.signal.notify()
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
        if self.queue.rewind is not None:
            self.producer.load_state_dict(dict(self.queue.rewind))

    async def _produce_with_retries(self, index: int) -> GeneratedBatch:
        """One batch, retried after a timeout or a server outage (counted in its metrics)."""
        timeouts = outages = 0
        while True:
            with self.signal:
                version, self._progress = self.queue.trained, time.monotonic()
                if self._model is not None:  # set here, in the thread that reads it
                    self.producer.model = self._model  # type: ignore[attr-defined]
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
                await self.recovery.recover(index, e, stopping=lambda: self._stopping)
            self._rewind()
        batch.metrics["errors/generation_timeout"] = float(timeouts)
        batch.metrics["errors/server_restarts"] = float(outages)
        return batch


def build_generator(
    env: Any,
    client: Any,
    model: str,
    dataset: Any,
    args: Any,
    tokenizer: Any,
    *,
    trained: int,
    state: dict[str, Any] | None = None,
    total: int | None = None,
) -> BatchGenerator:
    """A started ``BatchGenerator`` for a ``GRPOConfig``; ``state`` (from a checkpoint) resumes it.

    Its batches carry their token data, made in the generator thread with ``tokenizer``
    and the config's ``TokenSettings``.

    Without a saved state the prompt cursor is estimated from the batches trained
    (exact unless difficulty filtering drew extra prompts). How far ahead it runs is
    ``cpu_phases``' choice (cpu_phases.py): 0 when the server shares the trainer's CPU.
    A batch is one optimizer step or more (``batch_layout.generation_plan``); a step larger
    than ``generation_batch_size`` is generated in rounds of that size. ``total``: the
    batches the run trains (none is generated past them).
    """
    from verifiers.training.config.batch_layout import plan_of

    ahead = choose_phases(args, client).num_batches_ahead
    if state and state["pending"]:  # resumed with batches generated further ahead: they stay valid
        ahead = max(ahead, *(b.index - b.policy_version for b in state["pending"]))
    plan = plan_of(args)
    prompts = plan.samples // args.num_generations
    cursor = state["producer"]["cursor"] if state else trained * prompts
    producer = RolloutProducer(
        env,
        client,
        model,
        dataset,
        PromptStream(len(dataset), seed=args.seed, shuffle=args.shuffle_dataset, cursor=cursor),
        num_prompts=prompts,
        chunk_prompts=args.generation_batch_size // args.num_generations,
        num_generations=args.num_generations,
        sampling_args=sampling_args_from_config(args),
        max_concurrent=args.max_concurrent,
        tokenizer=tokenizer,
        tokens=TokenSettings.from_config(args),
        keep_groups=group_filter_from_config(args),
        max_filter_rounds=args.max_filter_rounds,
        seed=producer_seed(args),
    )
    return BatchGenerator(
        producer,
        num_batches_ahead=ahead,
        max_queue_size=args.async_max_queue_size,
        timeout=args.async_generation_timeout,
        start_index=trained,
        next_index=state["next"] if state else None,
        pending=state["pending"] if state else (),
        server=client if callable(getattr(client, "ping", None)) else None,
        server_timeout=args.vllm_server_timeout,
        total=total,
    ).start()
