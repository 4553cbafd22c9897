"""A tiny local OpenAI-compatible HTTP server for tests (no model, no network).

Stands in for vf-vllm / any OpenAI endpoint an environment, vf-eval or the trainer talks to.
Used by the default tier (envs, cli, compat, trainer and docs tests), by the drivers the
launched runs start (tests/drivers/), and by the parity tier's 0.1.x oracle (loaded by path).

It speaks just enough of the OpenAI / vLLM wire format for environments, the
``vf-eval`` CLI and token assembly to be tested end to end with the real
``openai`` client.

API
---
``FakeServer(reply=None, *, token_data=True, reject_token_params=False,
delay=0.0, max_context=None, model="fake-model")``

- ``reply(request: dict) -> str | dict``: called for every chat/completion
  request with the parsed JSON body (``"messages"`` for chat, ``"prompt"`` for
  completions). Return the assistant text, or a dict with any of
  ``content`` (str), ``tool_calls`` (list of ``{"name", "arguments": dict | str,
  "id"?}``), ``finish_reason`` (overrides the computed one), ``delay``
  (seconds to sleep before answering), or ``status`` + ``error`` to answer
  with an HTTP error instead. Default: ``"echo: <last user/tool message>"``.
  The function runs on server threads, so keep shared state thread-safe.
- ``token_data``: when the request asks for it (vLLM extensions
  ``return_token_ids`` / ``return_tokens_as_token_ids`` / ``logprobs``), add
  ``prompt_token_ids`` (chat: on the response; completions: on the choice),
  ``choice.token_ids`` and per-token logprobs whose tokens read ``token_id:N``.
- ``reject_token_params``: answer 400 like a plain OpenAI endpoint whenever a
  request carries ``return_token_ids`` or ``return_tokens_as_token_ids``.
- ``delay``: seconds every request sleeps (makes concurrency observable).
- ``max_context``: if the prompt has more tokens than this, answer 400 with
  vLLM's "maximum context length" message.

Tokenizer: one token per UTF-8 byte (id = byte value). A chat prompt is
rendered as ``<|role|>content<|end|>`` per message (assistant tool calls as
``<tool_call>{json}</tool_call>`` after the content) plus a trailing
``<|assistant|>``; a sampled assistant turn is ``content + tool calls +
<|end|>`` (the end marker only when it stopped naturally). So turn ``i+1``'s
prompt ids start with turn ``i``'s prompt + completion ids, like a real chat
template that does not rewrite history. ``max_tokens`` /
``max_completion_tokens`` cut the sampled bytes and set
``finish_reason="length"`` (tool calls are dropped when cut).

Attributes: ``url`` (``http://127.0.0.1:PORT/v1``), ``requests`` (list of
``(path, body)``), ``max_in_flight`` (peak concurrent chat/completion
requests), ``client(sync=False, **kw)`` (an ``AsyncOpenAI`` / ``OpenAI``
client with ``max_retries=0``), ``start()`` / ``stop()``, and use as a
context manager. ``fake_server(**kw)`` is the same as a ``with`` helper,
``make_client(url, sync=False)`` builds a client for any URL, and
``unused_url()`` gives a loopback URL where nothing listens.

Example::

    with fake_server(reply=lambda req: "42") as server:
        client = server.client()
        ...
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

END = "<|end|>"
TOKEN_PARAMS = ("return_token_ids", "return_tokens_as_token_ids")

Reply = Callable[[dict], "str | dict"]


def tokenize(text: str) -> list[int]:
    """The fake tokenizer: one token per UTF-8 byte."""
    return list(text.encode("utf-8"))


def detokenize(ids: list[int]) -> str:
    return bytes(ids).decode("utf-8", errors="ignore")


def logprob_of(token_id: int) -> float:
    """A deterministic fake sampling log-prob for a token."""
    return -((token_id % 10) + 1) / 10.0


def render_tool_calls(tool_calls: list[dict] | None) -> str:
    parts = []
    for tc in tool_calls or []:
        fn = tc.get("function", {})
        parts.append(
            f"<tool_call>{json.dumps({'name': fn.get('name'), 'arguments': fn.get('arguments')})}</tool_call>"
        )
    return "".join(parts)


def render_chat(messages: list[dict]) -> str:
    """The fake chat template (see module docstring)."""
    out = []
    for m in messages:
        content = m.get("content") or ""
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        out.append(f"<|{m.get('role')}|>{content}{render_tool_calls(m.get('tool_calls'))}{END}")
    return "".join(out) + "<|assistant|>"


def reverse_text_reply(request: dict) -> str:
    """A perfect reverse-text model: the last user message reversed, in the environment's tags."""
    text = next(m["content"] for m in reversed(request["messages"]) if m["role"] == "user")
    return f"<reversed_text>{text[::-1]}</reversed_text>"


def default_reply(request: dict) -> str:
    if "messages" in request:
        for m in reversed(request["messages"]):
            if m.get("role") in ("user", "tool"):
                return f"echo: {m.get('content')}"
        return "echo: "
    return f"echo: {str(request.get('prompt', ''))[-20:]}"


class FakeServer:
    """See the module docstring."""

    def __init__(
        self,
        reply: Reply | None = None,
        *,
        token_data: bool = True,
        reject_token_params: bool = False,
        delay: float = 0.0,
        max_context: int | None = None,
        model: str = "fake-model",
    ):
        self.reply = reply or default_reply
        self.token_data = token_data
        self.reject_token_params = reject_token_params
        self.delay = delay
        self.max_context = max_context
        self.model = model
        self.requests: list[tuple[str, dict]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None  # kept after stop() so tests can still name the URL

    # -- lifecycle -------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._port is not None, "server not started"
        return f"http://127.0.0.1:{self._port}/v1"

    def start(self) -> FakeServer:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._httpd = _HTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True  # keep-alive threads must not block shutdown
        self._port = self._httpd.server_address[1]
        # A short poll interval: shutdown() waits up to one interval, and tests start many servers.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True, name="fakeserver"
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def client(self, sync: bool = False, **kw: Any):
        """An OpenAI client for this server (no retries, so failures are fast)."""
        return make_client(self.url, sync=sync, **kw)

    # -- request handling -------------------------------------------------
    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _exit(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def handle(self, path: str, body: dict) -> tuple[int, dict]:
        with self._lock:
            self.requests.append((path, body))
        if path.endswith("/models"):
            return 200, {
                "object": "list",
                "data": [{"id": self.model, "object": "model", "owned_by": "fake"}],
            }
        chat = path.endswith("/chat/completions")
        if not chat and not path.endswith("/completions"):
            return 404, _error(f"no route {path}", "not_found_error")
        if self.reject_token_params:
            bad = [p for p in TOKEN_PARAMS if p in body]
            if bad:
                return 400, _error(f"Unrecognized request argument supplied: {bad[0]}", param=bad[0])
        self._enter()
        try:
            if self.delay:
                time.sleep(self.delay)
            return self._complete(body, chat)
        finally:
            self._exit()

    def _complete(self, body: dict, chat: bool) -> tuple[int, dict]:
        prompt_text = render_chat(body.get("messages", [])) if chat else str(body.get("prompt", ""))
        prompt_ids = tokenize(prompt_text)
        if self.max_context is not None and len(prompt_ids) > self.max_context:
            msg = (
                f"This model's maximum context length is {self.max_context} tokens. However, you "
                f"requested {len(prompt_ids)} tokens in the messages. Please reduce the length."
            )
            return 400, _error(msg)
        out = self.reply(body)
        out = {"content": out} if isinstance(out, str) else dict(out)
        if out.get("delay"):
            time.sleep(out["delay"])
        if "status" in out:
            return int(out["status"]), _error(str(out.get("error", "fake error")))
        content = out.get("content") or ""
        tool_calls = [_tool_call(tc) for tc in out.get("tool_calls") or []] if chat else []
        sampled = tokenize(content + render_tool_calls(tool_calls) + (END if chat else ""))
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        finish = "tool_calls" if tool_calls else "stop"
        if limit is not None and len(sampled) > int(limit):
            sampled = sampled[: int(limit)]
            content, tool_calls, finish = detokenize(sampled), [], "length"
        finish = out.get("finish_reason", finish)
        want_ids = self.token_data and bool(body.get("return_token_ids"))
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        want_lp = self.token_data and bool(body.get("logprobs"))
        tok = (lambda t: f"token_id:{t}") if as_ids else (lambda t: detokenize([t]))
        usage = {
            "prompt_tokens": len(prompt_ids),
            "completion_tokens": len(sampled),
            "total_tokens": len(prompt_ids) + len(sampled),
        }
        choice: dict[str, Any] = {"index": 0, "finish_reason": finish, "logprobs": None}
        if chat:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if tool_calls:
                message["tool_calls"] = tool_calls
            choice["message"] = message
            if want_lp:
                choice["logprobs"] = {
                    "content": [
                        {"token": tok(t), "logprob": logprob_of(t), "bytes": [t], "top_logprobs": []}
                        for t in sampled
                    ]
                }
        else:
            choice["text"] = content
            if want_lp:
                choice["logprobs"] = {
                    "tokens": [tok(t) for t in sampled],
                    "token_logprobs": [logprob_of(t) for t in sampled],
                    "text_offset": list(range(len(sampled))),
                    "top_logprobs": None,
                }
        if want_ids:
            choice["token_ids"] = sampled
            if not chat:
                choice["prompt_token_ids"] = prompt_ids
        resp: dict[str, Any] = {
            "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": body.get("model", self.model),
            "choices": [choice],
            "usage": usage,
        }
        if chat and want_ids:
            resp["prompt_token_ids"] = prompt_ids
        return 200, resp


def _tool_call(tc: dict) -> dict:
    args = tc.get("arguments", {})
    return {
        "id": tc.get("id") or f"call_{uuid.uuid4().hex[:8]}",
        "type": "function",
        "function": {"name": tc["name"], "arguments": args if isinstance(args, str) else json.dumps(args)},
    }


def _error(message: str, type_: str = "invalid_request_error", param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": None}}


class _HTTPServer(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that went away mid-reply (an interrupted run, a cancelled request) is what a
        # real server shrugs off; socketserver printed its traceback into the test output.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, like a real server behind httpx
    fake: FakeServer

    def log_message(self, *args: Any) -> None:  # keep test output clean
        pass

    def _send(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        status, payload = self.fake.handle(self.path, {})
        self._send(status, payload)

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send(400, _error("request body is not JSON"))
            return
        try:
            status, payload = self.fake.handle(self.path, body)
        except Exception as e:  # a bug in a test's reply function: answer 500, don't hang the client
            status, payload = (
                500,
                _error(f"fake server reply failed: {type(e).__name__}: {e}", "server_error"),
            )
        self._send(status, payload)


@contextmanager
def fake_server(reply: Reply | None = None, **kw: Any) -> Iterator[FakeServer]:
    """``with fake_server(...) as server:`` starts a :class:`FakeServer` and stops it after."""
    server = FakeServer(reply, **kw).start()
    try:
        yield server
    finally:
        server.stop()


_SSL_CONTEXT = None


def make_client(base_url: str, sync: bool = False, **kw: Any):
    """An ``AsyncOpenAI`` (or, with ``sync=True``, ``OpenAI``) client for ``base_url`` with ``max_retries=0``.

    Reuses one SSL context: building one per client costs ~0.1 s, which adds up over a test suite.
    """
    import ssl

    import openai

    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = ssl.create_default_context()
    kw.setdefault("max_retries", 0)
    kw.setdefault("api_key", "fake")
    if "http_client" not in kw:
        http_cls = openai.DefaultHttpxClient if sync else openai.DefaultAsyncHttpxClient
        kw["http_client"] = http_cls(verify=_SSL_CONTEXT)
    cls = openai.OpenAI if sync else openai.AsyncOpenAI
    return cls(base_url=base_url, **kw)


def unused_url() -> str:
    """A loopback ``/v1`` URL where nothing listens (for connection-failure tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"
