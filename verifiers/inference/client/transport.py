"""How weights travel from the trainer to a vf-vllm server: the transport, the pieces, the staging files.

Four transports, picked by :func:`choose_transport` unless the caller names one
(``transport_name=`` of ``VLLMClient.update_weights``, else ``$VF_WEIGHT_TRANSPORT``):

* ``"nccl"`` (GPU): vLLM's native NCCL weight-transfer engine. The trainer joins
  one NCCL group with the server's workers once (``NcclWeightSender``, nccl_sender.py), then
  each update broadcasts every tensor packed into a few large buffers (vLLM's
  ``packed_nccl_broadcast_producer``), not one call per tensor. Chosen when the
  tensors are on a CUDA device, the server runs on CUDA with ``--weight-transfer
  nccl`` and no worker shares the trainer's GPU. **Untested here: the machines
  this was written on have no GPU.**
* ``"ipc"`` (GPU, trainer and server on one GPU): vLLM's CUDA IPC engine; the
  worker opens the trainer's tensors in place (ipc_update.py).
  Chosen when the server's one GPU (``device_uuids`` in its health) is the one
  the tensors are on and it runs with ``--weight-transfer ipc``.
* ``"shm"`` (CPU, same machine): the client writes one safetensors file under
  ``/dev/shm`` (or the temp dir when ``/dev/shm`` is missing, read-only or too
  small) and sends its path (:class:`StagingFile`); the worker memory-maps it. Chosen when the server
  proves it can read a probe file the client wrote (same host, same ``/dev/shm``).
* ``"http"`` (CPU, anywhere): the same safetensors bytes in the request body.

LoRA adapters always travel as a PEFT folder or, over ``"http"``, as one safetensors blob
(adapters.py).

The names and files both processes agree on (the transports, file names, who removes what a
killed process left) are in verifiers/inference/wire.py; the weight file is this trainer's
(verifiers/utils/owned_files.py).

torch is imported lazily: importing ``verifiers`` stays light.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from verifiers.inference.safetensors_writer import layout, raw_bytes
from verifiers.inference.wire import TRANSPORTS, new_name, remove_abandoned_transfer_files, transfer_dir
from verifiers.utils import owned_files

logger = logging.getLogger(__name__)

TRANSPORT_ENV = "VF_WEIGHT_TRANSPORT"  # nccl | ipc | shm | http | auto: overrides the automatic choice


def env_override() -> str | None:
    """The transport ``$VF_WEIGHT_TRANSPORT`` forces, or None (unset or ``auto``)."""
    value = os.environ.get(TRANSPORT_ENV, "").strip().lower()
    if not value or value == "auto":
        return None
    if value not in TRANSPORTS:
        raise ValueError(f"{TRANSPORT_ENV}={value!r}; set it to one of {TRANSPORTS} or auto")
    return value


def gpu_uuid(device: Any) -> str:
    """The physical GPU behind a CUDA ``device``, as vLLM's IPC receiver names it (``str(props.uuid)``)."""
    import torch

    return str(torch.cuda.get_device_properties(device).uuid)


def choose_transport(
    named_tensors: Mapping[str, Any],
    server: Mapping[str, Any] | str,
    shm_visible: bool | Callable[[], bool],
    override: str | None = None,
    *,
    uuid_of: Callable[[Any], str] = gpu_uuid,
) -> str:
    """How an update of ``named_tensors`` travels to ``server``; ``override`` (a transport name) wins.

    ``server`` is the server's ``/vf/health`` (``device``, ``transports``,
    ``device_uuids``; a bare device string is read as an NCCL server of unknown
    GPUs). ``shm_visible`` is asked only when a file transport is chosen.

    * CUDA tensors to a CUDA server, decided by GPU identity (``uuid_of(tensor.device)``
      against the workers' ``device_uuids``):
      - on the GPU of the server's only worker(s) and the server offers ``ipc``: ``ipc``;
      - sharing a GPU otherwise: NCCL cannot run (it refuses two ranks on one
        device), so the weights go as a file (``shm``/``http``); restart vf-vllm
        with ``--weight-transfer ipc`` to avoid the copy;
      - on other GPUs (or the server's GPUs unknown): ``nccl`` when offered, except when the
        server says its list misses some data-parallel engine's GPUs
        (``device_uuids_complete`` False): then a file, as when sharing.
    * Otherwise ``shm`` on a shared host, else ``http``.
    """
    if override:
        return override
    if isinstance(server, str):
        server = {"device": server, "transports": ["nccl"]}
    gpu_kinds = [k for k in server.get("transports") or () if k in ("nccl", "ipc")]
    cuda = [t for t in named_tensors.values() if getattr(t, "is_cuda", False)]
    if cuda and server.get("device") == "cuda" and gpu_kinds:
        ours = {uuid_of(d) for d in {t.device for t in cuda}}
        theirs = {str(u) for u in server.get("device_uuids") or ()}
        if theirs and ours & theirs:
            if "ipc" in gpu_kinds and ours == theirs and len(ours) == 1:
                return "ipc"
            from verifiers.utils.logging import warn_once

            warn_once(
                logger,
                "gpu-shared-no-ipc",
                "the trainer shares GPU %s with the vLLM server, whose weight transfer (%s) cannot use "
                "it (NCCL refuses two ranks on one GPU): weights go through host memory instead; "
                "restart vf-vllm with --weight-transfer ipc to send them in place (logged once)",
                sorted(ours & theirs)[0],
                "/".join(gpu_kinds),
            )
        elif server.get("device_uuids_complete") is False:
            # Some data-parallel engine's GPU is unknown: the trainer may share it, and NCCL would
            # fail at the rendezvous (two ranks on one GPU).
            from verifiers.utils.logging import warn_once

            warn_once(
                logger,
                "gpu-set-unknown",
                "the vLLM server could not tell the GPUs of all its data-parallel engines: weights go "
                "through host memory instead of NCCL (logged once); set %s=nccl if the trainer's GPUs "
                "are not among the server's",
                TRANSPORT_ENV,
            )
        elif "nccl" in gpu_kinds:
            return "nccl"
        elif not theirs:  # an ipc server that cannot tell its GPUs: its operator chose ipc
            return "ipc"
    visible = shm_visible() if callable(shm_visible) else shm_visible
    return "shm" if visible else "http"


# ---------------------------------------------------------------------------
# An update's tensors, in pieces of whole layers


def _items(named_tensors: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    if isinstance(named_tensors, Mapping):
        return list(named_tensors.items())
    return list(named_tensors)


def prepare_tensors(named_tensors: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """Detached, contiguous CPU tensors, each storage once (safetensors refuses shared storage).

    A tied model lists its embedding twice (``embed_tokens.weight`` and
    ``lm_head.weight``); the first name is kept, and the server's loader ties the
    other one itself.
    """
    out: dict[str, Any] = {}
    seen: set[tuple[int, int, tuple[int, ...]]] = set()
    for name, tensor in _items(named_tensors):
        t = _whole(tensor)
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape)) if t.numel() else None
        if key is not None and key in seen:
            continue
        if key is not None:
            seen.add(key)
        out[name] = t.to("cpu").contiguous()
    return out


def split_by_module(tensors: Mapping[str, Any], max_bytes: int) -> list[dict[str, Any]]:
    """Cut ``tensors`` into pieces of about ``max_bytes``, only between layers (:func:`layer_pieces`)."""
    return list(layer_pieces(tensors.items(), max_bytes))


def layer_pieces(pairs: Iterable[tuple[str, Any]], max_bytes: int) -> Iterator[dict[str, Any]]:
    """``(name, tensor)`` pairs as pieces of about ``max_bytes``, cut only between layers.

    vLLM fuses q/k/v (gate/up, every expert of an MoE layer) and the server reloads
    each piece's layers as they come, so a cut never falls inside a layer
    (``model.layers.N``; a name without an index is its own module): see
    ``verifiers.inference.names.layer_of``. Lazy: a piece is made only when the
    caller asks for the next, and this generator lets go of it first, so a caller that
    drops each piece before asking holds one piece plus the first tensor of the next layer.
    """
    from verifiers.inference.names import layer_of

    piece: dict[str, Any] = {}
    size, last = 0, None
    for name, t in pairs:
        layer = layer_of(name)
        if size >= max_bytes and layer != last:
            out, piece, size = piece, {}, 0
            yield out
            del out
        piece[name] = t
        size += t.numel() * t.element_size()
        last = layer
    if piece:
        yield piece


def tensor_meta(named_tensors: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``[{"name", "shape", "dtype"}]`` for the server's pre-transfer validation."""
    return [
        {"name": n, "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
        for n, t in named_tensors.items()
    ]


def cuda_device_of(named_tensors: Mapping[str, Any]) -> Any:
    """The CUDA device of the first CUDA tensor (None when there is none)."""
    for t in named_tensors.values():
        if getattr(t, "is_cuda", False):
            return t.device
    return None


def ready_event(named_tensors: Mapping[str, Any]) -> Any:
    """A CUDA event recorded now on the calling thread's stream of the tensors' device, or None.

    Call it on the thread that ran ``optimizer.step``: a sender on another thread (or on
    vLLM's own packing streams) waits for it, so it never reads weights the step is still
    writing. Without it nothing orders the two streams.
    """
    device = cuda_device_of(named_tensors)
    if device is None:
        return None
    import torch

    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(device))
    return event


def gpu_chunks(pairs: Iterable[tuple[str, Any]], max_bytes: int) -> Iterator[dict[str, Any]]:
    """Streamed ``(name, tensor)`` pairs as :func:`layer_pieces`, left on their device and made
    contiguous (an FSDP ``DTensor`` gathered): what one NCCL broadcast round or one IPC receive
    sends. Each chunk is made when the caller asks for it and let go of here before the next."""
    for piece in layer_pieces(pairs, max_bytes):
        chunk = {name: _whole(t).contiguous() for name, t in piece.items()}
        del piece
        yield chunk
        del chunk


def _whole(tensor: Any) -> Any:
    t = tensor.detach()
    full = getattr(t, "full_tensor", None)  # an FSDP DTensor: gather it
    return full() if callable(full) else t


# ---------------------------------------------------------------------------
# The shm transport: files under /dev/shm


class StagingFile:
    """Safetensors files under ``/dev/shm``, memory-mapped and overwritten in place each update.

    Writing a fresh 0.5 GB file costs more in page allocation than in copying, so a
    file is kept per layout (names, shapes, dtypes) and reused: an update is one
    memcpy per tensor into the mapping. A trainer that splits a large model into
    several requests gets one file per request layout (up to ``max_files``, the
    oldest dropped first). Safe because the handshake serialises writer and reader:
    the server has finished reading before the next update begins; after a failed
    update :meth:`close` drops every file (a reader still holding one keeps its
    pages) and the next update starts afresh.
    """

    def __init__(self, max_files: int = 8) -> None:
        import collections

        remove_abandoned_transfer_files()
        self.max_files = max_files
        # layout -> (path, {name: uint8 view into the mapping}, finalizer that unlinks)
        self._files: collections.OrderedDict[Any, tuple[Path, dict[str, Any], Any]] = (
            collections.OrderedDict()
        )

    @property
    def paths(self) -> list[Path]:
        return [path for path, _, _ in self._files.values()]

    def write(self, tensors: Mapping[str, Any]) -> Path:
        import numpy as np

        key = tuple((n, tuple(t.shape), t.dtype) for n, t in tensors.items())
        entry = self._files.get(key)
        if entry is None or not entry[0].exists():
            entry = self._create(key)
        self._files.move_to_end(key)
        path, views, _ = entry
        for name, t in tensors.items():
            # numpy's single-threaded memcpy: torch's copy_ opens a parallel region per
            # tensor, and on a busy machine each waits for a descheduled thread (seen:
            # 2.4 s instead of 0.13 s for 540 MB in 272 tensors).
            np.copyto(views[name], raw_bytes(t))
        return path

    def _create(self, key: tuple) -> tuple[Path, dict[str, Any], Any]:
        import weakref

        import torch

        if key in self._files:
            self._files.pop(key)[2]()
        while len(self._files) >= self.max_files:
            self._files.popitem(last=False)[1][2]()
        head, spans = layout(list(key))
        total = len(head) + (spans[-1][2] if spans else 0)
        path = transfer_dir(total) / new_name("weights", ".safetensors")
        # Owned (a lock held while this process lives): if it is killed, the next trainer on
        # this machine removes the file, which would otherwise hold a model's size of memory.
        fd = owned_files.create_file(path)
        with open(fd, "wb", closefd=False) as fh:
            fh.write(head)
            fh.truncate(total)
        buf = torch.from_file(str(path), shared=True, size=total, dtype=torch.uint8)
        views = {name: buf[len(head) + lo : len(head) + hi].numpy() for name, lo, hi in spans}
        self._files[key] = (path, views, weakref.finalize(self, owned_files.release, str(path)))
        return self._files[key]

    def close(self) -> None:
        while self._files:
            self._files.popitem()[1][2]()


def write_probe() -> tuple[Path, str]:
    """A small file the server must read back to prove it shares our ``/dev/shm``."""
    nonce = uuid.uuid4().hex
    path = transfer_dir() / new_name("probe")
    path.write_text(nonce)
    return path, nonce
