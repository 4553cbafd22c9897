"""``NcclChannel``: the trainer's side of a weight update over NCCL (GPU servers).

vLLM's ``NCCLTrainerWeightTransferEngine`` (wrapped by
``nccl_sender.NcclWeightSender``) does the broadcast; it drives the server
through an object with vLLM's ``VLLMWeightSyncClient`` methods.
``_NcclControl`` is that object, put onto vf's ``/vf/weights/*`` routes so an
NCCL update gets the same validation, pause and version handshake as shm and
http. Untested on GPU here: the machines this was written on have none.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlparse

from verifiers.errors import WeightSyncError
from verifiers.inference.client import nccl_sender, transport

logger = logging.getLogger("verifiers.inference.client.nccl_update")


class NcclChannel:
    """An NCCL group with the server's workers (this process is rank 0), opened on creation.

    After a broadcast that failed or did not finish in time the group is unusable:
    ``broken`` is set and the client opens a new channel for the next update. A
    failure while the server is gone (it does not answer, or answers as another
    process: ``instance_id`` changed) is raised as ``WeightSyncError(stage="connect")``,
    which ``client.is_server_lost`` reports, so a trainer waits for the server
    and syncs again (verifiers/inference/client/recovery.py) instead of stopping.
    """

    kind = "nccl"
    # Failures the server reported before any broadcast began: the group is still fine.
    _BEFORE_BROADCAST = frozenset({"begin", "validate", "handshake", "pause", "prepare", "request", "auth"})

    def __init__(self, client: Any, master_address: str | None = None, master_port: int | None = None):
        self.client = client
        host = urlparse(client.server_url).hostname or "127.0.0.1"
        if master_address is None:  # the address the server can reach us at
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((host, 1))
                master_address = s.getsockname()[0]
        if master_port is None:
            with socket.socket() as s:
                s.bind(("", 0))
                master_port = s.getsockname()[1]
        self.control = _NcclControl(client)
        self.broken = False
        self.server_instance: str | None = None  # the server process the group was made with
        self.sender = nccl_sender.NcclWeightSender(
            self.control,
            master_address=master_address,
            master_port=master_port,
            world_size=client.world_size() + 1,
        )

    def update(
        self,
        params: list[dict[str, Any]],
        chunks: Iterable[dict[str, Any]],
        version: int,
        deadline: float,
        pause_mode: str,
    ) -> int:
        """One update: begin (announcing ``params``), one broadcast round per chunk, commit.

        ``chunks`` is read lazily: each chunk is broadcast and dropped before the next one is
        made (verifiers/inference/client/transport.py ``gpu_chunks``), so the trainer holds one chunk
        at a time. Each round runs in a thread (NCCL calls cannot be interrupted) that the
        caller waits for until the deadline.
        """
        control = self.control
        control.begin(params, version, pause_mode, deadline)
        try:
            control.open()
            for chunk in chunks:
                self._round(chunk, deadline)
                del chunk  # before the next chunk is made: one chunk alive at a time
            control.commit()
        except Exception as e:
            self.client._abort(control.update_id)
            err = e
            if not isinstance(e, WeightSyncError):
                err = WeightSyncError("transfer", f"{type(e).__name__}: {e}", url=self.client.server_url)
                err.__cause__ = e
            if not (isinstance(err, WeightSyncError) and err.stage in self._BEFORE_BROADCAST):
                self.broken = True  # a broadcast that failed midway leaves the group out of step
            self._raise_if_server_lost(err)
            raise err from err.__cause__
        return version

    def _round(self, chunk: dict[str, Any], deadline: float) -> None:
        """One broadcast round of ``chunk`` (the server's receive runs beside it)."""
        error: list[BaseException] = []
        ready = transport.ready_event(chunk)  # on this thread's stream, where the gathers/step ran
        self.control.round_params = transport.tensor_meta(chunk)

        def run() -> None:
            try:
                self.sender.send(chunk, ready)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                error.append(e)

        thread = threading.Thread(target=run, name="vf-nccl-send", daemon=True)
        thread.start()
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            self.broken = True
            raise WeightSyncError(
                "transfer",
                "NCCL broadcast did not finish in time; the NCCL group is unusable",
                hint="the next update opens a new group; raise the update timeout if the model is large",
                url=self.client.server_url,
            )
        if error:
            raise error[0]

    def _raise_if_server_lost(self, err: BaseException) -> None:
        """Raise ``err`` as a lost server (stage ``connect``) when the server is gone or restarted."""
        if isinstance(err, WeightSyncError) and err.stage == "connect":
            self.broken = True
            raise err
        health = self.client.ping()
        now = (health or {}).get("instance_id")
        if health is not None and not (self.server_instance and now and now != self.server_instance):
            return
        self.broken = True
        what = "does not answer" if health is None else "restarted"
        raise WeightSyncError(
            "connect",
            f"the server {what} during the NCCL update ({err}); its NCCL peers are gone",
            hint="the trainer waits for it and syncs again over a new NCCL group",
            url=self.client.server_url,
        ) from err

    def close(self) -> None:
        """Destroy our end of the group and ask the server to release its end (vLLM 0.32+'s
        ``shutdown_weight_transfer_engine``), so a trainer restart does not leak a communicator."""
        try:
            self.sender.close()
        finally:
            self.control.shutdown()


class _NcclControl:
    """vLLM's ``VLLMWeightSyncClient`` protocol over vf's routes (validation, pause, version).

    The transaction is the channel's: :meth:`open` posts begin (every tensor announced) and
    :meth:`commit` posts commit, around several broadcast rounds. vLLM's trainer engine calls
    ``start_weight_update`` and ``finish_weight_update`` around each round; here they do
    nothing, so all rounds land between one ``start_weight_update`` and one
    ``finish_weight_update`` on the workers (which accept several ``update_weights`` in between).
    """

    def __init__(self, client: Any):
        self.client = client
        self.update_id = ""
        self._begin_body: dict[str, Any] = {}
        self._deadline = 0.0
        self.round_params: list[dict[str, Any]] = []  # the current round's {name, shape, dtype}

    def _left(self) -> float:
        return max(1.0, self._deadline - time.monotonic())

    def begin(self, params: list[dict[str, Any]], version: int, pause_mode: str, deadline: float) -> None:
        self.update_id, self._deadline = uuid.uuid4().hex, deadline
        self._begin_body = {
            "update_id": self.update_id,
            "version": version,
            "transport": "nccl",
            "params": params,
            "timeout_s": self._left(),
            "pause_mode": pause_mode,
        }

    def open(self) -> None:
        self.client._request(
            "POST", "/vf/weights/begin", stage="begin", json=self._begin_body, timeout=self._left()
        )

    def commit(self) -> None:
        body = {"update_id": self.update_id, "version": self._begin_body["version"]}
        self.client._request("POST", "/vf/weights/commit", stage="commit", json=body, timeout=self._left())

    def shutdown(self) -> None:
        """Best effort: the server releases its end of the group (a dead server needs nothing)."""
        try:
            self.client._request("POST", "/vf/nccl/shutdown", stage="init", safe=False, timeout=5.0)
        except Exception as e:  # noqa: BLE001 - the group is dropped either way
            logger.debug("the server did not release its NCCL group: %s", e)

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.client._request("POST", "/vf/nccl/init", stage="init", safe=False, json={"init_info": init_info})

    def start_weight_update(self) -> None:
        pass  # the transaction began at open()

    def update_weights(self, update_info: Any) -> None:
        info = dict(update_info)
        if not info.get("names"):
            # vLLM 0.33 sends empty lists when this round's metadata equals the last one's (its
            # worker reuses what it kept); the server counts names, so it gets them every round.
            info["names"] = [p["name"] for p in self.round_params]
            info["dtype_names"] = [p["dtype"] for p in self.round_params]
            info["shapes"] = [p["shape"] for p in self.round_params]
        body = {"update_id": self.update_id, "update_info": info}
        self.client._request(
            "POST", "/vf/weights/nccl", stage="transfer", safe=False, json=body, timeout=self._left()
        )

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        pass  # the channel commits after the last round
