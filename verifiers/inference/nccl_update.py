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

    After a broadcast that did not finish in time the group is unusable:
    ``broken`` is set and the client opens a new channel for the next update.
    """

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

        def run() -> None:
            try:
                self.sender.send(tensors)
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                error.append(e)

        thread = threading.Thread(target=run, name="vf-nccl-send", daemon=True)
        thread.start()
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            self.client._abort(control.update_id)
            self.broken = True
            raise WeightSyncError(
                "transfer",
                "NCCL broadcast did not finish in time; the NCCL group is unusable",
                hint="restart the server and the trainer",
                url=self.client.server_url,
            )
        if error:
            self.client._abort(control.update_id)
            if isinstance(error[0], WeightSyncError):
                raise error[0]
            raise WeightSyncError(
                "transfer", f"{type(error[0]).__name__}: {error[0]}", url=self.client.server_url
            ) from error[0]
        return version

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
