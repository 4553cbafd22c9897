"""Riding out a lost inference server: wait for it to come back, re-sync the weights, go on.

The trainer's side of the server (its process), so it lives with the client; the trainer's
generator and weight stages call it.

A restarted vf-vllm serves its base weights, so after an outage the trainer
must push its weights again before more rollouts are worth anything. The server
can be lost on either side of training:

- While a batch generates (generator thread): rollouts fail with
  ``ServerUnreachableError``; ``ServerRecovery.recover`` polls the server with
  backoff (at most ``timeout`` seconds), then asks the trainer for a re-sync
  and waits for it. The trainer sees the request as ``generator.get(i,
  resync=True)`` returning a ``Resync`` (verifiers/training/types.py); it syncs, which calls
  ``generator.resynced()``, and asks again. The batch is then generated again.
- While the trainer pushes weights (main thread): ``sync_through_outages``
  waits for the server with backoff (``VLLMClient.wait_for_server``) and
  pushes everything again.

Either way the warning is logged once and the outage is counted in
``errors/server_restarts``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from verifiers.envs.model_client import client_url
from verifiers.errors import GenerationError, ServerError, ServerUnreachableError
from verifiers.inference.client.vllm_client import is_server_lost
from verifiers.utils.backoff import Backoff, async_poll_until
from verifiers.utils.logging import warn_once

# The name its lines have always been logged under.
logger = logging.getLogger("verifiers.training.weights.recovery")

T = TypeVar("T")


def warn_server_lost(err: BaseException, timeout: float) -> None:
    warn_once(
        logger,
        "server-lost",
        "the vLLM server stopped answering (%s); waiting up to %.0f s for it to come back, then "
        "re-syncing the weights and going on (logged once; counted in errors/server_restarts)",
        err,
        timeout,
    )


def sync_through_outages(
    sync: Callable[[], T], client: Any, timeout: float, on_outage: Callable[[], None]
) -> T:
    """``sync()``, repeated after waiting out each outage of ``client``'s server (``on_outage`` counts it).

    Other failures, and outages of a client that cannot wait (no ``wait_for_server``), are raised.
    """
    while True:
        try:
            return sync()
        except ServerError as e:
            if not is_server_lost(e):
                raise
            wait_out_outage(e, client, timeout)
            on_outage()


def wait_out_outage(err: ServerError, client: Any, timeout: float) -> None:
    """Wait (up to ``timeout``) for ``client``'s lost server to come back; ``err`` again if the
    client cannot wait (no ``wait_for_server``)."""
    if not callable(getattr(client, "wait_for_server", None)):
        raise err
    warn_server_lost(err, timeout)
    client.wait_for_server(timeout)


class Signal(Protocol):
    """How ``ServerRecovery`` shares state with the generator (``generator.Signal``)."""

    def __enter__(self) -> None: ...

    def __exit__(self, *exc: Any) -> None: ...

    def notify(self) -> None: ...

    def clear(self) -> None: ...

    def async_wait(self, timeout: float) -> Awaitable[None]: ...


class ServerRecovery:
    """The generator thread's side; its fields are read by both threads under ``signal``'s lock.

    ``waiting``: the thread waits for the server or a re-sync (the batch in flight
    will not finish until the trainer syncs, so the trainer must not wait for it);
    ``resync_wanted``: the server is back and needs the weights; ``syncs``: weight
    syncs the trainer reported; ``recovered_at``: when the last recovery ended (the trainer's
    patience for the batch starts again there).
    """

    def __init__(self, server: Any, timeout: float, signal: Signal):
        self.server, self.timeout, self.signal = server, timeout, signal
        self.waiting = False
        self.resync_wanted = False
        self.syncs = 0
        self.recovered_at = 0.0

    def resynced(self) -> None:
        """The trainer pushed its weights (main thread)."""
        with self.signal:
            self.syncs += 1
            self.resync_wanted = False
        self.signal.notify()

    async def recover(self, index: int, err: BaseException, stopping: Callable[[], bool]) -> None:
        """Wait (backoff) until the server is back, then until the trainer re-synced its weights."""
        warn_server_lost(err, self.timeout)
        with self.signal:
            self.waiting = True
        try:
            health = await self._await_server()
            restarted = getattr(self.server, "lost_weights", lambda h: True)(health)
            logger.info(
                "the vLLM server is back%s; batch %d is generated again after a weight re-sync",
                " (restarted: it lost the synced weights)" if restarted else "",
                index,
            )
            deadline = time.monotonic() + self.timeout
            with self.signal:
                synced_before, self.resync_wanted = self.syncs, True
            self.signal.notify()
            while True:
                self.signal.clear()  # before checking: a wake-up after the check still wakes us
                with self.signal:
                    if stopping() or self.syncs > synced_before:
                        return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise GenerationError(
                        f"the trainer did not re-sync its weights within {self.timeout:.0f} s "
                        f"after the server came back (batch {index})"
                    )
                await self.signal.async_wait(min(left, 1.0))
        finally:
            with self.signal:
                self.waiting = self.resync_wanted = False
                self.recovered_at = time.monotonic()
            self.signal.notify()

    async def _await_server(self) -> dict[str, Any]:
        """Poll ``server.ping()`` with exponential backoff until it answers ready."""
        backoff = Backoff(first=0.5, max_delay=8.0, timeout=self.timeout)
        health = await async_poll_until(lambda: asyncio.to_thread(self.server.ping), backoff)
        if health is None:
            raise ServerUnreachableError(
                f"the model server did not come back within {self.timeout:.0f} s",
                hint="restart vf-vllm on the same host and port, or raise vllm_server_timeout",
                url=client_url(self.server) or None,
            )
        return health
