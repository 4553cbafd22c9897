"""How weights travel from the trainer to a vf-vllm server (the client's side).

Four transports, picked by :func:`choose_transport` unless the caller names one
(``transport_name=`` of ``VLLMClient.update_weights``, else ``$VF_WEIGHT_TRANSPORT``):

* ``"nccl"`` (GPU): vLLM's native NCCL weight-transfer engine. The trainer joins
  one NCCL group with the server's workers once (:class:`NcclWeightSender`), then
  each update broadcasts every tensor packed into a few large buffers (vLLM's
  ``packed_nccl_broadcast_producer``), not one call per tensor. Chosen when the
  tensors are on a CUDA device, the server runs on CUDA with ``--weight-transfer
  nccl`` and no worker shares the trainer's GPU. **Untested here: the machines
  this was written on have no GPU.**
* ``"ipc"`` (GPU, trainer and server on one GPU): vLLM's CUDA IPC engine; the
  worker opens the trainer's tensors in place (verifiers/inference/client/ipc_update.py).
  Chosen when the server's one GPU (``device_uuids`` in its health) is the one
  the tensors are on and it runs with ``--weight-transfer ipc``.
* ``"shm"`` (CPU, same machine): the client writes one safetensors file under
  ``/dev/shm`` (or the temp dir when ``/dev/shm`` is missing, read-only or too
  small) and sends its path; the worker memory-maps it. Chosen when the server
  proves it can read a probe file the client wrote (same host, same ``/dev/shm``).
* ``"http"`` (CPU, anywhere): the same safetensors bytes in the request body.

LoRA adapters always travel as a PEFT folder (``adapter_config.json`` +
``adapter_model.safetensors``), written by :func:`write_lora_dir`, or, over
``"http"``, as one safetensors blob whose metadata carries the adapter config
(:func:`lora_blob`).

What travels through ``/dev/shm`` is memory until someone removes it, so every such file and
folder is owned (verifiers/utils/owned_files.py): the weight file by its trainer, an adapter
folder by its writer until the server holds it and then by the server, which removes it when
the adapter is replaced or the server stops. What a killed process left, the next trainer or
vf-vllm start removes (:func:`remove_abandoned_transfer_files`).

This module imports torch/safetensors lazily: importing ``verifiers`` stays light.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from verifiers.utils import owned_files

logger = logging.getLogger("verifiers.inference.transport")

TRANSPORTS = ("nccl", "ipc", "shm", "http")
FILE_PREFIX = "vf-"  # the server only reads/deletes transport files named like this
ADAPTER_CONFIG_KEY = "vf_adapter_config"  # safetensors metadata key of an uploaded LoRA


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


def transfer_dir(min_free_bytes: int = 0) -> Path:
    """``/dev/shm`` when it exists, is writable and has room; otherwise the temp dir."""
    shm = Path(owned_files.SHM_DIR)
    try:
        if shm.is_dir() and os.access(shm, os.W_OK):
            st = os.statvfs(shm)
            if st.f_bavail * st.f_frsize > min_free_bytes * 1.1:
                return shm
    except OSError:
        pass
    return Path(tempfile.gettempdir())


def new_name(kind: str, suffix: str = "") -> str:
    """A unique transport file name the server accepts (``vf-<kind>-<pid>-<random>``)."""
    return f"{FILE_PREFIX}{kind}-{os.getpid()}-{uuid.uuid4().hex[:12]}{suffix}"


_DTYPE_CODES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64"}


def _layout(entries: list[tuple[str, tuple[int, ...], Any]], metadata: dict[str, str] | None = None):
    """``(header bytes, [(name, start, end)])`` of a safetensors file holding ``entries``.

    Written here rather than by ``safetensors.torch.save_file``, which converts
    every tensor through numpy first (30 ms for a 240-tensor LoRA adapter). Widest
    dtypes first, so each offset stays aligned to its element size with no padding
    (safetensors forbids holes between tensors).
    """
    import math

    header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
    spans, offset = [], 0
    for name, shape, dtype in sorted(entries, key=lambda e: -e[2].itemsize):
        code = _DTYPE_CODES.get(str(dtype).removeprefix("torch."))
        if code is None:
            raise ValueError(f"{name}: dtype {dtype} cannot be sent; send floating-point weights")
        size = dtype.itemsize * math.prod(shape)
        header[name] = {"dtype": code, "shape": list(shape), "data_offsets": [offset, offset + size]}
        spans.append((name, offset, offset + size))
        offset += size
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    return len(head).to_bytes(8, "little") + head, spans


def _raw(t: Any) -> Any:
    """A tensor's bytes as a flat uint8 numpy view (bf16 included, which numpy lacks)."""
    import torch

    return t.detach().reshape(-1).contiguous().view(torch.uint8).numpy()


def write_safetensors(tensors: Mapping[str, Any], path: Path, metadata: dict[str, str] | None = None) -> Path:
    """Write CPU ``tensors`` to ``path`` atomically (a reader never sees half a file)."""
    head, spans = _layout([(n, tuple(t.shape), t.dtype) for n, t in tensors.items()], metadata)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as fh:
        fh.write(head)
        for name, _, _ in spans:
            fh.write(_raw(tensors[name]).data)
    os.replace(tmp, path)
    return path


def safetensors_bytes(tensors: Mapping[str, Any], metadata: dict[str, str] | None = None) -> bytes:
    head, spans = _layout([(n, tuple(t.shape), t.dtype) for n, t in tensors.items()], metadata)
    return b"".join([head, *(_raw(tensors[name]).tobytes() for name, _, _ in spans)])


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
            np.copyto(views[name], _raw(t))
        return path

    def _create(self, key: tuple) -> tuple[Path, dict[str, Any], Any]:
        import weakref

        import torch

        if key in self._files:
            self._files.pop(key)[2]()
        while len(self._files) >= self.max_files:
            self._files.popitem(last=False)[1][2]()
        head, spans = _layout(list(key))
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


def remove_abandoned_transfer_files() -> None:
    """Remove the weight files and adapter folders that processes killed on this machine left in
    ``/dev/shm`` or the temp dir (a SIGKILL, the OOM killer: no cleanup ran). Only paths no live
    process holds (verifiers/utils/owned_files.py), and only this user's."""
    dirs = {Path(owned_files.SHM_DIR), Path(tempfile.gettempdir())}
    found = [
        p for d in dirs if d.is_dir() for kind in ("weights", "lora")
        for p in d.glob(f"{FILE_PREFIX}{kind}-*") if is_transfer_name(p, kind)
    ]  # fmt: skip
    removed = owned_files.remove_abandoned(found)
    if removed:
        logger.info(
            "removed %d weight-transfer file(s) and adapter folder(s) (%.0f MB in files) that killed "
            "processes left: %s",
            len(removed), sum(removed.values()) / 2**20, ", ".join(sorted(removed)),
        )  # fmt: skip


def is_transfer_name(path: str | os.PathLike, kind: str) -> bool:
    """Whether ``path`` is absolute and named as :func:`new_name` names a ``kind`` file.

    The server reads only such files and deletes only such adapter folders, so a
    user's own folder that merely starts with ``vf-`` is never removed.
    """
    import re

    p = Path(path)
    return (
        p.is_absolute()
        and re.fullmatch(rf"{FILE_PREFIX}{kind}-\d+-[0-9a-f]{{12}}(\.safetensors)?", p.name) is not None
    )


def write_probe() -> tuple[Path, str]:
    """A small file the server must read back to prove it shares our ``/dev/shm``."""
    nonce = uuid.uuid4().hex
    path = transfer_dir() / new_name("probe")
    path.write_text(nonce)
    return path, nonce


# ---------------------------------------------------------------------------
# LoRA adapters


def lora_payload(adapter: Any, config: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(state_dict, adapter_config)`` of a PEFT model, or of a state dict plus its config.

    ``config`` may be a peft ``LoraConfig`` or a plain dict (``r``, ``lora_alpha``,
    ``target_modules``, ...). Keys must be PEFT's saved names
    (``base_model.model....lora_A.weight``), as ``get_peft_model_state_dict`` gives.
    """
    if hasattr(adapter, "peft_config"):  # a PeftModel
        name = getattr(adapter, "active_adapter", "default")
        name = name if isinstance(name, str) else name[0]
        config = config if config is not None else adapter.peft_config[name]
        state = _peft_lora_tensors(adapter, name, config)
    else:
        state = dict(adapter)
    if config is None:
        raise ValueError("a LoRA state dict needs its config: pass config=LoraConfig(...) or a dict")
    if hasattr(config, "to_dict"):
        config = config.to_dict()
    config = json.loads(
        json.dumps(dict(config), default=lambda o: sorted(o) if isinstance(o, set) else str(o))
    )
    return prepare_tensors(state), config


def _peft_lora_tensors(model: Any, adapter: str, config: Any) -> dict[str, Any]:
    """The adapter's ``lora_A``/``lora_B`` tensors under PEFT's saved names.

    ``peft.get_peft_model_state_dict`` walks the module tree several times (tens
    of ms for a 135M model, per sync); plain LoRA needs one pass over the
    parameters, dropping the adapter name (``...q_proj.lora_A.default.weight`` ->
    ``...q_proj.lora_A.weight``). Anything else (DoRA, modules_to_save, biases)
    goes through PEFT's own function.
    """
    plain = (
        not getattr(config, "use_dora", False)
        and not getattr(config, "modules_to_save", None)
        and getattr(config, "bias", "none") == "none"
    )
    if not plain:
        from peft import get_peft_model_state_dict

        return get_peft_model_state_dict(model, adapter_name=adapter)
    out = {}
    for n, p in model.named_parameters():
        for kind in ("lora_A", "lora_B", "lora_embedding_A", "lora_embedding_B"):
            tag = f".{kind}.{adapter}"
            if tag in n:
                out[n.replace(tag, f".{kind}")] = p
    return out


@contextlib.contextmanager
def _new_lora_dir(root: Path) -> Iterator[Path]:
    """A new adapter folder under ``root``, owned by this process; removed if the block fails."""
    out = root / new_name("lora")
    out.mkdir(parents=True)
    owned_files.hold(out)
    try:
        yield out
    except BaseException:
        owned_files.release(out)
        raise


def write_lora_dir(adapter: Any, config: Any = None, root: Path | None = None) -> Path:
    """Write an adapter as a fresh PEFT folder under ``root`` (default :func:`transfer_dir`).

    ``adapter`` may also be an existing adapter folder: its files are copied, so a
    trainer that keeps saving into one folder never races the server reading it.
    The folder is this process's (``owned_files``) until the caller hands it over
    (``owned_files.disown`` once the server holds it) or removes it (``owned_files.release``).
    """
    with _new_lora_dir(root or transfer_dir()) as out:
        if isinstance(adapter, (str, os.PathLike)):
            src = Path(adapter)
            if not (src / "adapter_config.json").is_file():
                raise ValueError(f"{src} is not a PEFT adapter folder (no adapter_config.json)")
            for f in src.iterdir():
                if f.is_file() and f.name.startswith("adapter_"):
                    shutil.copy2(f, out / f.name)
        else:
            tensors, cfg = lora_payload(adapter, config)
            (out / "adapter_config.json").write_text(json.dumps(cfg))
            write_safetensors(tensors, out / "adapter_model.safetensors")
    return out


def unpack_lora_blob(data: bytes, root: Path | None = None) -> Path:
    """The server's side of :func:`lora_blob`: write the blob out as a PEFT folder, owned by
    this process as :func:`write_lora_dir`'s is."""
    import struct

    from safetensors.torch import load

    (header_len,) = struct.unpack("<Q", data[:8])
    config = json.loads(json.loads(data[8 : 8 + header_len])["__metadata__"][ADAPTER_CONFIG_KEY])
    tensors = load(data)
    with _new_lora_dir(root or transfer_dir(len(data))) as out:
        (out / "adapter_config.json").write_text(json.dumps(config))
        write_safetensors(tensors, out / "adapter_model.safetensors")
    return out


def lora_blob(adapter: Any, config: Any = None) -> bytes:
    """One safetensors blob holding the adapter weights, its config in the metadata."""
    if isinstance(adapter, (str, os.PathLike)):
        from safetensors.torch import load_file

        src = Path(adapter)
        config = json.loads((src / "adapter_config.json").read_text())
        tensors = load_file(str(src / "adapter_model.safetensors"))
    else:
        tensors, config = lora_payload(adapter, config)
    return safetensors_bytes(tensors, metadata={ADAPTER_CONFIG_KEY: json.dumps(config)})


# ---------------------------------------------------------------------------
# GPU: NCCL through vLLM's native weight-transfer engine (untested: no GPU here)


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


def weight_source_class() -> type:
    """A ``WeightSource`` over one round's tensors, for the installed vLLM's contract.

    0.32 reads ``source.metadata()`` and ``iter(source)``; 0.33 requires ``metadata`` to be a
    ``functools.cached_property`` (checked when the class is made: a plain method raises
    ``TypeError``), reads it as an attribute, iterates ``source.iter_full()``, and compares it with
    the previous round's to send no metadata when equal. A round's tensors therefore live in a new
    source object each round (:meth:`NcclWeightSender.send`), so the cached metadata is always
    this round's.
    """
    import functools
    import inspect

    from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

    class _Tensors(WeightSource):
        def __init__(self, tensors: Mapping[str, Any]):
            self.tensors = dict(tensors)

        def _meta(self) -> list[Any]:
            return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self.tensors.items()]

        def _pairs(self) -> Iterator[tuple[str, Any]]:
            return iter(list(self.tensors.items()))

    if isinstance(inspect.getattr_static(WeightSource, "metadata"), property):  # vLLM 0.33+

        class Round(_Tensors):
            metadata = functools.cached_property(_Tensors._meta)

            def iter_full(self) -> Iterator[tuple[str, Any]]:
                return self._pairs()

    else:  # vLLM 0.3x before 0.33: a method, and the source itself is iterated

        class Round(_Tensors):  # type: ignore[no-redef]
            def metadata(self) -> list[Any]:
                return self._meta()

            def __iter__(self) -> Iterator[tuple[str, Any]]:
                return self._pairs()

    return Round


class NcclWeightSender:
    """Trainer end of an NCCL group with the server's workers (rank 0 sends).

    Opens the group on creation (rendezvous on ``master_address:master_port``, the
    server's workers joining through ``sync_client.init_weight_transfer_engine`` at
    the same time). :meth:`send` is one broadcast round: the server's receive
    (``update_weights`` over HTTP) runs concurrently with a packed broadcast of the
    round's tensors. A large update is several rounds inside one server transaction
    (verifiers/inference/client/nccl_update.py opens and commits it), so the trainer never
    holds more than one round's tensors. ``sync_client`` is any object with vLLM's
    ``VLLMWeightSyncClient`` methods; :class:`VLLMClient` passes an adapter onto its
    ``/vf/weights/*`` routes, which add validation, pausing and versions.

    Two vLLM APIs: releases with ``NCCLTrainerWeightTransferEngine`` (0.32, 0.33) drive
    each round through it, with a fresh :func:`weight_source_class` source per round;
    0.26 has only the static ``trainer_init`` / ``NCCLWeightTransferEngine.trainer_send_weights``,
    so the round is driven here, the same four calls in the same order.
    tests/inference/test_nccl_release_contract.py runs this class through each release's
    own trainer engine, packing and worker receive, with only the NCCL group stood in.

    NCCL calls cannot be interrupted, so the caller runs :meth:`send` in a thread and
    waits with a timeout; after a timeout the group is unusable and the error says to
    restart the server and the trainer. The thread's current CUDA device is set to the
    tensors' (a new thread starts on device 0), and the broadcast waits for ``ready``
    (:func:`ready_event`) first.
    """

    def __init__(
        self,
        sync_client: Any,
        *,
        master_address: str,
        master_port: int,
        world_size: int,
        device: Any = None,
    ):
        import torch

        if device is not None:
            torch.cuda.set_device(device)  # the group lives on this thread's current device
        self.client, self.engine, self.group = sync_client, None, None
        try:
            from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerWeightTransferEngine
        except ImportError:  # vLLM 0.26
            NCCLTrainerWeightTransferEngine = None  # noqa: N806
        if NCCLTrainerWeightTransferEngine is not None:
            self._init_engine(NCCLTrainerWeightTransferEngine, master_address, master_port, world_size)
        else:
            self._init_static(master_address, master_port, world_size)

    def _init_engine(self, engine_cls: Any, address: str, port: int, world_size: int) -> None:
        from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

        self.source_cls = weight_source_class()
        info = NCCLTrainerInitInfo(master_address=address, master_port=port, world_size=world_size, rank=0)
        self.engine = engine_cls.trainer_init(info, client=self.client, source=self.source_cls({}))

    def _init_static(self, address: str, port: int, world_size: int) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from vllm.distributed.weight_transfer.nccl_common import trainer_init

        # The workers block in their init until the rendezvous completes: ask for it on a side
        # thread while this one opens rank 0; both must meet.
        worker_info = {
            "master_address": address,
            "master_port": port,
            "rank_offset": 1,
            "world_size": world_size,
        }
        with ThreadPoolExecutor(max_workers=1) as pool:
            joined = pool.submit(self.client.init_weight_transfer_engine, worker_info)
            self.group = trainer_init(
                {"master_address": address, "master_port": port, "world_size": world_size}
            )
            joined.result()

    def send(self, named_tensors: Mapping[str, Any], ready: Any = None) -> None:
        """One broadcast round of ``named_tensors`` (the client's start, receive and finish around it)."""
        import torch

        device = cuda_device_of(named_tensors)
        if device is not None:
            torch.cuda.set_device(device)
        if ready is not None:
            ready.synchronize()  # the optimizer step that wrote these tensors has finished
        # NCCL needs contiguous device tensors.
        tensors = {n: t.detach().contiguous() for n, t in named_tensors.items()}
        if self.engine is not None:
            # A new source per round: 0.33 caches metadata on the source and compares it
            # with the last round's; the empty one afterwards lets the tensors go.
            self.engine.source = self.source_cls(tensors)
            try:
                self.engine.send_weights()
            finally:
                self.engine.source = self.source_cls({})
        else:
            self._send_static(tensors)

    def _send_static(self, tensors: dict[str, Any]) -> None:
        """vLLM 0.26: start, (receive on the server || packed broadcast here), finish."""
        import threading

        from vllm.distributed.weight_transfer.nccl_engine import (
            NCCLTrainerSendWeightsArgs,
            NCCLWeightTransferEngine,
        )

        info = {
            "names": list(tensors),
            "dtype_names": [str(t.dtype).removeprefix("torch.") for t in tensors.values()],
            "shapes": [list(t.shape) for t in tensors.values()],
            "packed": True,
        }
        self.client.start_weight_update()
        failed: list[BaseException] = []

        def receive() -> None:
            try:
                self.client.update_weights(info)
            except BaseException as e:  # noqa: BLE001 - re-raised below
                failed.append(e)

        # A daemon thread: after a failed broadcast the server's receive never returns, and
        # joining it would turn the error into a hang (the caller tears the group down).
        receiver = threading.Thread(target=receive, name="vf-nccl-receive", daemon=True)
        receiver.start()
        NCCLWeightTransferEngine.trainer_send_weights(
            iter(tensors.items()), NCCLTrainerSendWeightsArgs(group=self.group, packed=True)
        )
        receiver.join()
        if failed:
            raise failed[0]
        self.client.finish_weight_update()

    def close(self) -> None:
        """Destroy the trainer's communicator (0.32+: the engine's ``shutdown``; 0.26 has none)."""
        if self.engine is not None:
            # 0.28-0.31's engine shutdown only drops its reference to the group: destroyed below
            # (pynccl's destroy is idempotent, so 0.32+'s own destroy before is harmless).
            self.group = getattr(self.engine, "model_update_group", None) or self.group
            self.engine.shutdown()
        destroy = getattr(self.group, "destroy", None)
        if callable(destroy):
            destroy()
        self.group = None
