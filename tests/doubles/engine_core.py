"""vLLM's async engine core client, as far as vLLM's output handler uses it, and its outputs.

Stands in for ``AsyncMPClient`` (``get_output_async``) and ``EngineCoreOutputs``: what
vf-vllm's progress counters (inference/server/state.py ``EngineProgress``) wrap and read. Used by
the default tier's tests of those counters (tests/inference/server/test_engine_progress.py) and of
the ``/vf/progress`` route (tests/inference/server/test_routes.py).
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace


class FakeCore:
    """Batches put on ``queue`` come out of ``get_output_async``: like vLLM's, a call on a
    non-empty queue returns without suspending."""

    def __init__(self):
        self.queue: asyncio.Queue = asyncio.Queue()

    async def get_output_async(self):
        return await self.queue.get()


def outputs(*token_counts: int, running: int | None = None):
    """One ``EngineCoreOutputs``: a request per count, with that many new tokens; stats when ``running``."""
    stats = None if running is None else SimpleNamespace(num_running_reqs=running, num_waiting_reqs=1)
    return SimpleNamespace(
        outputs=[SimpleNamespace(new_token_ids=[7] * n) for n in token_counts], scheduler_stats=stats
    )
