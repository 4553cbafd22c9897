"""The one backoff helper (verifiers/utils/backoff.py): its delays, its deadline, polling."""

from __future__ import annotations

import asyncio
import time

import pytest

from verifiers.utils.backoff import Backoff, async_poll_until, poll_until


def test_delays_double_from_first_up_to_max():
    b = Backoff(first=0.5, max_delay=4.0)
    assert [b.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]


def test_equal_first_and_max_is_a_fixed_interval():
    b = Backoff(first=0.25, max_delay=0.25)
    assert [b.next_delay() for _ in range(3)] == [0.25, 0.25, 0.25]


def test_delays_stop_at_the_deadline():
    b = Backoff(first=10.0, max_delay=10.0, timeout=0.2)
    first = b.next_delay()
    assert first is not None and first <= 0.2  # cut to the time left
    time.sleep(0.25)
    assert b.next_delay() is None and not b.wait()


def test_bad_schedule_is_one_clear_error():
    with pytest.raises(ValueError, match="first <= max_delay"):
        Backoff(first=2.0, max_delay=1.0)


def test_poll_until_returns_the_first_answer_and_none_on_timeout():
    answers = iter([None, None, {"status": "ready"}])
    assert poll_until(lambda: next(answers), Backoff(first=0.01, max_delay=0.01, timeout=5)) == {
        "status": "ready"
    }
    calls = []
    t0 = time.monotonic()
    assert poll_until(lambda: calls.append(1), Backoff(first=0.05, max_delay=0.05, timeout=0.3)) is None
    assert 0.25 < time.monotonic() - t0 < 2 and len(calls) >= 3


def test_async_poll_until():
    answers = iter([None, 7])

    async def check():
        return next(answers)

    assert asyncio.run(async_poll_until(check, Backoff(first=0.01, max_delay=0.01, timeout=5))) == 7
