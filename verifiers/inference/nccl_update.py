"""``NcclChannel``: the trainer's side of a weight update over NCCL (GPU servers).

vLLM's ``NCCLTrainerWeightTransferEngine`` (wrapped by
``transport.NcclWeightSender``) does the broadcast; it drives the server
through an object with vLLM's ``VLLMWeightSyncClient`` methods.
``_NcclControl`` is that object, put onto vf's ``/vf/weights/*`` routes so an
NCCL update gets the same validation, pause and version handshake as shm and
http. Untested on GPU here: the machines this was written on have none.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from typing import Any
from urllib.parse import urlparse

from verifiers.errors import WeightSyncError
from verifiers.inference import transport


class NcclChannel:
    """An NCCL group with the server's workers (this process is rank 0), opened on creation.

    After a broadcast that failed or did not finish in time the group is unusable:
    ``broken`` is set and the client opens a new channel for the next update. A
    failure while the server is gone (it does not answer, or answers as another
    process: ``instance_id`` changed) is raised as ``WeightSyncError(stage="connect")``,
    which ``client.is_server_lost`` reports, so a trainer waits for the server
    and syncs again (verifiers/training/weights/recovery.py) instead of stopping.
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
        self.sender = transport.NcclWeightSender(
            self.control,
            master_address=master_address,
            master_port=master_port,
            world_size=client.world_size() + 1,
        )

    def update(self, tensors: dict[str, Any], version: int, deadline: float, pause_mode: str) -> int:
        """One update: begin, broadcast (in a thread: NCCL calls cannot be interrupted), commit."""
        control = self.control
        control.begin(tensors, version, pause_mode, deadline)
        error: list[BaseException] = []
        ready = transport.ready_event(tensors)  # on this thread's stream, where the step ran

        def run() -> None:
            try:
                self.sender.send(tensors, ready)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                error.append(e)

        thread = threading.Thread(target=run, name="vf-nccl-send", daemon=True)
        thread.start()
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            self.client._abort(control.update_id)
            self.broken = True
            timeout = WeightSyncError(
                "transfer",
                "NCCL broadcast did not finish in time; the NCCL group is unusable",
                hint="the next update opens a new group; raise the update timeout if the model is large",
                url=self.client.server_url,
            )
            self._raise_if_server_lost(timeout)
            raise timeout
        if error:
            e = error[0]
            self.client._abort(control.update_id)
            if not (isinstance(e, WeightSyncError) and e.stage in self._BEFORE_BROADCAST):
                self.broken = True  # a broadcast that failed midway leaves the group out of step
            if not isinstance(e, WeightSyncError):
                e = WeightSyncError("transfer", f"{type(e).__name__}: {e}", url=self.client.server_url)
                e.__cause__ = error[0]
            self._raise_if_server_lost(e)
            raise e
        return version

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
        self.sender.close()


class _NcclControl:
    """vLLM's ``VLLMWeightSyncClient`` protocol over vf's routes (validation, pause, version)."""

    def __init__(self, client: Any):
        self.client = client
        self.update_id = ""
        self._begin_body: dict[str, Any] = {}
        self._deadline = 0.0

    def _left(self) -> float:
        return max(1.0, self._deadline - time.monotonic())

    def begin(self, tensors: dict[str, Any], version: int, pause_mode: str, deadline: float) -> None:
        self.update_id, self._deadline = uuid.uuid4().hex, deadline
        self._begin_body = {
            "update_id": self.update_id,
            "version": version,
            "transport": "nccl",
            "params": transport.tensor_meta(tensors),
            "timeout_s": self._left(),
            "pause_mode": pause_mode,
        }

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.client._request("POST", "/vf/nccl/init", stage="init", safe=False, json={"init_info": init_info})

    def start_weight_update(self) -> None:
        self.client._request(
            "POST", "/vf/weights/begin", stage="begin", json=self._begin_body, timeout=self._left()
        )

    def update_weights(self, update_info: Any) -> None:
        body = {"update_id": self.update_id, "update_info": update_info}
        self.client._request(
            "POST", "/vf/weights/nccl", stage="transfer", safe=False, json=body, timeout=self._left()
        )

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        body = {"update_id": self.update_id, "version": self._begin_body["version"]}
        self.client._request("POST", "/vf/weights/commit", stage="commit", json=body, timeout=self._left())
