"""``DaemonThreadPool``: the executor of sync tools and sync clients (verifiers/utils/async_utils.py).

The property it exists for: a call that never returns does not keep the process from exiting
(``ThreadPoolExecutor`` joins its workers at exit, so one stuck sync tool hung a finished run).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from verifiers.utils.async_utils import DaemonThreadPool, call_maybe_async


def test_results_and_exceptions_come_back_through_the_future():
    pool = DaemonThreadPool(2)
    assert pool.submit(lambda a, b=0: a + b, 2, b=3).result(5) == 5
    with pytest.raises(ZeroDivisionError):
        pool.submit(lambda: 1 / 0).result(5)
    pool.shutdown()


def test_workers_are_daemon_threads_reused_and_bounded():
    pool = DaemonThreadPool(3, thread_name_prefix="t-pool")
    gate = threading.Event()
    futures = [pool.submit(gate.wait, 5) for _ in range(5)]  # 5 blocking jobs, 3 workers
    time.sleep(0.2)
    assert len(pool._threads) == 3 and all(t.daemon for t in pool._threads)
    assert sum(f.running() for f in futures) == 3  # two wait in the queue
    gate.set()
    assert all(f.result(5) for f in futures)
    for _ in range(10):  # sequential calls reuse the idle workers
        pool.submit(int).result(5)
    assert len(pool._threads) == 3
    pool.shutdown(wait=True)
    assert not any(t.is_alive() for t in pool._threads)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(int)


def test_shutdown_can_cancel_queued_calls():
    pool = DaemonThreadPool(1)
    gate = threading.Event()
    running = pool.submit(gate.wait, 5)
    queued = pool.submit(int)
    time.sleep(0.1)
    gate.set()
    pool.shutdown(wait=True, cancel_futures=True)
    assert running.result(5) is True
    assert queued.cancelled() or queued.result(5) == 0


async def test_a_sync_call_on_the_loop_settles_without_blocking_it():
    pool = DaemonThreadPool(4)
    ticks = 0

    async def tick():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticker = asyncio.ensure_future(tick())
    assert await call_maybe_async(lambda: time.sleep(0.2) or "done", executor=pool, in_thread=True) == "done"
    ticker.cancel()
    assert ticks >= 5  # the loop ran while the sync call slept
    pool.shutdown()


@pytest.mark.parametrize("pool, exits", [("DaemonThreadPool", True), ("ThreadPoolExecutor", False)])
def test_a_call_that_never_returns_does_not_block_exit(pool, exits):
    # The second case shows the bug this pool fixes: the standard executor hangs the exit.
    code = textwrap.dedent(f"""
        import threading
        from concurrent.futures import ThreadPoolExecutor
        from verifiers.utils.async_utils import DaemonThreadPool
        {pool}(2).submit(threading.Event().wait)
        print("main done", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        out, _ = proc.communicate(timeout=20 if exits else 3)
        assert exits and proc.returncode == 0 and "main done" in out
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        assert not exits
