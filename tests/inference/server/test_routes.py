"""vf-vllm's own routes (verifiers/inference/server/routes.py): /vf/progress answers from its counters
alone, over a fake engine whose every other call would hang. Tier 2 (a component with a local double:
tests/doubles/engine_core.py)."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest

from tests.doubles.engine_core import FakeCore, outputs


def test_the_progress_route_answers_without_the_engine():
    """/vf/progress reads counters only: a fake engine whose every call would hang still gets an answer."""
    pytest.importorskip("fastapi")
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from verifiers.inference.server.routes import attach
    from verifiers.inference.server.state import Settings

    class StuckEngine:
        def __init__(self):
            self.engine_core = FakeCore()
            self.output_processor = SimpleNamespace(request_states={"r1": 0, "r2": 0})

        def __getattr__(self, name):  # any other engine call never returns
            async def never(*args, **kwargs):
                await asyncio.Event().wait()

            return never

    app = FastAPI()
    state = attach(app, StuckEngine(), Settings())
    state.progress.record(outputs(2, 3))
    answer = {}
    thread = threading.Thread(
        target=lambda: answer.update(TestClient(app).get("/vf/progress").json()), daemon=True
    )
    thread.start()
    thread.join(20)
    assert answer == {
        "steps": 1, "tokens": 5, "pending": 2, "running": None, "waiting": None, "paused": False,
        "engine_calls": 0, "engine_calls_done": 0, "counted": True,
    }  # fmt: skip


def test_the_progress_route_counts_vf_vllms_engine_calls_waiting_and_answered():
    """A weight update's call into a stopped engine core waits while generation is paused: the route
    says so (engine_calls), so that the hang watch (cli/rl/server_watch.py) can find it."""
    pytest.importorskip("fastapi")
    from fastapi import FastAPI

    from verifiers.inference.server.routes import attach, progress
    from verifiers.inference.server.state import RouteError, Settings

    engine = SimpleNamespace(engine_core=FakeCore(), output_processor=SimpleNamespace(request_states={}))
    state = attach(FastAPI(), engine, Settings())
    request = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(vf=state)))

    async def main():
        stuck = asyncio.create_task(state.call(asyncio.Event().wait(), "load", 60, "reloading"))
        await asyncio.sleep(0.05)
        during = await progress(request)
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        assert await state.call(asyncio.sleep(0, "ok"), "commit", 60, "committing") == "ok"
        with pytest.raises(RouteError):
            await state.call(asyncio.sleep(1), "commit", 0.01, "committing")  # a timeout: not an answer
        return during, await progress(request)

    during, after = asyncio.run(main())
    assert (during["engine_calls"], during["engine_calls_done"]) == (1, 0)
    assert (after["engine_calls"], after["engine_calls_done"]) == (0, 1)  # only the call that was answered
