"""The trainer routes vf-vllm adds to vLLM's OpenAI server (``/vf/...``).

``vf-vllm`` (verifiers/inference/server/main.py) builds vLLM's app exactly as ``vllm serve``
does and calls :func:`attach` before serving, so every vLLM route and flag works
unchanged and generation routes keep vLLM's ``--api-key`` check.

Each route is one module-level function, listed with its method and path in :data:`ROUTES`;
they share one object, the server's :class:`~verifiers.inference.server.state.State` at
``app.state.vf`` (``_state(request)``), and nothing else.

Routes (JSON; errors are ``{"error": {"message", "type", "stage"}}`` with a 4xx/5xx)
----------------------------------------------------------------------------------
Open (readiness waits need them; they reveal nothing secret):

* ``GET /vf/health`` -> ``{"status": "ready", "model", "weight_version", "instance_id",
  "device", "dtype", "device_uuids", "device_uuids_complete", "world_size", "lora": {"enabled", "max_rank", "adapters"},
  "transports", "update_in_progress", "paused", "admin_token_required", "tool_template",
  "last_error"}`` (``instance_id``: new with each server process, so a client tells a
  restart apart even at equal versions; ``dtype``: the served weights' dtype, which syncs are sent in; ``device_uuids``: the workers' physical GPUs;
  ``transports``: ``"nccl"`` or ``"ipc"``, the server's one vLLM weight-transfer
  backend, then ``"shm"``, ``"http"``; ``tool_template``: the file of verifiers' tool
  chat template when the server renders with it, else null); 503 once the engine
  died, or when rolling back a dropped update failed (``"weights_broken"``).
* ``GET /vf/progress`` -> ``{"steps", "tokens", "pending", "running", "waiting", "paused",
  "counted"}``: how far the engine core got, read in the API process without a call to the
  engine (a stopped or deadlocked engine core cannot answer; this route still does, and vLLM's
  ``/health`` too, while ``/vf/health`` asks the engine whether it is paused and waits).
  ``steps``: batches of engine output received (one per engine step that produced tokens or
  stats), ``tokens``: tokens generated, both since start; ``pending``: requests handed to the
  engine and not finished; ``running``/``waiting``: the scheduler's counts at its last step
  (null without stats); ``paused``: vf paused generation on purpose (an update, an adapter
  swap, ``/vf/pause``, sleep), so no progress is expected; ``counted`` false: this engine's
  outputs cannot be counted, the counters mean nothing. vf-rl's hang watch polls it
  (verifiers/cli/rl/server_watch.py); its access-log lines are dropped.
* ``GET /vf/world_size`` -> ``{"world_size", "tensor_parallel", "pipeline_parallel",
  "data_parallel"}`` (vLLM workers; an NCCL group adds the trainer as rank 0).

Admin (header ``X-VF-Admin-Token`` when a token is set, see "Security"):

* ``POST /vf/weights/begin`` ``{"update_id", "version", "transport": "shm"|"http"|"nccl"|"ipc",
  "params": [{"name", "shape", "dtype"}], "timeout_s"?, "pause_mode"?: "keep"|"wait"|"abort"}``
  -> ``{"update_id", "version", "stage": "ready"}``. Validates names and shapes
  against the served checkpoint (400 listing the problems; serving goes on),
  pauses generation and arms a deadline: an update not committed within
  ``timeout_s`` is dropped and generation resumes.
* ``POST /vf/weights/load`` ``{"update_id", "path"}`` (shm) and
  ``PUT /vf/weights/upload/{update_id}`` (http, raw safetensors body)
  -> ``{"loaded", "seconds", "cpu_seconds"}`` (worker time). One file, or several
  (each of whole layers) for a large update; generation stays paused throughout.
* ``POST /vf/weights/nccl`` ``{"update_id", "update_info"?}`` (GPU) -> ``{"loaded"}``, once
  the workers received the broadcast round the trainer runs at the same time.
* ``POST /vf/weights/ipc`` ``{"update_id", "update_info": {"names", "dtype_names",
  "shapes", "ipc_handles"}}`` (GPU shared with the trainer) -> ``{"loaded"}``: the
  workers open the trainer's tensors through CUDA IPC handles, JSON-encoded by
  verifiers/inference/ipc_handles.py (no pickle crosses the wire).
  Both take several calls per update (a trainer sends a chunk of whole layers at a time),
  each naming tensors announced at begin and not sent yet; commit refuses until all came.
* ``POST /vf/weights/commit`` ``{"update_id", "version"}`` -> ``{"version", "prefix_cache_reset"}``:
  resets the prefix cache (its blocks hold keys/values of the old weights; running
  requests are recomputed), records the version, resumes generation.
* ``POST /vf/weights/abort`` ``{"update_id"}`` -> ``{"aborted"}``. An nccl/ipc update
  dropped uncommitted (abort, deadline, failed receive or commit) is rolled back
  on the workers (vLLM's ``start_weight_update`` left every layer on the meta
  device): if no weights had arrived the old ones come back unchanged, else the
  checkpoint is reloaded from disk and ``weight_version`` goes back to 0 (a client's
  ``lost_weights`` then sees it must push again); ``last_error`` says which.
* ``POST /vf/nccl/init`` ``{"init_info", "timeout_s"?}`` -> ``{"ok": true}`` (vLLM's NCCL engine joins the
  trainer; a group left by an earlier trainer is released first, see ``/vf/nccl/shutdown``)
* ``POST /vf/nccl/shutdown`` -> ``{"released"}``: the workers release the trainer's NCCL group
  (vLLM 0.32+'s ``shutdown_weight_transfer_engine``; 0.26 has none: ``released`` false)
* ``POST /vf/lora/load`` ``{"name", "path", "version"?}`` and ``PUT /vf/lora/upload/{name}?version=N``
  (body from ``client/adapters.py``'s ``lora_blob``) -> ``{"name", "version", "seconds", "load_seconds"}``: hot-swaps
  the adapter served as model ``name`` (400 with ``code: lora_disabled`` when the
  server runs without ``--enable-lora``).
* ``POST /vf/reset_prefix_cache`` -> ``{"success"}``; ``POST /vf/pause?mode=keep``
  -> ``{"paused": true}``; ``POST /vf/resume`` -> ``{"paused"}``
* ``POST /vf/sleep`` -> ``{"sleeping": true}`` and ``POST /vf/wake`` -> ``{"sleeping": false}``:
  vLLM's sleep mode (server started with ``--enable-sleep-mode``; 400 otherwise): the KV cache is
  freed (level 1: the weights wait in host memory) while a trainer on the same GPU runs its
  step, and comes back, empty, on wake. A weight update or generation needs the server awake.
* ``POST /vf/transport/probe`` ``{"path", "nonce"}`` -> ``{"visible"}``: whether this
  server reads the client's ``/dev/shm`` (then weights travel as a file there).

Security: bound to loopback (vf-vllm's default) admin routes are open unless a
token is set. Bound anywhere else they need the token (``--admin-token`` or
``VF_ADMIN_TOKEN``) and, with none configured, refuse every call (403).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from verifiers.inference import wire
from verifiers.inference.server.adapter_upload import unpack_lora_blob
from verifiers.inference.server.state import (
    RouteError,
    Settings,
    State,
    Update,
    check_admin,
    pending_requests,
)
from verifiers.inference.server.worker import read_safetensors_headers, validate_params
from verifiers.utils import owned_files

# The name its lines have always been logged under (log readers match it).
logger = logging.getLogger("verifiers.inference.server")

__all__ = ["ROUTES", "attach", "build_router", "cleanup"]

PAUSE_MODES = ("keep", "wait", "abort")
GPU_TRANSPORTS = ("nccl", "ipc")  # vLLM weight-transfer backends, one per server
LORA_OFF = "LoRA is not enabled on this server; start vf-vllm with --enable-lora --max-lora-rank R"
NO_NCCL = "this server has no GPU weight transfer (CPU); use transport 'shm' or 'http'"
BEGIN_FIELDS = f"need update_id, transport in {wire.TRANSPORTS}, pause_mode in {PAUSE_MODES}"


def _gpu_transports(vllm_config: Any) -> list[str]:
    """``["nccl"]`` or ``["ipc"]``: the server's vLLM weight-transfer backend, if vf can drive it."""
    cfg = vllm_config.weight_transfer_config
    backend = getattr(cfg, "backend", None) if cfg is not None else None
    return [backend] if backend in GPU_TRANSPORTS else []


def _sleep_mode(vllm_config: Any) -> bool:
    """Whether the server runs with ``--enable-sleep-mode`` (``/vf/sleep`` can free its KV cache)."""
    return bool(getattr(getattr(vllm_config, "model_config", None), "enable_sleep_mode", False))


def _dtype_name(dtype: Any) -> str | None:
    """``torch.bfloat16`` -> ``"bfloat16"``; None when the engine does not say."""
    return None if dtype is None else str(dtype).removeprefix("torch.")


def _state(request: Request) -> State:
    return request.app.state.vf


async def _admin(request: Request) -> None:
    check_admin(_state(request).settings, request.headers.get(wire.ADMIN_HEADER))


def _number(body: dict[str, Any], key: str, default: float) -> float:
    """``body[key]`` as a number > 0 (``default`` when absent); anything else is a 400."""
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise RouteError(
            400, "request", f"{key} is {value!r}; it must be a number > 0 (timeout_s in seconds)"
        )
    return float(value)


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RouteError(400, "request", f"body is not JSON: {e}") from e
    if not isinstance(body, dict):
        raise RouteError(400, "request", "body must be a JSON object")
    return body


class _Route(APIRoute):
    """Answers a RouteError (from a route or its auth dependency) as JSON.

    A route class, not an app exception handler: vLLM may have built its middleware
    stack, which copies the handlers, before these routes are added.
    """

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def handle(request: Request):
            try:
                return await handler(request)
            except RouteError as e:
                return e.response()

        return handle


async def health(request: Request):
    st = _state(request)
    if st.engine.errored:
        return JSONResponse({"status": "engine_dead", "error": str(st.engine.dead_error)}, status_code=503)
    if st.weights_broken:
        return JSONResponse({"status": "weights_broken", "error": st.weights_broken}, status_code=503)
    cfg, models = st.engine.vllm_config, request.app.state.openai_serving_models
    return {
        "status": "ready",
        "model": models.base_model_paths[0].name,
        "weight_version": st.version,
        "instance_id": st.instance_id,
        "device": st.device,
        # The dtype the trainer sends weights in (a trainer in fp32 or mixed precision would
        # otherwise send twice the bytes).
        "dtype": _dtype_name(getattr(getattr(cfg, "model_config", None), "dtype", None)),
        "device_uuids": st.device_uuids,
        # False when some data-parallel engine could not be asked (device_uuids may miss a GPU
        # a trainer shares): the client then never picks NCCL from them.
        "device_uuids_complete": st.device_uuids_complete,
        "world_size": cfg.parallel_config.world_size_across_dp,
        "lora": {
            "enabled": cfg.lora_config is not None,
            "max_rank": cfg.lora_config.max_lora_rank if cfg.lora_config else None,
            "adapters": {n: st.lora_versions.get(n) for n in models.lora_requests},
        },
        "transports": _gpu_transports(cfg) + ["shm", "http"],
        "update_in_progress": st.update is not None,
        "paused": bool(await st.engine.is_paused()),
        # vLLM's sleep mode (--enable-sleep-mode): the trainer may free the KV cache during its step.
        "sleep_mode": _sleep_mode(cfg),
        "sleeping": st.sleeping,
        "admin_token_required": bool(st.settings.admin_token) or not st.settings.loopback,
        "tool_template": st.settings.tool_template,
        "last_error": st.last_error,
    }


async def progress(request: Request):
    st = _state(request)
    p = st.progress
    return {
        "steps": p.steps,
        "tokens": p.tokens,
        "pending": pending_requests(st.engine),
        "running": p.running,
        "waiting": p.waiting,
        "paused": st.generation_paused or st.sleeping,
        "engine_calls": p.calls,
        "engine_calls_done": p.calls_done,
        "counted": p.counted,
    }


async def world_size(request: Request):
    pc = _state(request).engine.vllm_config.parallel_config
    return {
        "world_size": pc.world_size_across_dp,
        "tensor_parallel": pc.tensor_parallel_size,
        "pipeline_parallel": pc.pipeline_parallel_size,
        "data_parallel": pc.data_parallel_size,
    }


async def begin(request: Request):
    st, body = _state(request), await _body(request)
    update_id, kind = str(body.get("update_id") or ""), body.get("transport", "shm")
    pause_mode, params = body.get("pause_mode", "keep"), body.get("params")
    timeout = _number(body, "timeout_s", st.settings.update_timeout_s)
    version = body.get("version", st.version + 1)
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise RouteError(400, "request", f"version is {version!r}; it must be an integer >= 0")
    if not update_id or kind not in wire.TRANSPORTS or pause_mode not in PAUSE_MODES:
        raise RouteError(400, "request", BEGIN_FIELDS)
    if not isinstance(params, list) or not params:
        raise RouteError(400, "validate", "params must list at least one {name, shape, dtype}")
    offered = _gpu_transports(st.engine.vllm_config)
    if kind in GPU_TRANSPORTS and kind not in offered:
        if not offered:
            raise RouteError(400, "validate", NO_NCCL)
        raise RouteError(
            400,
            "validate",
            f"this server's weight transfer is {offered[0]!r}, not {kind!r}: send with transport "
            f"{offered[0]!r}, or restart vf-vllm with --weight-transfer {kind}",
        )
    if st.weights_broken:
        raise RouteError(503, "begin", st.weights_broken)
    async with st.lock:
        await st.wake()  # a sync into a sleeping server: its weights must be back on the GPU first
        if st.update is not None and st.update.ending:  # the next update waits for its rollback
            await st.call(st.update.done.wait(), "begin", timeout, "the previous update's rollback")
        if st.update is not None:
            if st.update.update_id == update_id:  # a retried begin gets the same answer
                return {"update_id": update_id, "version": st.update.version, "stage": "ready"}
            raise RouteError(
                409,
                "handshake",
                f"update {st.update.update_id!r} is in progress; commit or abort it first",
            )
        if st.spec is None:
            st.spec = await st.rpc("vf_weight_spec", "validate", 120.0)
        problems = validate_params(st.spec, params)
        if problems:
            raise RouteError(400, "validate", "; ".join(problems[:10]), problems=problems)
        u = st.update = Update(update_id, version, kind, params, time.monotonic() + timeout)
        try:
            await st.pause(pause_mode, timeout)
            u.paused = True
            if kind in GPU_TRANSPORTS:
                # A failed or timed-out start may still have begun the layerwise
                # reload on some worker: the rollback closes it either way.
                u.nccl_started = True
                await st.rpc("start_weight_update", "prepare", st.left(u))
        except BaseException as e:
            await st.end(u, f"failed to prepare: {getattr(e, 'message', e)}")
            raise
        u.expiry = asyncio.create_task(st.expire(u))
    return {"update_id": update_id, "version": u.version, "stage": "ready"}


async def _load_file(st: State, u: Update, path: Path) -> dict[str, Any]:
    """Load one file of ``u``: a large update may come as several files, each of whole layers."""
    try:
        header = read_safetensors_headers([str(path)])  # the header is all we read here
    except (OSError, ValueError) as e:
        raise RouteError(400, "load", f"{path} is not a safetensors file: {e}") from e
    announced = {p["name"]: list(p["shape"]) for p in u.params}
    stray = [n for n, (shape, _) in header.items() if announced.get(n) != list(shape) or n in u.received]
    if stray:
        raise RouteError(
            400,
            "load",
            f"the file holds {stray[0]!r}, not announced at begin or already sent; send what begin announced, once",
        )
    # Layers are reloaded per file, so each file must hold whole layers too.
    problems = validate_params(
        st.spec or {"params": {}}, [{"name": n, "shape": sh} for n, (sh, _) in header.items()]
    )
    if problems:
        raise RouteError(400, "load", problems[0])
    try:
        result = await st.rpc("vf_load_safetensors", "load", st.left(u), str(path))
    except RouteError as e:
        st.last_error = e.message  # the model may be half-loaded now: a full update repairs it
        raise
    if st.update is not u:  # the deadline passed while the worker was loading
        await st.reset_prefix_cache()
        st.last_error = f"update {u.update_id} loaded after its deadline: new weights, old version"
        raise RouteError(504, "timeout", st.last_error + "; send the update again with a larger timeout")
    u.received |= set(header)
    u.loaded = len(u.received) == len(announced)
    return {k: result[k] for k in ("loaded", "seconds", "cpu_seconds")}


async def load(request: Request):
    st, body = _state(request), await _body(request)
    u, path = st.current(str(body.get("update_id"))), str(body.get("path", ""))
    if not wire.is_transfer_name(path, "weights") or not Path(path).is_file():
        raise RouteError(
            400,
            "transfer",
            f"{path!r} is not a vf weights file on the server's machine; use transport 'http'",
        )
    return await _load_file(st, u, Path(path))


async def upload(update_id: str, request: Request):
    st = _state(request)
    u = st.current(update_id)
    size = int(request.headers.get("content-length") or 0)
    path = wire.transfer_dir(size) / wire.new_name("upload", ".safetensors")
    try:
        with open(path, "wb") as fh:
            async for chunk in request.stream():
                fh.write(chunk)
        return await _load_file(st, u, path)
    finally:
        path.unlink(missing_ok=True)


def _round_names(u: Update, info: Any, what: str) -> list[str]:
    """The names one receive of ``u`` brings: announced at begin, not received yet, given once."""
    if not isinstance(info, dict) or not isinstance(info.get("names"), list) or not info["names"]:
        raise RouteError(400, "transfer", f"update_info must hold names, dtype_names, shapes{what}")
    names = [str(n) for n in info["names"]]
    announced = {p["name"] for p in u.params}
    stray = [n for n in names if n not in announced or n in u.received]
    if stray or len(set(names)) != len(names):
        raise RouteError(
            400,
            "transfer",
            f"update_info names {(stray or names)[0]!r}, not announced at begin or already sent; "
            "send what begin announced, once",
        )
    return names


async def nccl(request: Request):
    from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

    st, body = _state(request), await _body(request)
    u = st.current(str(body.get("update_id")))
    if u.transport != "nccl":
        raise RouteError(400, "transfer", f"update {u.update_id} began with transport {u.transport!r}")
    # One broadcast round of several between begin and commit (vLLM's worker takes any number
    # of update_weights calls between start_weight_update and finish_weight_update).
    info = body.get("update_info") or {
        "names": [p["name"] for p in u.params if p["name"] not in u.received],
        "dtype_names": [p["dtype"] for p in u.params if p["name"] not in u.received],
        "shapes": [p["shape"] for p in u.params if p["name"] not in u.received],
    }
    names = _round_names(u, info, "")
    receive = st.engine.update_weights(WeightTransferUpdateRequest(update_info=info))
    await _receive_into(st, u, receive, names, "NCCL receive (a timeout leaves the group unusable)")
    return {"loaded": len(names)}


async def ipc(request: Request):
    st, body = _state(request), await _body(request)
    u = st.current(str(body.get("update_id")))
    info = body.get("update_info")
    if u.transport != "ipc":
        raise RouteError(400, "transfer", f"update {u.update_id} began with transport {u.transport!r}")
    names = _round_names(u, info, ", ipc_handles")
    rpc = st.engine.collective_rpc("vf_receive_ipc", timeout=st.left(u), args=(info,))
    await _receive_into(st, u, rpc, names, "IPC receive")
    return {"loaded": len(names)}


async def _receive_into(st: State, u: Update, receive: Any, names: list[str], what: str) -> None:
    """Await one GPU receive of ``u``; on any failure roll the update back before answering."""
    u.transfer_started = True
    try:
        await st.call(receive, "transfer", st.left(u), what)
    except BaseException as e:
        # vLLM's worker has dropped its update session but left layers on meta:
        # roll back now rather than at the client's abort or the deadline.
        await st.end(u, f"failed to receive: {getattr(e, 'message', e)}")
        raise
    if st.update is not u:  # the deadline passed and rolled it back while receiving
        raise RouteError(504, "timeout", f"update {u.update_id} passed its deadline; {st.last_error}")
    u.received |= set(names)
    u.loaded = len(u.received) == len({p["name"] for p in u.params})


async def commit(request: Request):
    st, body = _state(request), await _body(request)
    if st.update is None and body.get("version") is not None and body.get("version") == st.version:
        return {"version": st.version, "prefix_cache_reset": True}  # a retried commit
    u = st.current(str(body.get("update_id")))
    if not u.loaded:
        missing = [p["name"] for p in u.params if p["name"] not in u.received]
        raise RouteError(
            409,
            "commit",
            f"update {u.update_id} still misses {len(missing)} tensors ({missing[0]!r} first); "
            "send them, then commit",
        )
    if u.nccl_started:
        try:
            await st.rpc("finish_weight_update", "commit", st.left(u))
            await st.rpc("vf_repack_tied", "commit", st.left(u))
        except BaseException as e:
            await st.end(u, f"failed to commit: {getattr(e, 'message', e)}")
            raise
    try:
        reset = await st.reset_prefix_cache()
        st.version, st.last_error = u.version, None
        try:  # vLLM's own /weight_info shows it too
            await st.engine.update_weight_version(str(u.version))
        except Exception:  # noqa: BLE001 - informational only
            pass
    finally:
        await st.finish(u, "committed")
    return {"version": st.version, "prefix_cache_reset": reset}


async def abort(request: Request):
    st, body = _state(request), await _body(request)
    u = st.update
    if u is None or u.update_id != str(body.get("update_id")) or u.ending:
        return {"aborted": False}
    await st.end(u, "was aborted by the client", note=False)
    return {"aborted": True}


async def nccl_init(request: Request):
    from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

    st, body = _state(request), await _body(request)
    if "nccl" not in _gpu_transports(st.engine.vllm_config):
        raise RouteError(400, "init", NO_NCCL)
    timeout = _number(body, "timeout_s", st.settings.update_timeout_s)
    if st.nccl_group_open:  # a trainer restarted without closing: its communicator would leak
        await st.shutdown_weight_transfer(timeout)
    st.nccl_group_open = True  # from here a failed join may have left part of a group too
    join = st.engine.init_weight_transfer_engine(
        WeightTransferInitRequest(init_info=body.get("init_info") or {})
    )
    await st.call(join, "init", timeout, "NCCL rendezvous (check master_address/port)")
    return {"ok": True}


async def nccl_shutdown(request: Request):
    st = _state(request)
    return {"released": await st.shutdown_weight_transfer(st.settings.update_timeout_s)}


async def _swap_lora(request: Request, name: str, path: str, version: int | None) -> dict[str, Any]:
    st, models = _state(request), request.app.state.openai_serving_models
    if st.engine.vllm_config.lora_config is None:
        raise RouteError(400, "lora", LORA_OFF, code="lora_disabled")
    if not name or models.is_base_model(name):
        raise RouteError(400, "lora", f"adapter name {name!r} is empty or the base model's; pick another")
    if not (Path(path) / "adapter_config.json").is_file():
        raise RouteError(
            400, "lora", f"{path} is not an adapter folder on the server's machine; use transport 'http'"
        )
    t0 = time.perf_counter()
    # A folder vf wrote is the server's from here on (the writer lets go once we answer): it
    # stays while it is served and goes when replaced, at exit, or after a SIGKILL at the next start.
    ours = wire.is_transfer_name(path, "lora")
    if ours:
        try:
            owned_files.hold(path)
        except OSError as e:  # its writer gave up on this request and removed it
            raise RouteError(400, "lora", f"{path} is gone: {e}") from e
    try:
        async with st.lock:
            if st.update is not None:
                raise RouteError(
                    409, "lora", f"weight update {st.update.update_id!r} is in progress; retry after it"
                )
            await st.wake()
            load_s = await _load_lora(request, name, path)
    except BaseException:
        if ours and path not in st.lora_paths.values():
            # Not loaded: the folder goes with whichever of us lets go last (its writer,
            # if it still waits for this answer; we do, if its request timed out).
            owned_files.let_go(path)
        raise
    previous, st.lora_paths[name] = st.lora_paths.get(name), path
    st.lora_versions[name] = int(version) if version is not None else st.lora_versions.get(name, 0) + 1
    # vLLM reloads an evicted adapter from its path, so the newest folder stays;
    # the one it replaced goes, if vf wrote it.
    if previous and previous != path and wire.is_transfer_name(previous, "lora"):
        owned_files.release(previous)
    seconds = time.perf_counter() - t0
    # One line per swap, as a weight update's commit has (server_state.finish): a run's log
    # shows one line per sync whichever way the weights came.
    logger.info("adapter %s (v%d) loaded in %.2f s", name, st.lora_versions[name], seconds)
    return {"name": name, "version": st.lora_versions[name], "seconds": seconds, "load_seconds": load_s}


async def _load_lora(request: Request, name: str, path: str) -> float:
    """Load the adapter at ``path`` as ``name`` with generation paused; returns the load's seconds."""
    from vllm.lora.request import LoRARequest

    st, models = _state(request), request.app.state.openai_serving_models
    timeout = st.settings.update_timeout_s
    await st.pause("keep", timeout)
    try:
        async with models.lora_resolver_lock[name]:
            old = models.lora_requests.get(name)
            lora_id = old.lora_int_id if old else models.lora_id_counter.inc(1)
            # load_inplace makes the worker replace its cached copy of this adapter id...
            swap = LoRARequest(lora_name=name, lora_int_id=lora_id, lora_path=path, load_inplace=True)
            t1 = time.perf_counter()
            await st.call(st.engine.add_lora(swap), "lora", timeout, "loading the adapter", status=400)
            load_s = time.perf_counter() - t1
            # ...but requests must not carry it, or every batch reloads the adapter from disk.
            models.lora_requests[name] = LoRARequest(lora_name=name, lora_int_id=lora_id, lora_path=path)
        await st.reset_prefix_cache()  # blocks cached under this adapter id hold old keys/values
    finally:
        await st.resume()
    return load_s


async def lora_load(request: Request):
    body = await _body(request)
    return await _swap_lora(
        request, str(body.get("name", "")), str(body.get("path", "")), body.get("version")
    )


async def lora_upload(name: str, request: Request, version: int | None = None):
    if _state(request).engine.vllm_config.lora_config is None:
        raise RouteError(400, "lora", LORA_OFF, code="lora_disabled")
    try:
        folder = unpack_lora_blob(await request.body())
    except Exception as e:  # noqa: BLE001
        raise RouteError(400, "lora", f"body is not an adapter blob from adapters.lora_blob: {e}") from e
    try:
        return await _swap_lora(request, name, str(folder), version)
    except BaseException:
        owned_files.release(folder)
        raise


async def reset_prefix_cache(request: Request):
    return {"success": await _state(request).reset_prefix_cache()}


async def pause(request: Request, mode: str = "keep"):
    st = _state(request)
    if mode not in PAUSE_MODES:
        raise RouteError(400, "pause", f"mode must be one of {PAUSE_MODES}")
    await st.pause(mode, st.settings.update_timeout_s)
    st.manual_pause = True
    return {"paused": True}


async def resume(request: Request):
    st = _state(request)
    st.manual_pause = False
    if st.update is None:  # an update in progress resumes at its commit
        st.generation_paused = False
        await st.engine.resume_generation()
    return {"paused": st.update is not None}


async def sleep(request: Request):
    """Free the KV cache (vLLM sleep level 1: the weights go to host memory, the cache is
    dropped) while a trainer on the same GPU runs its step; generation must be idle."""
    st = _state(request)
    if not _sleep_mode(st.engine.vllm_config):
        raise RouteError(400, "sleep", "this server was started without --enable-sleep-mode")
    async with st.lock:
        if st.update is not None:
            raise RouteError(409, "sleep", f"weight update {st.update.update_id!r} is in progress")
        await st.sleep()
    return {"sleeping": True}


async def wake(request: Request):
    """Bring back the weights and the KV cache (before a sync or the next batch)."""
    st = _state(request)
    async with st.lock:
        await st.wake()
    return {"sleeping": False}


async def probe(request: Request):
    body = await _body(request)
    p = Path(str(body.get("path", "")))
    ok = wire.is_transfer_name(p, "probe") and p.is_file() and p.stat().st_size < 256
    return {"visible": bool(ok and p.read_text().strip() == str(body.get("nonce")))}


# Every /vf route: (method, path, handler, admin only), in the order the module docstring lists them.
ROUTES: tuple[tuple[str, str, Any, bool], ...] = (
    ("GET", "/health", health, False),
    ("GET", "/progress", progress, False),
    ("GET", "/world_size", world_size, False),
    ("POST", "/weights/begin", begin, True),
    ("POST", "/weights/load", load, True),
    ("PUT", "/weights/upload/{update_id}", upload, True),
    ("POST", "/weights/nccl", nccl, True),
    ("POST", "/weights/ipc", ipc, True),
    ("POST", "/weights/commit", commit, True),
    ("POST", "/weights/abort", abort, True),
    ("POST", "/nccl/init", nccl_init, True),
    ("POST", "/nccl/shutdown", nccl_shutdown, True),
    ("POST", "/lora/load", lora_load, True),
    ("PUT", "/lora/upload/{name}", lora_upload, True),
    ("POST", "/reset_prefix_cache", reset_prefix_cache, True),
    ("POST", "/pause", pause, True),
    ("POST", "/resume", resume, True),
    ("POST", "/sleep", sleep, True),
    ("POST", "/wake", wake, True),
    ("POST", "/transport/probe", probe, True),
)


def build_router() -> APIRouter:
    """The ``/vf`` routes of :data:`ROUTES`; admin ones check the token first (``_admin``)."""
    router = APIRouter(prefix="/vf", route_class=_Route)
    for method, path, handler, admin in ROUTES:
        router.add_api_route(
            path, handler, methods=[method], dependencies=[Depends(_admin)] if admin else None
        )
    return router


def attach(app: FastAPI, engine: Any, settings: Settings, device: str = "cpu") -> State:
    """Mount the ``/vf`` routes on a vLLM app before it serves; returns their state."""
    app.state.vf = State(settings=settings, engine=engine, device=device)
    app.state.vf.progress.hook(engine)
    app.include_router(build_router())
    _quiet_access_log()
    return app.state.vf


class _NoProgressPolls(logging.Filter):
    """Drops uvicorn's access-log lines of ``GET /vf/progress``: vf-rl polls it every few
    seconds, which would otherwise fill the server's log."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        # uvicorn's access record: (client, method, path with query, http version, status)
        return not (isinstance(args, tuple) and len(args) >= 3 and str(args[2]).startswith("/vf/progress"))


def _quiet_access_log() -> None:
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, _NoProgressPolls) for f in access.filters):
        access.addFilter(_NoProgressPolls())


def cleanup(state: State) -> None:
    """At shutdown: remove the adapter folders vf wrote (they live as long as the server), and
    vLLM's rendezvous files (it leaves one in the temp dir at every start)."""
    for path in state.lora_paths.values():
        if wire.is_transfer_name(path, "lora"):
            owned_files.release(path)
    for path in state.rendezvous_files:
        with contextlib.suppress(OSError):
            os.remove(path)
