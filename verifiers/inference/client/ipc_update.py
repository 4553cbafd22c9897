"""``IpcChannel``: the trainer's side of a weight update over CUDA IPC (trainer and server on one GPU).

NCCL refuses two ranks on one device, so when the trainer's tensors live on the
GPU a vf-vllm worker runs on (same UUID, see ``transport.choose_transport``) the
server is started with vLLM's IPC weight-transfer engine (``vf-vllm
--weight-transfer ipc``, vllm/distributed/weight_transfer/ipc_engine.py) and the
trainer hands the worker CUDA IPC handles to its own tensors: no copy leaves the
GPU.

One update: ``begin`` (validation, pause, vLLM's ``start_weight_update``) ->
``/vf/weights/ipc`` with one handle per tensor, once per chunk of whole layers (about
``max_file_bytes``) -> ``commit``. The handles are
what ``torch.multiprocessing.reductions.reduce_tensor`` gives (the arguments of
``rebuild_cuda_tensor``), keyed by the GPU's UUID as vLLM's receiver expects,
and JSON-encoded (verifiers/inference/ipc_handles.py: bytes as base64, dtypes and the
two classes by name). vLLM's own HTTP client pickles them instead, which its worker
only reads with ``VLLM_ALLOW_INSECURE_SERIALIZATION=1``; the worker extension
decodes these (an allow-list, no pickle) and calls
vLLM's ``update_weights`` with the plain tuples, which vLLM 0.26 and newer accept
unchanged (unpacked mode, the engines' default).

The trainer keeps a chunk's shared tensors alive until the workers loaded that chunk,
then calls ``torch.cuda.ipc_collect()`` so the storage can be freed. Untested on GPU
here: the machines this was written on have none (tests/inference/test_weight_update_gpu_path.py
has the ``gpu`` tests).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from verifiers.errors import WeightSyncError
from verifiers.inference.client import transport
from verifiers.inference.ipc_handles import encode_handles


def share(tensors: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """``(keep_alive, update_info)`` for CUDA ``tensors``: one IPC handle per tensor, keyed by its GPU's UUID.

    The caller holds ``keep_alive`` until the server loaded them (the handles do
    not keep the storage alive). The current stream is synchronised first: the
    worker reads on its own stream and must see the values the optimizer wrote.
    """
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    keep: list[Any] = []
    names, dtypes, shapes, handles = [], [], [], []
    for device in {t.device for t in tensors.values()}:
        torch.cuda.current_stream(device).synchronize()
    for name, t in tensors.items():
        w = t.detach().contiguous()
        keep.append(w)
        _, args = reduce_tensor(w)
        names.append(name)
        dtypes.append(str(w.dtype).removeprefix("torch."))
        shapes.append(list(w.shape))
        handles.append({transport.gpu_uuid(w.device): args})
    info = {"names": names, "dtype_names": dtypes, "shapes": shapes, "ipc_handles": encode_handles(handles)}
    return keep, info


class IpcChannel:
    """Sends updates to a server whose vLLM weight transfer is ``ipc``; stateless between updates."""

    kind = "ipc"

    def __init__(self, client: Any):
        self.client = client
        self.broken = False  # nothing to break: every update stands alone
        self.server_instance: str | None = None

    def update(
        self,
        params: list[dict[str, Any]],
        chunks: Iterable[dict[str, Any]],
        version: int,
        deadline: float,
        pause_mode: str,
    ) -> int:
        """One update: begin (announcing ``params``), one IPC receive per chunk, commit.

        ``chunks`` is read lazily and each chunk is let go (and ``torch.cuda.ipc_collect``
        asked to free it) once the workers loaded it, before the next is made: the trainer
        holds one chunk at a time. The workers copy what they receive into the model within
        the receive, and torch keeps a shared block alive while a receiver still holds it.
        """
        client = self.client

        def left() -> float:
            return max(1.0, deadline - time.monotonic())

        update_id = uuid.uuid4().hex
        begin = {
            "update_id": update_id,
            "version": version,
            "transport": "ipc",
            "params": params,
            "timeout_s": left(),
            "pause_mode": pause_mode,
        }
        client._request("POST", "/vf/weights/begin", stage="begin", json=begin, timeout=left())
        try:
            for chunk in chunks:
                self._receive(update_id, chunk, left())
                del chunk  # before the next chunk is made: one chunk alive at a time
            commit = {"update_id": update_id, "version": version}
            out = client._request("POST", "/vf/weights/commit", stage="commit", json=commit, timeout=left())
        except BaseException as e:
            client._abort(update_id)
            if isinstance(e, WeightSyncError) or not isinstance(e, Exception):
                raise
            raise WeightSyncError("transfer", f"{type(e).__name__}: {e}", url=client.server_url) from e
        return int(out["version"])

    def _receive(self, update_id: str, chunk: dict[str, Any], timeout: float) -> None:
        keep: list[Any] = []
        try:
            keep, info = share(chunk)
            body = {"update_id": update_id, "update_info": info}
            self.client._request(
                "POST", "/vf/weights/ipc", stage="transfer", safe=False, json=body, timeout=timeout
            )
        finally:
            del keep
            _ipc_collect()

    def close(self) -> None:
        pass


def _ipc_collect() -> None:
    """Free the storage the worker has let go of (torch keeps shared blocks until asked)."""
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.ipc_collect()
    except Exception:  # noqa: BLE001 - housekeeping only
        pass
