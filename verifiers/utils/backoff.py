"""``Backoff`` and ``poll_until``: the one way verifiers waits between attempts.

Every retry and poll loop (HTTP retries and readiness polls in
inference/client/vllm_client.py, the generator waiting out a server outage, vf-rl waiting
for its server) takes its delays from a ``Backoff``: ``first``, then doubling,
capped at ``max_delay`` (``first == max_delay``: a fixed interval), and never
past an optional total ``timeout``. The delays come from urllib3's ``Retry``
(installed with requests), the schedule the HTTP stack itself uses.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from urllib3.util.retry import Retry

T = TypeVar("T")


class Backoff:
    """Delays ``first, 2*first, 4*first, ...`` (at most ``max_delay``) within ``timeout`` seconds.

    ``wait()`` / ``await async_wait()`` sleep the next delay, cut to the time left,
    and return False (without sleeping) once the time is up.
    """

    def __init__(self, first: float = 0.5, max_delay: float = 8.0, timeout: float | None = None):
        if first <= 0 or max_delay < first:
            raise ValueError(
                f"Backoff needs 0 < first <= max_delay, got first={first}, max_delay={max_delay}"
            )
        self.timeout = timeout
        self.deadline = math.inf if timeout is None else time.monotonic() + timeout
        # urllib3 waits backoff_factor * 2**(n-1) after n failures, and nothing after the
        # first one: count the first attempt as a failure so our first delay is ``first``.
        self._retry = Retry(total=None, backoff_factor=first / 2, backoff_max=max_delay).increment()

    def left(self) -> float:
        """Seconds until the deadline (``inf`` without a timeout; may be negative)."""
        return self.deadline - time.monotonic()

    def next_delay(self) -> float | None:
        """The next delay, cut to the time left; None when the time is up."""
        left = self.left()
        if left <= 0:
            return None
        self._retry = self._retry.increment()
        return min(self._retry.get_backoff_time(), left)

    def wait(self) -> bool:
        delay = self.next_delay()
        if delay is None:
            return False
        time.sleep(delay)
        return True

    async def async_wait(self) -> bool:
        delay = self.next_delay()
        if delay is None:
            return False
        await asyncio.sleep(delay)
        return True


def poll_until(check: Callable[[], T | None], backoff: Backoff) -> T | None:
    """Call ``check()`` until it returns something other than None; None when ``backoff``'s time is up.

    ``check`` is called once more at the deadline (the last delay is cut to end there).
    """
    while True:
        result = check()
        if result is not None:
            return result
        if not backoff.wait():
            return None


async def async_poll_until(check: Callable[[], Awaitable[T | None]], backoff: Backoff) -> T | None:
    """``poll_until`` for a coroutine ``check`` (sleeping without blocking the event loop)."""
    while True:
        result = await check()
        if result is not None:
            return result
        if not await backoff.async_wait():
            return None
