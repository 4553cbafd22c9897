"""State of the trainer routes of verifiers/inference/server/routes.py: settings, the admin check, weight updates.

:class:`State` lives on ``app.state.vf`` and holds what the routes share: the
engine, the served weight version, the update in progress (:class:`Update`, from
``begin`` to ``commit``, ``abort`` or its deadline) and the adapters swapped in.
Every failure is a :class:`RouteError`, which the routes answer as JSON.
"""

from __future__ import annotations

import asyncio
import hmac
import inspect
import ipaddress
import logging
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from fastapi.responses import JSONResponse

from verifiers.inference.wire import ADMIN_HEADER

logger = logging.getLogger("verifiers.inference.server")


class RouteError(Exception):
    """Answered as JSON: HTTP ``status``, the ``stage`` that failed, a one-line message."""

    def __init__(self, status: int, stage: str, message: str, **extra: Any):
        super().__init__(message)
        self.status, self.stage, self.message, self.extra = status, stage, message, extra

    def response(self) -> JSONResponse:
        error = {"message": self.message, "type": "WeightSyncError", "stage": self.stage, **self.extra}
        return JSONResponse({"error": error}, status_code=self.status)


def is_loopback(host: str | None) -> bool:
    """127.0.0.0/8, ::1 and ``localhost``; no host (vLLM's default) means every interface."""
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class Settings:
    """What vf-vllm adds to vLLM's flags."""

    admin_token: str | None = None
    loopback: bool = True  # bound to loopback or a unix socket: no token needed
    update_timeout_s: float = 300.0
    tool_template: str | None = None  # verifiers' tool chat template file, when served with it


def check_admin(settings: Settings, presented: str | None) -> None:
    """Raise 401/403 unless a request may use the admin routes (constant-time compare)."""
    if settings.admin_token:
        if not presented or not hmac.compare_digest(presented.encode(), settings.admin_token.encode()):
            raise RouteError(
                401, "auth", f"missing or wrong {ADMIN_HEADER} header; send the server's admin token"
            )
    elif not settings.loopback:
        raise RouteError(
            403,
            "auth",
            "admin routes are off: the server is bound off loopback without an admin token; "
            "restart it with --admin-token TOKEN or VF_ADMIN_TOKEN",
        )


@dataclass
class Update:
    """One weight update, from begin to commit, abort or deadline."""

    update_id: str
    version: int
    transport: str
    params: list[dict[str, Any]]
    deadline: float
    paused: bool = False
    loaded: bool = False  # every announced tensor arrived
    received: set[str] = field(default_factory=set)
    nccl_started: bool = False  # vLLM's start_weight_update ran (nccl/ipc): layers are on meta
    transfer_started: bool = False  # a receive began: the model may hold part of the new weights
    ending: bool = False  # being rolled back; no route may use it any more
    expiry: asyncio.Task | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)  # set once it is over


@dataclass
class EngineProgress:
    """How far the engine core got, as the API process sees it (``GET /vf/progress``).

    Counted from what the engine core streams back: every batch of its outputs passes
    through the core client's ``get_output_async`` (vLLM V1's output handler calls it in a
    loop; read in 0.32), which :meth:`hook` wraps. A vLLM without it leaves ``counted``
    False, and a hang watch then goes by answers alone. An engine core that stops (SIGSTOP, a
    deadlock, a stuck worker) stops the counters while the API process, and so this
    route, keeps answering: no call here goes to the engine, which could not answer.
    """

    steps: int = 0  # output batches received: one per engine step with outputs, or with stats
    tokens: int = 0  # tokens generated
    running: int | None = None  # the scheduler's last counts (sent with each step's stats)
    waiting: int | None = None
    counted: bool = False  # hook() found the core client; else the counters mean nothing
    # vf-vllm's own calls into the engine (State.call: a weight update's collective_rpc, a pause)
    # waiting for their answer, and those answered so far. While generation is paused for an
    # update, no output batch is expected, but these must move: an engine core stopped during an
    # update left /vf/progress saying "paused" and the watch waiting, for as long as the stop lasted.
    calls: int = 0
    calls_done: int = 0

    def hook(self, engine: Any) -> bool:
        """Count ``engine``'s outputs from now on; False when this engine has no core client to
        wrap (a test double, an in-process engine): ``counted`` then stays False."""
        core = getattr(engine, "engine_core", None)
        receive = getattr(core, "get_output_async", None)
        if not inspect.iscoroutinefunction(receive):
            return False

        async def counted_receive() -> Any:
            outputs = await receive()
            self.record(outputs)
            # Let the other tasks of this event loop run once per batch. vLLM's output handler
            # never yields while outputs are queued (awaiting a non-empty queue, or a socket with
            # a message waiting, does not suspend), so an API process slower than its engine
            # (2 cores shared with other work) answered no request, /health included, until the
            # generation ended: 15 s in tests/inference/test_server_hang.py beside four busy
            # processes, long enough to look hung. One loop turn per engine step costs microseconds.
            await asyncio.sleep(0)
            return outputs

        # On the instance: the output handler looks the method up at each call, so the
        # batches after the one it already waits for pass through here.
        core.get_output_async = counted_receive
        self.counted = True
        return True

    def record(self, outputs: Any) -> None:
        """One batch of engine outputs (``EngineCoreOutputs``) arrived."""
        self.steps += 1
        for out in getattr(outputs, "outputs", None) or ():
            self.tokens += len(getattr(out, "new_token_ids", None) or ())
        stats = getattr(outputs, "scheduler_stats", None)  # None when vLLM runs without stats
        if stats is not None:
            self.running = getattr(stats, "num_running_reqs", self.running)
            self.waiting = getattr(stats, "num_waiting_reqs", self.waiting)


def pending_requests(engine: Any) -> int | None:
    """Requests the API process handed to the engine and has not seen finish (vLLM's output
    processor's table, read in this process); None when the engine has no such table."""
    table = getattr(getattr(engine, "output_processor", None), "request_states", None)
    return len(table) if isinstance(table, dict) else None


@dataclass
class State:
    """Trainer-route state, kept on ``app.state.vf``."""

    settings: Settings
    engine: Any
    device: str = "cpu"  # vLLM's platform device type ("cpu", "cuda", ...)
    version: int = 0
    spec: dict[str, Any] | None = None
    update: Update | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one begin or adapter swap at a time
    sleeping: bool = False  # vLLM sleep mode: /vf/sleep freed the KV cache, /vf/wake brings it back
    manual_pause: bool = False
    lora_versions: dict[str, int] = field(default_factory=dict)
    lora_paths: dict[str, str] = field(default_factory=dict)
    last_error: str | None = None
    # A fresh id per server process: a client that sees it change knows the server
    # restarted (its NCCL group, adapters and weights are gone) even at equal versions.
    instance_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    device_uuids: list[str] = field(default_factory=list)  # physical GPUs of the workers
    weights_broken: str | None = None  # a rollback failed: the model may run on meta tensors
    rendezvous_files: list[str] = field(default_factory=list)  # vLLM's, removed at exit (cleanup)
    # Whether device_uuids came from every data-parallel engine (see rpc_every_engine).
    device_uuids_complete: bool = True
    nccl_group_open: bool = False  # a trainer's NCCL group was joined and not released since
    # Generation paused by vf (an update, an adapter swap, /vf/pause): requests wait without
    # progress on purpose, which /vf/progress says so that a hang watch does not count it.
    # Kept here, not asked of the engine (is_paused is a round trip a stopped engine never answers).
    generation_paused: bool = False
    progress: EngineProgress = field(default_factory=EngineProgress)

    async def sleep(self) -> None:
        """vLLM sleep level 1 (the KV cache freed, the weights kept in host memory); hold ``lock``."""
        if self.sleeping:
            return
        t0 = time.monotonic()
        # "wait": a request still running finishes first (with generation not ahead there is
        # none; "abort" would drop it without a word).
        await self.engine.sleep(level=1, mode="wait")
        self.sleeping = True
        logger.info("asleep (KV cache freed) in %.2f s", time.monotonic() - t0)

    async def wake(self) -> None:
        """Weights and KV cache back on the GPU; hold ``lock``. A no-op when awake."""
        if not self.sleeping:
            return
        t0 = time.monotonic()
        await self.engine.wake_up(None)
        await self.reset_prefix_cache()  # the cache comes back empty: no old block may pass as valid
        self.sleeping = False
        logger.info("awake in %.2f s", time.monotonic() - t0)

    async def call(
        self, awaitable: Awaitable[Any], stage: str, timeout: float, what: str, status: int = 500
    ) -> Any:
        """Await an engine call within ``timeout``; any failure becomes a RouteError naming ``stage``.
        Counted in ``progress`` while it waits, and as done once the engine answered (a result or
        its error; not a timeout or a cancel, which prove nothing of the engine): EngineProgress.calls."""
        self.progress.calls += 1
        answered = False
        try:
            result = await asyncio.wait_for(awaitable, timeout)
            answered = True
            return result
        except (asyncio.TimeoutError, TimeoutError) as e:
            raise RouteError(504, stage, f"{what} took longer than {timeout:.0f}s; raise timeout_s") from e
        except RouteError:
            answered = True
            raise
        except Exception as e:  # noqa: BLE001 - any engine failure becomes a typed error
            answered = True
            raise RouteError(status, stage, f"{what} failed: {type(e).__name__}: {e}") from e
        finally:
            self.progress.calls -= 1
            self.progress.calls_done += answered

    async def rpc(self, method: str, stage: str, timeout: float, *args: Any) -> Any:
        """First worker's result of ``collective_rpc`` (every worker runs it)."""
        return (await self.rpc_all(method, stage, timeout, *args))[0]

    async def rpc_all(self, method: str, stage: str, timeout: float, *args: Any) -> list[Any]:
        """Every worker's result of ``collective_rpc``."""
        rpc = self.engine.collective_rpc(method, timeout=timeout, args=args)
        return list(await self.call(rpc, stage, timeout + 5, method))

    async def rpc_every_engine(self, method: str, stage: str, timeout: float, *args: Any) -> list[Any]:
        """Every worker's result of ``method`` on every data-parallel engine, flattened.

        With data parallel > 1 vLLM's ``collective_rpc`` reaches one engine's workers only (its
        core client's ``call_utility_async``: engine 0, or every engine but only engine 0's
        answer returned). The core client also reaches each engine by itself:
        ``call_utility_all_async`` (0.32, 0.33: one answer per engine) or, in 0.26,
        ``_call_utility_async(..., engine=e)`` over ``core_engines``. With neither and data
        parallel > 1 this raises ``RouteError``: the answer would miss engines.
        """
        core = getattr(self.engine, "engine_core", None)
        engines = getattr(core, "core_engines", None)
        rpc_args = ("collective_rpc", method, timeout, args, None)
        per_engine = getattr(core, "call_utility_all_async", None)
        one = getattr(core, "_call_utility_async", None)
        if callable(per_engine) and engines is not None:
            answers = per_engine(*rpc_args)
        elif callable(one) and engines:
            answers = asyncio.gather(*(one(*rpc_args, engine=e) for e in engines))
        else:
            dp = getattr(getattr(self.engine.vllm_config, "parallel_config", None), "data_parallel_size", 1)
            if int(dp or 1) > 1:
                raise RouteError(
                    500, stage, f"cannot reach each of the {dp} data-parallel engines to ask {method}"
                )
            return await self.rpc_all(method, stage, timeout, *args)
        found = await self.call(answers, stage, timeout + 5, method)
        return [worker for engine in found for worker in engine]

    async def probe_devices(self) -> list[str]:
        """Ask every worker of every engine for its physical GPU (``device_uuids`` in /vf/health);
        once, at start.

        Not in the health route itself: a worker busy receiving an update would hold
        every health check up. When some engine cannot be asked, ``device_uuids_complete``
        is False and a client does not pick NCCL from the list (it could share a GPU with
        an engine not in it, and NCCL refuses two ranks on one GPU).
        """
        if self.device == "cuda":
            try:
                found = await self.rpc_every_engine("vf_device_uuid", "init", 30.0)
                self.device_uuids = [str(u) for u in found if u]
                self.device_uuids_complete = True
            except RouteError as e:  # health then reports none: clients fall back to shm/http
                logger.warning("could not read the workers' GPU UUIDs: %s", e.message)
                self.device_uuids_complete = False
        return self.device_uuids

    async def note_rendezvous_files(self) -> list[str]:
        """Ask every engine's workers for the ``vllm_dist_*`` files vLLM made in the temp dir; once,
        at start.

        vLLM never removes them (one per server start); ``cleanup`` does, after the engine ended.
        """
        try:
            found = await self.rpc_every_engine("vf_rendezvous_file", "init", 30.0)
        except RouteError as e:  # the file stays behind: nothing else depends on it
            logger.warning("could not ask the workers for their rendezvous file: %s", e.message)
            found = []
        self.rendezvous_files = sorted({str(path) for path in found if path})
        return self.rendezvous_files

    async def shutdown_weight_transfer(self, timeout: float) -> bool:
        """Release the trainer's NCCL group on the workers (vLLM 0.32+'s
        ``shutdown_weight_transfer_engine``, which destroys the communicator); False where the
        release has none (0.26), no group is open, or an update is in progress (the worker
        refuses then; the group goes at the next trainer's init or the server's exit).
        """
        release = getattr(self.engine, "shutdown_weight_transfer_engine", None)
        if not self.nccl_group_open or not callable(release):
            return False
        if self.update is not None:
            logger.warning("an update is in progress: the previous trainer's NCCL group is kept for now")
            return False
        await self.call(release(), "init", timeout, "releasing the previous trainer's NCCL group")
        self.nccl_group_open = False
        return True

    async def pause(self, mode: str, timeout: float) -> None:
        await self.call(
            self.engine.pause_generation(mode=mode, clear_cache=False), "pause", timeout, "pausing"
        )
        # Only once the engine paused: a pause (or resume, below) that hangs on a stuck engine
        # must not hide it from the watch.
        self.generation_paused = True

    async def resume(self) -> None:
        if not self.manual_pause:  # a client's own pause() holds until its resume()
            self.generation_paused = False
            await self.engine.resume_generation()

    async def reset_prefix_cache(self) -> bool:
        # reset_running_requests: preempted requests recompute their keys/values.
        return bool(await self.engine.reset_prefix_cache(True, False))

    def current(self, update_id: str) -> Update:
        u = self.update
        if u is None or u.update_id != update_id or u.ending:
            raise RouteError(
                410, "handshake", f"no update {update_id!r} in progress (expired or aborted); begin again"
            )
        if time.monotonic() > u.deadline:
            raise RouteError(
                504, "timeout", f"update {update_id} passed its deadline; begin again with a larger timeout_s"
            )
        return u

    def left(self, u: Update) -> float:
        return max(0.1, u.deadline - time.monotonic())

    async def finish(self, u: Update, reason: str) -> None:
        """End ``u``: resume generation, disarm its deadline."""
        if self.update is u:
            self.update = None
        if u.expiry is not None and u.expiry is not asyncio.current_task():
            u.expiry.cancel()
        try:
            if u.paused:
                await self.resume()
        finally:
            u.done.set()
        logger.info("weight update %s (v%d) %s", u.update_id, u.version, reason)

    async def expire(self, u: Update) -> None:
        await asyncio.sleep(max(0.0, u.deadline - time.monotonic()))
        if self.update is u and not u.ending:
            await self.end(u, "was not committed within its timeout")
            logger.warning("%s, generation resumed", self.last_error)

    async def end(self, u: Update, why: str, note: bool = True) -> None:
        """Drop ``u`` uncommitted (abort, deadline, failure): roll back, record why, resume.

        After vLLM's ``start_weight_update`` every layer sits on the meta device until
        ``finish_weight_update``, and the worker refuses the next start until then, so
        a dropped nccl/ipc update is closed on the workers (``vf_end_weight_update``):
        nothing received -> the old weights come back as they were; something received
        -> the checkpoint is reloaded from disk and the version goes back to 0, which
        tells a client (``lost_weights``) to push its weights again. ``last_error``
        says which (``note`` False: a client's abort of an shm/http update, which
        changed nothing, leaves it alone). If the rollback itself fails, generation
        stays paused (it would run on meta tensors) and health answers 503 until the
        server is restarted.
        """
        if u.ending:
            return
        u.ending = True
        if u.expiry is not None and u.expiry is not asyncio.current_task():
            u.expiry.cancel()
        message = f"update {u.update_id} (v{u.version}) {why}"
        if u.nccl_started:
            reload = u.transfer_started or u.loaded
            try:
                # A worker still blocked in a receive answers only after it: wait one update timeout.
                await self.rpc("vf_end_weight_update", "rollback", self.settings.update_timeout_s, reload)
            except RouteError as e:
                self.weights_broken = f"{message}; rolling it back failed ({e.message}): restart the server"
                self.last_error = self.weights_broken
                logger.error("%s", self.last_error)
                if self.update is u:
                    self.update = None
                u.done.set()
                return  # generation stays paused: the model may hold meta tensors
            if reload:
                self.version = 0
                await self.reset_prefix_cache()  # cached keys/values came from the half-loaded model
                message += (
                    "; weights had begun to arrive, so the server reloaded its checkpoint (version 0): "
                    "push the weights again"
                )
            else:
                message += (
                    f"; no weights had arrived, the served weights are unchanged (version {self.version})"
                )
        if note or u.nccl_started:
            self.last_error = message
        await self.finish(u, why)
