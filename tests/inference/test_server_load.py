"""vf-vllm under load: 1,000 concurrent rollouts with ``max_concurrent`` honoured, and locked weight routes.

One real server for the module (tiny random Llama, CPU), bound to a *non-loopback*
address of this machine without an admin token, so that:

* generation is open (no ``--api-key``) and takes 1,000 rollouts of a
  ``SingleTurnEnv`` through ``Environment.a_generate(max_concurrent=M)``; each
  rollout is tiny (a few prompt tokens, ``max_tokens=4``) so the run is bounded by
  request handling, not by the model;
* every weight/admin route refuses callers (403: bound off loopback with no
  token configured), also while the load runs, and serving is not disturbed.

In-flight requests are measured twice: on the client, by an ``httpx`` transport
that counts the chat requests between sending and the answer's headers (vLLM sends
them once the completion is done), and on the server, by polling vLLM's
``/metrics`` (``vllm:num_requests_running`` + ``vllm:num_requests_waiting``).
``vllm:request_success_total`` before and after proves none was dropped or sent twice.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from tests.doubles.vllm_server import serve_off_loopback

N_ROLLOUTS = 1000
MAX_CONCURRENT = 64  # the client's limit under test
SERVER_MAX_SEQS = 32  # below MAX_CONCURRENT: the server queues, so "waiting" is exercised too
MAX_TOKENS = 4

WEIGHT_ROUTES = {"/vf/weights/begin", "/vf/weights/load", "/vf/weights/commit", "/vf/lora/load"}


def admin_routes() -> list[tuple[str, str]]:
    """``(method, path)`` of every route server/routes.py puts behind the admin check (path parameters filled in)."""
    import re

    from verifiers.inference.server import routes as server

    routes = []
    for route in server.build_router().routes:
        if any(dep.dependency is server._admin for dep in route.dependencies):
            path = re.sub(r"\{[^}]+\}", "x1", route.path)
            routes += [(method, path) for method in sorted(route.methods)]
    assert {path for _, path in routes} >= WEIGHT_ROUTES, routes
    return routes


# -- measuring -------------------------------------------------------------------------------


def counting_transport():
    """An ``httpx`` transport that counts chat/completion requests in flight (and in total)."""
    import httpx

    class CountingTransport(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            # A pool larger than the load, so only max_concurrent can be what limits it.
            self.inner = httpx.AsyncHTTPTransport(limits=httpx.Limits(max_connections=2 * N_ROLLOUTS))
            self.in_flight = self.peak = self.total = 0

        async def handle_async_request(self, request):
            if not request.url.path.endswith("/completions"):
                return await self.inner.handle_async_request(request)
            self.in_flight += 1  # one event loop: no lock needed
            self.total += 1
            self.peak = max(self.peak, self.in_flight)
            try:
                return await self.inner.handle_async_request(request)
            finally:
                self.in_flight -= 1

        async def aclose(self) -> None:
            await self.inner.aclose()

    return CountingTransport()


def metric_values(text: str, name: str) -> float:
    """Sum of a Prometheus metric over its label sets (0.0 when absent)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


class MetricsPoller(threading.Thread):
    """Polls ``/metrics``; keeps the peak of running + waiting requests in the engine."""

    def __init__(self, url: str, interval: float = 0.1):
        super().__init__(daemon=True)
        import requests

        self.session, self.url, self.interval = requests.Session(), url + "/metrics", interval
        self.stop_event = threading.Event()
        self.peak_in_engine = self.peak_running = 0.0
        self.samples = 0

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                text = self.session.get(self.url, timeout=5).text
            except Exception:  # noqa: BLE001 - a missed sample is not a failure
                continue
            running = metric_values(text, "vllm:num_requests_running")
            waiting = metric_values(text, "vllm:num_requests_waiting")
            self.peak_running = max(self.peak_running, running)
            self.peak_in_engine = max(self.peak_in_engine, running + waiting)
            self.samples += 1
            self.stop_event.wait(self.interval)

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)
        self.session.close()


def successes(url: str) -> float:
    import requests

    return metric_values(requests.get(url + "/metrics", timeout=10).text, "vllm:request_success_total")


def load_server_model(url: str) -> str:
    import requests

    return requests.get(url + "/vf/health", timeout=10).json()["model"]


def refuse_status(url: str, method: str, path: str, token: str | None = None):
    import requests

    headers = {"X-VF-Admin-Token": token} if token else {}
    return requests.request(method, url + path, json={}, headers=headers, timeout=30)


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def load_server(tiny_model_dir, tmp_path_factory):
    """Bound off loopback with no admin token: every admin route refuses."""
    flags = ("--disable-uvicorn-access-log", "--max-num-seqs", str(SERVER_MAX_SEQS))
    tmp = tmp_path_factory.mktemp("vf-vllm-load")
    with serve_off_loopback(tiny_model_dir, tmp, *flags, max_model_len=256) as srv:
        yield srv


def make_env(n: int):
    from datasets import Dataset

    import verifiers as vf

    def answered(completion, **_) -> float:
        return 1.0 if completion and completion[-1].get("content") is not None else 0.0

    data = Dataset.from_dict(
        {"question": [f"Count to {i}" for i in range(n)], "answer": [str(i) for i in range(n)]}
    )
    return vf.SingleTurnEnv(dataset=data, rubric=vf.Rubric(funcs=[answered]))


# -- tests -----------------------------------------------------------------------------------


@pytest.mark.server
@pytest.mark.slow
def test_thousand_concurrent_rollouts_honour_max_concurrent(load_server, record_property):
    import httpx
    from openai import AsyncOpenAI

    model = load_server_model(load_server.url)
    env = make_env(N_ROLLOUTS)
    inputs = env.get_dataset()
    before = successes(load_server.url)
    transport = counting_transport()
    refusals: list[int] = []

    def knock_while_loaded(stop: threading.Event) -> None:
        """Off-loopback callers without a token, during the load: always refused."""
        while not stop.is_set():
            for method, path in (("POST", "/vf/weights/begin"), ("POST", "/vf/pause")):
                refusals.append(refuse_status(load_server.url, method, path).status_code)
            stop.wait(0.2)

    async def run():
        http = httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(300.0))
        client = AsyncOpenAI(
            base_url=load_server.url + "/v1", api_key="EMPTY", max_retries=0, http_client=http
        )
        try:
            return await env.a_generate(
                inputs,
                client,
                model,
                sampling_args={"max_tokens": MAX_TOKENS, "temperature": 1.0},
                max_concurrent=MAX_CONCURRENT,
            )
        finally:
            await client.close()

    poller = MetricsPoller(load_server.url)
    stop_knocking = threading.Event()
    knocker = threading.Thread(target=knock_while_loaded, args=(stop_knocking,), daemon=True)
    poller.start()
    knocker.start()
    t0 = time.perf_counter()
    try:
        results = asyncio.run(run())
    finally:
        elapsed = time.perf_counter() - t0
        stop_knocking.set()
        knocker.join(30)
        poller.stop()
    after = successes(load_server.url)

    summary = (
        f"{N_ROLLOUTS} rollouts in {elapsed:.1f}s ({N_ROLLOUTS / elapsed:.0f}/s); max_concurrent={MAX_CONCURRENT}; "
        f"client peak in flight={transport.peak}; server peak running+waiting={poller.peak_in_engine:.0f} "
        f"(running {poller.peak_running:.0f}, --max-num-seqs {SERVER_MAX_SEQS}, {poller.samples} samples); "
        f"requests sent={transport.total}; server successes={after - before:.0f}; "
        f"refused admin calls during load={len(refusals)}"
    )
    print("\n" + summary)
    record_property("load_summary", summary)

    # None dropped, no errors, in input order.
    errors = [s["error"] for s in results.state if s.get("error")]
    assert not errors, f"{len(errors)} rollouts failed, first: {errors[0]}"
    assert len(results.state) == N_ROLLOUTS
    assert [s["answer"] for s in results.state] == [str(i) for i in range(N_ROLLOUTS)]
    for state in results.state:
        (turn,) = state["turn_tokens"]
        assert 1 <= len(turn.completion_ids) <= MAX_TOKENS and turn.finish_reason in ("length", "stop")
        assert len(turn.completion_logprobs) == len(turn.completion_ids) and turn.prompt_ids
    assert results.reward == [1.0] * N_ROLLOUTS
    # Exactly one request per rollout reached the server and succeeded (no retries, no drops).
    assert transport.total == N_ROLLOUTS, summary
    assert after - before == N_ROLLOUTS, summary

    # max_concurrent honoured, and actually reached (it, not something else, was the limit).
    assert transport.peak <= MAX_CONCURRENT, summary
    assert transport.peak >= MAX_CONCURRENT * 3 // 4, summary
    assert poller.samples > 0, "no /metrics sample was read"
    assert 0 < poller.peak_in_engine <= MAX_CONCURRENT, summary
    assert poller.peak_running <= SERVER_MAX_SEQS, summary

    assert elapsed < 300, summary  # ~20-50 s on 2 shared CPU cores

    # Admin calls during the load were all refused, and none paused generation.
    assert refusals and set(refusals) == {403}, refusals
    health = httpx.get(load_server.url + "/vf/health", timeout=10).json()
    assert not health["paused"] and not health["update_in_progress"] and health["weight_version"] == 0


@pytest.mark.server
@pytest.mark.slow  # beside the load test, on its server; test_client checks the same refusals in the default tier
def test_weight_routes_refuse_off_loopback_callers_without_token(load_server):
    import requests

    from verifiers.errors import WeightSyncError
    from verifiers.inference.client.vllm_client import VLLMClient

    health = requests.get(load_server.url + "/vf/health", timeout=10).json()
    assert health["admin_token_required"] is True and health["status"] == "ready"
    assert requests.get(load_server.url + "/vf/world_size", timeout=10).status_code == 200
    for method, path in admin_routes():
        for token in (None, "guessed-token"):  # with none configured, no token opens them
            r = refuse_status(load_server.url, method, path, token)
            assert r.status_code == 403, (method, path, token, r.status_code, r.text[:200])
            error = r.json()["error"]
            assert error["stage"] == "auth" and "--admin-token" in error["message"], (path, error)
            assert "\n" not in error["message"]

    # Through the client: a typed one-line error naming the stage and the fix.
    import torch

    client = VLLMClient(load_server.url, max_retries=0)
    try:
        with pytest.raises(WeightSyncError) as info:
            client.update_weights({"model.norm.weight": torch.ones(64)}, transport_name="http")
        err = info.value
        assert err.stage == "auth" and err.status == 403 and "\n" not in str(err)
        assert "admin_token" in str(err) and "--admin-token" in str(err)
    finally:
        client.close()

    # Nothing was paused or left half-open; generation goes on; the start-up warning was logged.
    health = requests.get(load_server.url + "/vf/health", timeout=10).json()
    assert not health["paused"] and not health["update_in_progress"] and health["weight_version"] == 0
    out = requests.post(
        load_server.url + "/v1/completions",
        json={"model": health["model"], "prompt": "Hello", "max_tokens": MAX_TOKENS},
        timeout=60,
    )
    assert out.status_code == 200 and out.json()["choices"][0]["text"] is not None
    assert "without --admin-token" in load_server.tail(200_000)
