"""A real vf-vllm's progress counters (``GET /vf/progress``) and vf-rl's hang watch on them.

One server (tiny model, CPU). While requests generate, the counters advance and both
``/health`` and ``/vf/progress`` answer quickly (their worst latency under that load is
printed). Then the engine core process is stopped (SIGSTOP) with requests pending: the API
process still answers both routes, the step counter stops, and the watch
(cli/rl/server_watch.py) says "no progress" within its bound. SIGCONT lets the requests finish.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest
import requests

from tests.doubles.vllm_server import serve
from verifiers.cli.rl.server_watch import ServerWatch, probe

PROGRESS_BOUND_S = 10.0  # short for the test; vf-rl's default is far longer (docs/vf-rl.md)
N_REQUESTS = 8
MAX_TOKENS = (
    2000  # long enough to still run when the engine is stopped, seconds in (the model's 2048 positions)
)


def timed_get(url: str) -> tuple[float, requests.Response]:
    t0 = time.monotonic()
    resp = requests.get(url, timeout=30)
    return time.monotonic() - t0, resp


def engine_core_of(pid: int):
    import psutil

    found = [
        p
        for p in psutil.Process(pid).children(recursive=True)
        if "EngineCore" in " ".join(p.cmdline() + [p.name()])
    ]
    assert len(found) == 1, [
        (p.pid, p.name(), p.cmdline()) for p in psutil.Process(pid).children(recursive=True)
    ]
    return found[0]


@pytest.mark.server
@pytest.mark.slow
def test_progress_counters_advance_then_an_engine_stopped_mid_generation_is_found(tiny_model_dir, tmp_path):
    pytest.importorskip("psutil")
    with (
        serve(tiny_model_dir, tmp_path, "--max-num-seqs", str(N_REQUESTS), max_model_len=2048) as server,
        contextlib.closing(server.client(request_timeout=600)) as client,
    ):
        model = client.health()["model"]
        errors: list[BaseException] = []

        def generate() -> None:
            try:
                openai.completions.create(
                    model=model, prompt="The quick brown fox", max_tokens=MAX_TOKENS, temperature=1.0,
                    extra_body={"ignore_eos": True},
                )  # fmt: skip
            except BaseException as e:  # noqa: BLE001 - reported by the test below
                errors.append(e)

        before = requests.get(server.url + "/vf/progress", timeout=10).json()
        assert before["counted"] is True and before["pending"] == 0 and not before["paused"]
        openai = client.sync_openai  # made once here, not raced for by the threads
        # All requests reach the engine before any generates: with generation running, a
        # starved API process (CI runs this tier beside the default suite on 2 cores) took
        # new requests only after the first had finished, so 8 were never pending at once.
        assert requests.post(server.url + "/vf/pause?mode=keep", timeout=30).json() == {"paused": True}
        workers = [threading.Thread(target=generate, daemon=True) for _ in range(N_REQUESTS)]
        for w in workers:
            w.start()
        deadline = time.monotonic() + 120  # bounds a wait (about a second when quiet)
        while (now := requests.get(server.url + "/vf/progress", timeout=30).json())["pending"] < N_REQUESTS:
            assert time.monotonic() < deadline and not errors, (errors, now)
            time.sleep(0.2)
        assert now["paused"] and now["tokens"] == before["tokens"], now  # nothing generated while paused
        assert requests.post(server.url + "/vf/resume", timeout=30).json() == {"paused": False}
        # Under load: the counters move, and both routes answer (their worst latency is printed).
        latency = {"/health": 0.0, "/vf/progress": 0.0}
        seen = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline or len(seen) < 3:  # (one answer can take seconds under load)
            for route in latency:
                took, resp = timed_get(server.url + route)
                assert resp.status_code == 200, (route, resp.text)
                latency[route] = max(latency[route], took)
                if route == "/vf/progress":
                    seen.append(resp.json())
            time.sleep(0.2)
        print(f"worst latency under {N_REQUESTS} generating requests: {latency}")
        busy = [s for s in seen if s["pending"] > 0]
        assert busy and busy[-1]["steps"] > busy[0]["steps"] and busy[-1]["tokens"] > busy[0]["tokens"], seen
        assert busy[-1]["steps"] > before["steps"] and busy[-1]["running"] is not None, seen
        assert all(w.is_alive() for w in workers), "the requests ended before the engine was stopped"

        core = engine_core_of(server.proc.pid)
        core.send_signal(signal.SIGSTOP)
        try:
            stopped_at = time.monotonic()
            watch = ServerWatch(answer_timeout_s=30, progress_timeout_s=PROGRESS_BOUND_S, now=stopped_at)
            hang = None
            while hang is None and time.monotonic() - stopped_at < PROGRESS_BOUND_S + 20:
                result = probe(server.url, timeout=5)
                assert result.answered and result.progress is not None  # the API process answers
                hang = watch.observe(result, time.monotonic())
                took, resp = timed_get(server.url + "/health")  # vLLM's own: needs no engine either
                assert resp.status_code == 200 and took < 5
                time.sleep(1.0)
            took = time.monotonic() - stopped_at
            assert hang is not None and hang.kind == "no_progress", "not found"
            assert hang.pending == N_REQUESTS and PROGRESS_BOUND_S <= took <= PROGRESS_BOUND_S + 5, (
                hang,
                took,
            )
            print(
                f"engine core stopped: found after {took:.1f} s: {hang.describe(server.proc.pid, 'at now')}"
            )
        finally:
            os.kill(core.pid, signal.SIGCONT)
        for w in workers:
            w.join(300)
        assert not errors, errors
        after = requests.get(server.url + "/vf/progress", timeout=10).json()
        # (the batch the output handler awaited when the counting began is not counted)
        assert after["pending"] == 0 and after["tokens"] >= N_REQUESTS * (MAX_TOKENS - 1), after
