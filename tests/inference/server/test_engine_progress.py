"""vf-vllm's engine progress counters (inference/server/state.py ``EngineProgress``) over a fake
core client: what they count, and that counting lets the event loop's other tasks run."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from tests.doubles.engine_core import FakeCore, outputs
from verifiers.inference.server.state import EngineProgress, pending_requests


def test_engine_progress_counts_what_the_output_handler_receives():
    async def main():
        core = FakeCore()
        engine = SimpleNamespace(engine_core=core, output_processor=SimpleNamespace(request_states={"a": 1}))
        progress = EngineProgress()
        assert progress.hook(engine) and progress.counted
        for batch in (outputs(1, 1, 2, running=3), outputs(), outputs(5)):
            core.queue.put_nowait(batch)
            assert await engine.engine_core.get_output_async() is batch  # as the output handler calls it
        return progress, pending_requests(engine)

    progress, pending = asyncio.run(main())
    assert (progress.steps, progress.tokens, progress.running, progress.waiting, pending) == (3, 9, 3, 1, 1)
    assert not EngineProgress().hook(SimpleNamespace()) and pending_requests(SimpleNamespace()) is None


def test_a_backlog_of_engine_outputs_does_not_shut_out_the_other_tasks():
    """With outputs queued faster than they are handled, a request (here: a task that wants one
    loop turn) still runs between two batches, not after the whole backlog."""

    async def main():
        core = FakeCore()
        EngineProgress().hook(SimpleNamespace(engine_core=core))
        for _ in range(50):
            core.queue.put_nowait(outputs(1))
        handled = 0

        async def output_handler():  # vLLM's loop: receive, process, receive ... never yielding itself
            nonlocal handled
            while handled < 50:
                await core.get_output_async()
                handled += 1

        async def health_route():
            await asyncio.sleep(0)
            return handled

        handler = asyncio.create_task(output_handler())
        answered_at = await asyncio.create_task(health_route())
        await handler
        return answered_at

    assert asyncio.run(main()) <= 2  # before the change: 50, after every queued batch
