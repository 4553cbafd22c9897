"""``VLLMClient``: the trainer's handle on a vf-vllm server, and the OpenAI client rollouts use.

Generation goes through an ``openai.AsyncOpenAI`` the client holds:
``client.chat.completions.create(...)``, ``client.completions.create(...)``,
``client.models``, ``client.base_url`` (the ``/v1`` URL) behave as on that
client, and any other attribute is looked up on it. ``client.sync_openai`` is a
blocking ``openai.OpenAI`` for the same server. Each event loop gets its own ``AsyncOpenAI``
(pooled connections belong to the loop that opened them: "Event loop is closed" otherwise).

Trainer operations (blocking; see verifiers/inference/server/routes.py for the routes):

* ``wait_until_ready(timeout)``: polls ``/vf/health`` until the server answers,
  within one total timeout. Nothing ever answered -> ``ServerUnreachableError``;
  it answered but never became ready -> ``ServerTimeoutError``; both name the URL.
* ``update_weights(named_tensors, version=None)``: the weight-update handshake:
  ``begin`` (the server validates names/shapes and pauses generation) -> data
  (``shm``: one safetensors file under /dev/shm; ``http``: the same bytes in the
  body; ``nccl``: a packed broadcast on GPU) -> ``commit`` (the server confirms the
  version, resets the prefix cache, resumes). Returns the committed version.
* ``update_lora(adapter, name=...)``: hot-swaps a LoRA adapter (a PEFT model, a
  state dict plus ``config``, or an adapter folder); returns the name to pass as
  ``model`` in requests (also kept in ``client.lora_name``).
* ``reset_prefix_cache()``, ``pause(mode)``, ``resume()``, ``health()``, ``world_size()``.
* After an outage: ``ping()`` (one health check, no retries), ``wait_for_server(timeout)``
  (polls with exponential backoff until the server is ready again) and
  ``lost_weights(health)`` (the server restarted: it no longer holds what this
  client pushed). :func:`is_server_lost` tells an outage from other failures.

Errors: every failure is a typed :class:`~verifiers.errors.ServerError` carrying
the URL, HTTP status and body; weight and adapter updates raise
:class:`~verifiers.errors.WeightSyncError` whose ``stage`` names the step that
failed (``begin``, ``validate``, ``pause``, ``write``, ``load``, ``transfer``,
``commit``, ``handshake``, ``lora``, ``auth``, ``connect``, ``timeout``). Calls that are safe to repeat are
retried on connection failures and 502/503/504; the others only when the
connection was refused (nothing reached the server). Every call has a timeout.
Every wait between attempts is a ``Backoff`` (verifiers/utils/backoff.py); the
NCCL side of ``update_weights`` lives in nccl_update.py.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
import uuid
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import requests

from verifiers.errors import (
    ServerError,
    ServerTimeoutError,
    ServerUnreachableError,
    WeightSyncError,
)
from verifiers.inference.client import adapters, transport
from verifiers.inference.safetensors_writer import safetensors_bytes
from verifiers.inference.wire import ADMIN_HEADER
from verifiers.utils import owned_files
from verifiers.utils.backoff import Backoff, poll_until

logger = logging.getLogger("verifiers.inference.client.vllm_client")

_RETRY_STATUS = {502, 503, 504}


class VLLMClient:
    """Client of a vf-vllm server at ``base_url`` (``http://host:port``, with or without ``/v1``)."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        api_key: str | None = None,
        admin_token: str | None = None,
        request_timeout: float = 60.0,
        update_timeout: float = 300.0,
        max_retries: int = 3,
        openai_kwargs: dict[str, Any] | None = None,
        group_port: int | None = None,
        connection_timeout: float | None = None,
    ):
        import os

        url = (base_url or f"http://{host}:{port}").rstrip("/")
        self.server_url = url[: -len("/v1")] if url.endswith("/v1") else url
        self.api_key = api_key or os.environ.get("VLLM_API_KEY") or "EMPTY"
        self.admin_token = admin_token or os.environ.get("VF_ADMIN_TOKEN")
        self.request_timeout = request_timeout
        self.update_timeout = update_timeout
        self.max_retries = max_retries
        self.version = 0  # last weight version this client committed
        self.lora_name: str | None = None
        self._openai_kwargs = {"max_retries": max_retries, **(openai_kwargs or {})}
        # One AsyncOpenAI per event loop (weak keys: a closed, dropped loop frees its client).
        self._openai_by_loop: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._sync_openai: Any = None
        self._session = requests.Session()
        self._shm_visible: bool | None = None  # asked once per client: same host, same /dev/shm
        self._device: str | None = None
        self._staging = transport.StagingFile()  # reused /dev/shm file of the shm transport
        self._nccl: Any = None  # nccl_update.NcclChannel once init_nccl() ran
        # 0.1.4-0.1.6: the port of the NCCL group with the server (when the sync goes over NCCL);
        # None picks a free one.
        self.group_port = group_port
        if connection_timeout is not None:  # 0.1.4-0.1.6: wait for the server before returning
            self.wait_until_ready(timeout=connection_timeout)

    # -- the OpenAI side -------------------------------------------------------
    @property
    def base_url(self) -> str:
        return self.server_url + "/v1"

    @property
    def openai(self) -> Any:
        """The ``openai.AsyncOpenAI`` requests go through: one per running event loop, made on first use."""
        try:
            loop: Any = asyncio.get_running_loop()
        except RuntimeError:
            loop = self  # outside any loop: one client, kept under this object
        made = self._openai_by_loop.get(loop)
        if made is None:
            from openai import AsyncOpenAI

            made = AsyncOpenAI(base_url=self.base_url, api_key=self.api_key, **self._openai_kwargs)
            self._openai_by_loop[loop] = made
        return made

    @property
    def sync_openai(self) -> Any:
        if self._sync_openai is None:
            from openai import OpenAI

            self._sync_openai = OpenAI(base_url=self.base_url, api_key=self.api_key, **self._openai_kwargs)
        return self._sync_openai

    def __getattr__(self, name: str) -> Any:  # chat, completions, models, ...: the loop's AsyncOpenAI
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.openai, name)

    def __repr__(self) -> str:
        return f"VLLMClient({self.server_url!r})"

    # -- HTTP plumbing ---------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        *,
        stage: str | None = None,
        safe: bool = True,
        timeout: float | None = None,
        **kw: Any,
    ) -> Any:
        """One call with retries; ``stage`` set -> failures raise ``WeightSyncError(stage)``."""
        url = self.server_url + path
        headers = {ADMIN_HEADER: self.admin_token} if self.admin_token else {}
        backoff = Backoff(first=0.25, max_delay=2.0)
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                resp = self._session.request(
                    method, url, headers=headers, timeout=timeout or self.request_timeout, **kw
                )
            except requests.exceptions.ConnectionError as e:
                refused = isinstance(e, requests.exceptions.ConnectTimeout) or "refused" in str(e).lower()
                if last or not (safe or refused):
                    raise self._error(
                        ServerUnreachableError,
                        stage and "connect",
                        f"cannot reach the vf-vllm server: {type(e).__name__}",
                        "start it with vf-vllm --model ... or check host and port",
                        url=url,
                    ) from e
            except requests.exceptions.Timeout as e:
                if last or not safe:
                    raise self._error(
                        ServerTimeoutError,
                        stage and "timeout",
                        f"no answer within {timeout or self.request_timeout:.0f}s",
                        "raise the timeout, or check the server's log",
                        url=url,
                    ) from e
            else:
                if resp.status_code < 400:
                    return resp.json() if resp.content else None
                if not (safe and resp.status_code in _RETRY_STATUS) or last:
                    raise self._http_error(resp, url, stage)
            backoff.wait()
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _error(cls: type[ServerError], stage: str | None, message: str, hint: str, **kw: Any) -> ServerError:
        if stage:
            return WeightSyncError(stage, message, hint=hint, **kw)
        return cls(message, hint, **kw)

    def _http_error(self, resp: requests.Response, url: str, stage: str | None) -> ServerError:
        body = resp.text
        message, server_stage = f"HTTP {resp.status_code}", None
        try:
            err = resp.json().get("error")
            if isinstance(err, dict):
                message, server_stage = str(err.get("message", message)), err.get("stage")
            elif err:
                message = str(err)
        except ValueError:
            pass
        hint = None
        if resp.status_code in (401, 403):
            hint = "pass admin_token= (or set VF_ADMIN_TOKEN) to match the server's --admin-token"
        kw = {"url": url, "status": resp.status_code, "body": body}
        if stage:  # an update: the server's stage is more precise than ours
            return WeightSyncError(server_stage or stage, message, hint=hint, **kw)
        return ServerError(message, hint, **kw)

    # -- health ----------------------------------------------------------------
    def health(self, timeout: float | None = None) -> dict[str, Any]:
        return self._request("GET", "/vf/health", timeout=timeout)

    def world_size(self) -> int:
        return int(self._request("GET", "/vf/world_size")["world_size"])

    def wait_until_ready(self, timeout: float = 300.0, poll: float = 0.5) -> dict[str, Any]:
        """Block until ``/vf/health`` says ready; one total ``timeout`` for the whole wait."""
        url = self.server_url + "/vf/health"
        backoff = Backoff(first=poll, max_delay=poll, timeout=timeout)  # a fixed interval
        answered, last = False, "no answer"

        def ready() -> dict[str, Any] | None:
            nonlocal answered, last
            try:
                resp = self._session.get(url, timeout=max(0.5, min(5.0, backoff.left())))
                answered = True
                if resp.status_code == 200 and resp.json().get("status") == "ready":
                    return resp.json()
                last = f"status {resp.status_code}: {resp.text[:200]}"
            except requests.exceptions.RequestException as e:
                last = type(e).__name__
            return None

        health = poll_until(ready, backoff)
        if health is not None:
            return health
        if not answered:
            raise ServerUnreachableError(
                f"nothing answered within {timeout:.0f}s ({last})",
                "start vf-vllm, or check host and port",
                url=url,
            )
        raise ServerTimeoutError(
            f"server not ready within {timeout:.0f}s ({last})", "check the server's log", url=url
        )

    # -- outages ---------------------------------------------------------------
    def ping(self, timeout: float = 2.0) -> dict[str, Any] | None:
        """One ``/vf/health`` call without retries: its body when the server is ready, else None."""
        try:
            resp = self._session.get(self.server_url + "/vf/health", timeout=timeout)
            body = resp.json() if resp.status_code == 200 else None
        except (requests.exceptions.RequestException, ValueError):
            return None
        return body if isinstance(body, dict) and body.get("status") == "ready" else None

    def wait_for_server(
        self, timeout: float = 300.0, *, first_delay: float = 0.5, max_delay: float = 8.0
    ) -> dict[str, Any]:
        """Wait until the server answers ready again, polling with exponential backoff.

        For a server that went away mid-run (killed, restarting): unlike
        ``wait_until_ready`` the polls thin out, so a long restart costs few requests.
        Raises ``ServerUnreachableError`` if it is not back within ``timeout`` seconds.
        """
        backoff = Backoff(first=first_delay, max_delay=max_delay, timeout=timeout)
        health = poll_until(lambda: self.ping(timeout=min(5.0, max(0.5, backoff.left()))), backoff)
        if health is None:
            raise ServerUnreachableError(
                f"the server did not come back within {timeout:.0f}s",
                "restart vf-vllm on the same host and port, or raise vllm_server_timeout",
                url=self.server_url,
            )
        return health

    def lost_weights(self, health: Mapping[str, Any]) -> bool:
        """Whether the server (per its ``health()``) no longer holds what this client pushed:
        a lower weight version than the last commit, a missing adapter, or another server
        process than the one this client's GPU channel was made with (it restarted)."""
        if int(health.get("weight_version") or 0) < self.version:
            return True
        if self._nccl is not None and self._restarted(health, getattr(self._nccl, "server_instance", None)):
            return True
        adapters = (health.get("lora") or {}).get("adapters") or {}
        return self.lora_name is not None and self.lora_name not in adapters

    # -- admin -----------------------------------------------------------------
    def reset_prefix_cache(self) -> bool:
        return bool(self._request("POST", "/vf/reset_prefix_cache")["success"])

    def pause(self, mode: str = "keep") -> None:
        """Stop scheduling requests (``keep``: hold them; ``wait``: let running ones finish; ``abort``)."""
        self._request("POST", "/vf/pause", params={"mode": mode}, timeout=self.update_timeout)

    def resume(self) -> None:
        self._request("POST", "/vf/resume")

    def sleep(self) -> None:
        """Free the server's KV cache (vLLM sleep mode; the server needs --enable-sleep-mode)."""
        self._request("POST", "/vf/sleep", timeout=self.update_timeout)

    def wake(self) -> None:
        """Bring the server's weights and KV cache back (a no-op when awake)."""
        self._request("POST", "/vf/wake", timeout=self.update_timeout)

    def server_device(self) -> str:
        """The server's compute device type (``"cpu"``, ``"cuda"``, ...), asked once."""
        if self._device is None:
            self._facts = self.health()
            self._device = str(self._facts.get("device", "cpu"))
        return self._device

    def _server_facts(self, device: str) -> dict[str, Any]:
        """What ``transport.choose_transport`` reads of the server: its device, GPU transfer, GPUs.

        Kept from the health answer ``server_device`` read; asked again after a restart.
        """
        facts = getattr(self, "_facts", None)
        if facts is None:
            facts = self._facts = self.health()
        return {
            "device": device,
            "transports": list(facts.get("transports") or ["nccl"]),
            "device_uuids": list(facts.get("device_uuids") or []),
            "device_uuids_complete": facts.get("device_uuids_complete", True),
        }

    @staticmethod
    def _restarted(health: Mapping[str, Any], instance: str | None) -> bool:
        """Whether ``health`` comes from another server process than the one ``instance`` named."""
        now = health.get("instance_id")
        return bool(instance and now and now != instance)

    def shares_machine(self) -> bool:
        """Whether the server runs on this machine (it reads a file we write to /dev/shm)."""
        return self._shm_ok()

    def _shm_ok(self) -> bool:
        """Whether the server reads our /dev/shm (same machine): asked once, with a probe file."""
        if self._shm_visible is None:
            path, nonce = transport.write_probe()
            try:
                body = {"path": str(path), "nonce": nonce}
                answer = self._request("POST", "/vf/transport/probe", stage="begin", json=body)
                self._shm_visible = bool(answer["visible"])
            finally:
                path.unlink(missing_ok=True)
        return self._shm_visible

    # -- full weights ----------------------------------------------------------
    def update_weights(
        self,
        named_tensors: Mapping[str, Any] | Iterable[tuple[str, Any]],
        *,
        version: int | None = None,
        transport_name: str = "auto",
        pause_mode: str = "keep",
        timeout: float | None = None,
        max_file_bytes: int = 1 << 30,
        params: list[dict[str, Any]] | None = None,
    ) -> int:
        """Push checkpoint-named tensors (``model.named_parameters()`` names); returns the version.

        One transaction however large: above ``max_file_bytes`` the data goes as several
        files (cut between layers), all loaded while generation stays paused. Over ``nccl`` and
        ``ipc`` the same cut makes one broadcast round (or IPC receive) per chunk, on the
        tensors' device: the main rank holds one chunk of about ``max_file_bytes`` at a time.

        Streaming form (a trainer's sync, so it never holds the whole model): ``params``
        announces every tensor's ``{name, shape, dtype}`` up front, and ``named_tensors`` is
        then read lazily, once, as ``(name, tensor)`` pairs with each layer's tensors
        together; each file's worth is copied out and dropped before the next is read.
        """
        timeout = timeout or self.update_timeout
        deadline = time.monotonic() + timeout
        stream: Iterator[tuple[str, Any]] | None = None
        if params is None:
            tensors = dict(named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors)
        else:
            stream = iter(named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors)
            tensors = dict(itertools.islice(stream, 1))  # the first pair says where the tensors live
        if not tensors or params == []:
            raise WeightSyncError("validate", "no tensors to send", hint="pass model.named_parameters()")
        version = self.version + 1 if version is None else int(version)
        if transport_name == "auto":
            device = self.server_device()
            transport_name = transport.choose_transport(
                tensors, self._server_facts(device), self._shm_ok, transport.env_override()
            )
        if transport_name in ("nccl", "ipc"):
            # One transaction, one broadcast round (nccl) or IPC receive (ipc) per chunk of whole
            # layers of about max_file_bytes, each made on the tensors' device and dropped before
            # the next: the main rank never holds the model on its GPU.
            gpu_params = params if params is not None else transport.tensor_meta(tensors)
            return self._update_nccl(
                gpu_params,
                transport.gpu_chunks(_drain(tensors, stream), max_file_bytes),
                version,
                deadline,
                pause_mode,
                transport_name,
            )
        t0 = time.perf_counter()
        if stream is None:
            cpu = transport.prepare_tensors(tensors)
            meta = transport.tensor_meta(cpu)
            pieces: Iterable[dict[str, Any]] = transport.split_by_module(cpu, max_file_bytes)
        else:
            meta = params
            pieces = self._pieces(itertools.chain(tensors.items(), stream), max_file_bytes)
        update_id = uuid.uuid4().hex

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WeightSyncError(
                    "timeout", f"update did not finish within {timeout:.0f}s", url=self.server_url
                )
            return remaining

        # shm: data is staged before begin, so the server pauses generation only for load +
        # commit. http streamed: each file is made and uploaded in turn (the trainer holds one).
        staged: Iterable[Any]
        if transport_name == "shm":
            staged = self._stage(pieces)
        elif stream is None:
            staged = [safetensors_bytes(piece) for piece in pieces]
        else:
            staged = (safetensors_bytes(piece) for piece in pieces)
        begin = {
            "update_id": update_id,
            "version": version,
            "transport": transport_name,
            "params": meta,
            "timeout_s": timeout,
            "pause_mode": pause_mode,
        }
        self._request("POST", "/vf/weights/begin", stage="begin", timeout=left(), json=begin)
        try:
            for item in staged:  # several files make one update: generation stays paused
                if transport_name == "shm":
                    body = {"update_id": update_id, "path": str(item)}
                    self._request(
                        "POST", "/vf/weights/load", stage="load", safe=False, timeout=left(), json=body
                    )
                else:
                    url = f"/vf/weights/upload/{update_id}"
                    self._request("PUT", url, stage="load", safe=False, timeout=left(), data=item)
            body = {"update_id": update_id, "version": version}
            out = self._request("POST", "/vf/weights/commit", stage="commit", timeout=left(), json=body)
        except BaseException:
            self._abort(update_id)
            self._staging.close()  # the server may still read it: the next update writes a new file
            raise
        self.version = int(out["version"])
        logger.debug(
            "weights v%d sent over %s in %.3fs", self.version, transport_name, time.perf_counter() - t0
        )
        return self.version

    @staticmethod
    def _pieces(pairs: Iterable[tuple[str, Any]], max_bytes: int) -> Iterator[dict[str, Any]]:
        """Streamed ``(name, tensor)`` pairs as CPU pieces of about ``max_bytes``, cut only between
        layers (``transport.layer_pieces``), each made when the previous one was used."""
        for piece in transport.layer_pieces(pairs, max_bytes):
            cpu = transport.prepare_tensors(piece)
            del piece  # neither piece is kept while the next one is made
            yield cpu
            del cpu

    def _stage(self, pieces: Iterable[dict[str, Any]]) -> list[Any]:
        """Write every piece to its /dev/shm file before begin (one file per piece layout)."""
        staged: list[Any] = []
        try:
            for piece in pieces:
                # Every file of this update must survive until it is loaded.
                self._staging.max_files = max(self._staging.max_files, len(staged) + 1)
                staged.append(self._staging.write(piece))
        except OSError as e:
            self._staging.close()
            raise WeightSyncError(
                "write", f"cannot stage the weights: {e}", hint="free space in /dev/shm"
            ) from e
        return staged

    def _abort(self, update_id: str) -> None:
        """Best effort: let the server resume now instead of at the update's deadline."""
        try:
            self._session.post(
                self.server_url + "/vf/weights/abort",
                json={"update_id": update_id},
                headers={ADMIN_HEADER: self.admin_token} if self.admin_token else {},
                timeout=5,
            )
        except requests.exceptions.RequestException:
            pass

    # -- GPU: NCCL (nccl_update.py) and CUDA IPC (ipc_update.py) ---------------
    def init_nccl(self, master_address: str | None = None, master_port: int | None = None) -> None:
        """Join an NCCL group with the server's workers (this process is rank 0).

        A group already open is closed first: after a server restart its peers are gone.
        """
        from verifiers.inference.client.nccl_update import NcclChannel

        health = self.health()  # the server process the group is made with
        self._drop_gpu_channel()
        channel = NcclChannel(
            self, master_address, master_port if master_port is not None else self.group_port
        )
        channel.server_instance = health.get("instance_id")
        self._nccl = channel

    def _drop_gpu_channel(self) -> None:
        """Forget the GPU channel; its close (an NCCL group with dead peers may block) gets 5 s."""
        channel, self._nccl = self._nccl, None
        if channel is None:
            return
        import threading

        def close() -> None:
            try:
                channel.close()
            except Exception as e:  # noqa: BLE001 - the group is dropped either way
                logger.debug("closing the old weight channel failed: %s", e)

        closer = threading.Thread(target=close, name="vf-gpu-channel-close", daemon=True)
        closer.start()
        closer.join(5.0)

    def _update_nccl(
        self,
        params: list[dict[str, Any]],
        chunks: Iterable[dict[str, Any]],
        version: int,
        deadline: float,
        pause_mode: str,
        kind: str = "nccl",
    ) -> int:
        """One GPU update over ``kind`` (``nccl`` or ``ipc``), on a channel made with this server process:
        ``params`` announced at begin, then ``chunks`` (read lazily) sent in turn, then commit.

        The server's health is read first: a channel made with an earlier server
        process (``instance_id`` changed: ``vf-rl`` restarted it) would broadcast to
        dead peers, so it is closed and a new group opened. A server that does not
        answer raises ``ServerUnreachableError``, which ``is_server_lost`` reports.
        """
        health = self._facts = self.health()  # also what the next automatic choice reads
        offered = [k for k in health.get("transports") or ["nccl"] if k in ("nccl", "ipc")]
        if kind not in offered:
            raise WeightSyncError(
                "validate",
                f"transport {kind!r} is not what the server offers ({', '.join(offered) or 'no GPU transfer'})",
                hint=f"send with transport {offered[0]!r}, or restart vf-vllm with --weight-transfer {kind}"
                if offered
                else "use transport 'shm' or 'http'",
                url=self.server_url,
            )
        channel = self._nccl
        if channel is not None and (
            getattr(channel, "kind", "nccl") != kind
            or self._restarted(health, getattr(channel, "server_instance", None))
        ):
            logger.warning(
                "the vLLM server restarted (or its weight transfer changed): reopening the %s channel", kind
            )
            self._drop_gpu_channel()
        if self._nccl is None:
            if kind == "ipc":
                from verifiers.inference.client.ipc_update import IpcChannel

                self._nccl = IpcChannel(self)
                self._nccl.server_instance = health.get("instance_id")
            else:
                self.init_nccl()
        channel = self._nccl
        try:
            self.version = channel.update(params, chunks, version, deadline, pause_mode)
        finally:
            if channel.broken and self._nccl is channel:
                self._drop_gpu_channel()
        return self.version

    # -- LoRA ------------------------------------------------------------------
    def update_lora(
        self,
        adapter: Any,
        name: str = "vf-lora",
        *,
        config: Any = None,
        version: int | None = None,
        transport_name: str = "auto",
    ) -> str:
        """Hot-swap the adapter served as ``name``; returns ``name`` (use it as ``model``).

        The server must run with ``--enable-lora``; otherwise ``WeightSyncError(stage="lora")``
        tells you so (a trainer then falls back to merged full weights).
        """
        if transport_name == "auto":
            transport_name = "shm" if self._shm_ok() else "http"
        params = {"version": version} if version is not None else {}
        if transport_name == "shm":
            try:
                folder = adapters.write_lora_dir(adapter, config)
            except (OSError, ValueError) as e:
                raise WeightSyncError("write", f"cannot write the adapter: {e}") from e
            body = {"name": name, "path": str(folder), **params}
            try:
                self._request("POST", "/vf/lora/load", stage="lora", json=body, timeout=self.update_timeout)
            except BaseException:
                # A request that timed out may still be loading, and the server then serves from
                # this folder (vLLM reloads an evicted adapter from it): it goes only once the
                # server lets go of it too, whichever of us is last.
                owned_files.let_go(folder)
                raise
            owned_files.disown(folder)  # the server holds it now, and removes it when it is replaced
        else:
            blob = adapters.lora_blob(adapter, config)
            self._request(
                "PUT",
                f"/vf/lora/upload/{name}",
                stage="lora",
                params=params,
                data=blob,
                timeout=self.update_timeout,
            )
        self.lora_name = name
        return name

    def close(self) -> None:
        self._staging.close()
        self._drop_gpu_channel()
        self._session.close()
        if self._sync_openai is not None:
            self._sync_openai.close()


def _drain(first: dict[str, Any], rest: Iterator[tuple[str, Any]] | None) -> Iterator[tuple[str, Any]]:
    """``first``'s pairs, each taken out of it as it goes (nothing keeps a sent tensor), then ``rest``."""
    for name in list(first):
        yield name, first.pop(name)
    if rest is not None:
        yield from rest


def is_server_lost(err: BaseException | None) -> bool:
    """Whether ``err`` (or an error it was raised from) means nothing answered at the server's
    address: the server is down or restarting, as opposed to one that answered with an error."""
    seen = 0
    while err is not None and seen < 10:
        if isinstance(err, ServerUnreachableError):
            return True
        if isinstance(err, WeightSyncError) and err.stage == "connect":
            return True
        err, seen = err.__cause__, seen + 1
    return False
