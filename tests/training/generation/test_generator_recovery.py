"""Outage recovery (verifiers/inference/client/recovery.py) through the generator, without a server.

A fake server that is down for a few pings, a producer whose first attempt fails
with ``ServerUnreachableError``: the trainer side sees a typed ``Resync``, hands
the generator the model name with ``set_model``, reports the sync, and gets the
batch, generated again after the outage.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from verifiers.errors import GenerationError, ServerError, ServerUnreachableError, WeightSyncError
from verifiers.inference.client.recovery import sync_through_outages
from verifiers.training.generation.generator import BatchGenerator
from verifiers.training.types import GeneratedBatch, Resync


class FlakyServer:
    """Down for ``down`` pings, then ready (having lost the synced weights)."""

    def __init__(self, down: int = 2):
        self.down, self.pings = down, 0

    def ping(self):
        self.pings += 1
        return {"status": "ready"} if self.pings > self.down else None

    def lost_weights(self, health):
        return True


class LosesServerOnce:
    """Batch 0's first attempt finds the server gone; records the model each attempt used."""

    def __init__(self):
        self.model = "base"
        self.cursor = 0
        self.attempts: list[tuple[int, str, int]] = []

    async def produce(self, index, policy_version):
        self.attempts.append((index, self.model, self.cursor))
        self.cursor += 2  # reads two prompts
        if len(self.attempts) == 1:
            await asyncio.sleep(0.05)
            raise ServerUnreachableError("connection refused", url="http://127.0.0.1:1")
        return GeneratedBatch(index, policy_version, 1, None, None, 0.0)

    def state_dict(self):
        return {"cursor": self.cursor}

    def load_state_dict(self, state):
        self.cursor = state["cursor"]


def get_or_resync(gen: BatchGenerator, index: int, timeout: float = 10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = gen.get(index, resync=True)
        if not isinstance(got, Resync):
            return got
        assert got == Resync(index)
        state = gen.state_dict()  # the server is away: batch 0 is saved as never started
        assert state["next"] == 0 and state["producer"] == {"cursor": 0} and state["pending"] == []
        gen.set_model("vf-lora")  # what the trainer does after it pushed the weights again
        gen.resynced()
    raise AssertionError("no batch")


def test_outage_asks_for_a_resync_then_generates_the_batch_again():
    producer, server = LosesServerOnce(), FlakyServer(down=2)
    gen = BatchGenerator(producer, num_batches_ahead=0, timeout=10, server=server, server_timeout=10).start()
    try:
        batch = get_or_resync(gen, 0)
    finally:
        gen.stop()
    assert batch.index == 0 and batch.metrics["errors/server_restarts"] == 1.0
    # The retry took the same prompts (rewound cursor) and the model name set by the trainer.
    assert producer.attempts == [(0, "base", 0), (0, "vf-lora", 0)]
    assert server.pings == 3


def test_server_that_never_comes_back_is_an_error():
    producer = LosesServerOnce()
    gen = BatchGenerator(
        producer, num_batches_ahead=0, timeout=10, server=FlakyServer(down=10**6), server_timeout=0.5
    ).start()
    try:
        with pytest.raises(GenerationError, match="did not come back within"):
            gen.get(0, resync=True)
    finally:
        gen.stop()


def test_without_a_server_an_outage_is_an_error():
    gen = BatchGenerator(LosesServerOnce(), num_batches_ahead=0, timeout=10).start()
    try:
        with pytest.raises(GenerationError, match="ServerUnreachableError"):
            gen.get(0)
    finally:
        gen.stop()


class Client:
    def __init__(self):
        self.waits = 0

    def wait_for_server(self, timeout):
        self.waits += 1
        return {"status": "ready"}


def test_sync_through_outages_waits_and_pushes_again():
    client, outages, calls = Client(), [], []

    def sync():
        calls.append(1)
        if len(calls) == 1:
            raise WeightSyncError("connect", "nothing answered")
        return "synced"

    assert sync_through_outages(sync, client, 5.0, lambda: outages.append(1)) == "synced"
    assert client.waits == 1 and outages == [1] and len(calls) == 2


def test_sync_through_outages_raises_other_failures():
    def sync():
        raise ServerError("HTTP 500", status=500)

    with pytest.raises(ServerError, match="HTTP 500"):
        sync_through_outages(sync, Client(), 5.0, lambda: None)
