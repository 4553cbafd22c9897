"""Background generator: ordering, staleness bound, timeout, error propagation, shutdown.

The environment is a fake whose ``a_generate`` is a coroutine returning canned
``GenerateOutputs``; no server, no model.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.doubles.generation import FakeEnv, make_producer
from verifiers.errors import GenerationError
from verifiers.training.generation.generator import BatchGenerator
from verifiers.training.generation.producer import (
    GeneratedBatch,
    PromptStream,
    merge_outputs,
)
from verifiers.types import GenerateOutputs


class CountingProducer:
    """Records when each batch starts, relative to the trainer's progress."""

    def __init__(self, delay: float = 0.0, fail_at: int | None = None, hang_at: int | None = None):
        self.delay, self.fail_at, self.hang_at = delay, fail_at, hang_at
        self.started: list[tuple[int, int]] = []
        self.cancelled = threading.Event()

    async def produce(self, index, policy_version):
        self.started.append((index, policy_version))
        if index == self.fail_at:
            raise RuntimeError(f"boom at {index}")
        if index == self.hang_at:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        await asyncio.sleep(self.delay)
        return GeneratedBatch(
            index, policy_version, 1, GenerateOutputs([], [], [], [], [], [], []), None, 0.0
        )

    def state_dict(self):
        return {"started": len(self.started)}


def test_prompt_stream_is_a_pure_function_of_cursor():
    a = PromptStream(5, seed=3)
    first = a.take(12)
    assert sorted(first[:5]) == list(range(5)) and sorted(first[5:10]) == list(range(5))
    b = PromptStream(5, seed=3, cursor=7)
    assert b.take(5) == first[7:12]


def test_producer_repeats_prompts_in_groups_and_strips_state():
    env = FakeEnv()
    batch = asyncio.run(make_producer(env).produce(0, 0))
    assert batch.outputs.prompt == ["p00"] * 3 + ["p01"] * 3
    assert batch.outputs.answer == ["0"] * 3 + ["1"] * 3
    assert all("responses" not in s and "turn_tokens" not in s for s in batch.outputs.state)
    assert batch.outputs.state[0]["is_truncated"] is False


def test_seeded_producer_gives_each_group_member_its_own_seed():
    env = FakeEnv()
    producer = make_producer(env, seed=7)
    batch = asyncio.run(producer.produce(4, 0))
    seeds = [c["sampling_args"]["seed"] for c in env.calls]
    assert len(set(seeds)) == 3  # one call per slot in the group
    group0 = batch.outputs.completion[:3]
    assert len(set(group0)) == 3 and all(c.startswith("00p#") for c in group0)
    # Same (seed, index) -> same seeds: reproducible.
    env2 = FakeEnv()
    asyncio.run(make_producer(env2, seed=7).produce(4, 0))
    assert [c["sampling_args"]["seed"] for c in env2.calls] == seeds


def test_filtering_oversamples_to_keep_the_batch_full():
    env = FakeEnv()

    # Keep only groups whose prompt number is even: p00 kept, p01 dropped, then p02 kept.
    calls = []

    def keep_even(rewards, G):
        n = len(rewards) // G
        calls.append(n)
        return [not (len(calls) == 1 and g == 1) for g in range(n)]

    batch = asyncio.run(make_producer(env, keep_groups=keep_even).produce(0, 0))
    assert batch.outputs.prompt == ["p00"] * 3 + ["p02"] * 3
    assert calls == [2, 1]
    assert batch.metrics["filtered_groups_frac"] == pytest.approx(1 / 3)


def test_merge_outputs_reorders_and_fills_missing_metrics():
    a = GenerateOutputs(["a"], ["x"], [""], [{}], [{}], ["t"], [1.0], {"m": [5.0]})
    b = GenerateOutputs(["b"], ["y"], [""], [{}], [{}], ["t"], [2.0], {})
    out = merge_outputs([a, b], [(1, 0), (0, 0)])
    assert out.prompt == ["b", "a"] and out.reward == [2.0, 1.0] and out.metrics == {"m": [0.0, 5.0]}


def test_synchronous_mode_waits_for_training():
    producer = CountingProducer()
    gen = BatchGenerator(producer, num_batches_ahead=0, timeout=5).start()
    try:
        for i in range(3):
            batch = gen.get(i)
            assert batch.index == i and batch.policy_version == i
            time.sleep(0.05)
            # Nothing may start before batch i is trained.
            assert [s[0] for s in producer.started] == list(range(i + 1))
            gen.mark_trained(i + 1)
    finally:
        gen.stop()
    assert not gen.alive


def test_one_ahead_generates_next_batch_while_training_and_bounds_staleness():
    producer = CountingProducer()
    gen = BatchGenerator(producer, num_batches_ahead=1, timeout=5).start()
    try:
        for i in range(4):
            batch = gen.get(i)
            assert i - batch.policy_version <= 1
            deadline = time.monotonic() + 2
            while len(producer.started) < i + 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            # Batch i+1 started while batch i "trains", but not batch i+2.
            assert [s[0] for s in producer.started] == list(range(i + 2))
            gen.mark_trained(i + 1)
    finally:
        gen.stop()
    assert all(index - version <= 1 for index, version in producer.started)


def test_queue_size_limits_finished_batches():
    producer = CountingProducer()
    gen = BatchGenerator(producer, num_batches_ahead=3, max_queue_size=1, timeout=5).start()
    try:
        time.sleep(0.2)
        assert len(producer.started) == 1  # one finished batch waits; the queue is full
        gen.get(0)
        time.sleep(0.2)
        assert len(producer.started) == 2
    finally:
        gen.stop()


def test_error_in_thread_surfaces_with_cause():
    gen = BatchGenerator(CountingProducer(fail_at=1), num_batches_ahead=1, timeout=5).start()
    try:
        gen.get(0)
        gen.mark_trained(1)
        with pytest.raises(
            GenerationError, match="generating batch 1 failed: RuntimeError: boom at 1"
        ) as info:
            gen.get(1)
        assert isinstance(info.value.__cause__, RuntimeError)
    finally:
        gen.stop()


def test_real_producer_error_surfaces():
    gen = BatchGenerator(make_producer(FakeEnv(fail_on_call=0)), num_batches_ahead=0, timeout=5).start()
    try:
        with pytest.raises(GenerationError, match="server exploded"):
            gen.get(0)
    finally:
        gen.stop()


def test_timeout_raises_and_stop_cancels_in_flight_batch():
    producer = CountingProducer(hang_at=0)
    gen = BatchGenerator(producer, num_batches_ahead=0, timeout=0.3).start()
    t0 = time.monotonic()
    with pytest.raises(GenerationError, match="took longer than|not ready after"):
        gen.get(0)
    assert time.monotonic() - t0 < 3
    gen.stop(join_timeout=5)
    assert not gen.alive


def test_stop_while_waiting_is_clean_and_idempotent():
    producer = CountingProducer(hang_at=0)
    gen = BatchGenerator(producer, num_batches_ahead=0, timeout=60).start()
    time.sleep(0.1)
    gen.stop(join_timeout=5)
    gen.stop(join_timeout=5)
    assert producer.cancelled.is_set()
    assert not gen.alive
    assert not [t for t in threading.enumerate() if t.name == "vf-generator" and t.is_alive()]


def test_asking_too_far_ahead_is_an_error_not_a_hang():
    gen = BatchGenerator(CountingProducer(), num_batches_ahead=0, timeout=60).start()
    try:
        with pytest.raises(GenerationError, match="call mark_trained first"):
            gen.get(1)
    finally:
        gen.stop()


def test_state_dict_waits_for_in_flight_and_resume_continues():
    producer = CountingProducer(delay=0.2)
    gen = BatchGenerator(producer, num_batches_ahead=1, timeout=5).start()
    try:
        gen.get(0)
        deadline = time.monotonic() + 2
        while len(producer.started) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        gen.mark_trained(1)  # batch 1 is in flight (0.2 s); state_dict waits for it
        state = gen.state_dict()
    finally:
        gen.stop()
    assert [b.index for b in state["pending"]] == [1]
    assert state["trained"] == 1 and state["next"] == 2

    producer2 = CountingProducer()
    gen2 = BatchGenerator(
        producer2, num_batches_ahead=1, timeout=5, start_index=1, pending=state["pending"]
    ).start()
    try:
        assert gen2.get(1) is state["pending"][0]
        gen2.mark_trained(2)
        assert gen2.get(2).index == 2
        # Batch 1 was not regenerated; batch 2 came first (the thread may have begun batch 3 since).
        started = [s[0] for s in producer2.started]
        assert started[0] == 2 and 1 not in started
    finally:
        gen2.stop()


def test_run_executes_coroutines_in_the_generator_loop():
    gen = BatchGenerator(CountingProducer(), num_batches_ahead=0, timeout=5).start()
    try:

        async def which_thread():
            return threading.current_thread().name

        assert gen.run(which_thread()) == "vf-generator"
    finally:
        gen.stop()


def test_generator_wait_idle_waits_for_the_batch_in_flight():
    # The trainer calls it before every weight push: a batch is sampled from one policy only.
    from verifiers.training.generation.generator import BatchGenerator
    from verifiers.training.types import GeneratedBatch

    class SlowProducer:
        async def produce(self, index, policy_version):
            await asyncio.sleep(0.5)
            return GeneratedBatch(index, policy_version, 1, None, None, 0.5)

        def state_dict(self):
            return {}

    gen = BatchGenerator(SlowProducer(), num_batches_ahead=1, timeout=10).start()
    try:
        time.sleep(0.1)  # batch 0 is generating
        t0 = time.perf_counter()
        assert gen.wait_idle()
        assert time.perf_counter() - t0 > 0.2
        t0 = time.perf_counter()
        assert gen.get(0).index == 0 and time.perf_counter() - t0 < 0.1  # ready: nothing left to wait for
        time.sleep(0.1)  # batch 1 is generating now
        assert not gen.wait_idle(timeout=0.05)  # gives up after its timeout
    finally:
        gen.stop()
