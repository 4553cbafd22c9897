"""CUDA IPC handles as JSON: what the trainer sends to ``/vf/weights/ipc`` and the worker reads.

The trainer (verifiers/inference/client/ipc_update.py) encodes the arguments of torch's
``rebuild_cuda_tensor`` with :func:`encode_handles`; the worker extension
(verifiers/inference/server/worker.py) decodes them with :func:`decode_handles`: bytes
as base64, dtypes and the classes by name from an allow-list, so no pickle crosses the
wire. Both processes need this one format, so it lives beside them, not in either.
"""

from __future__ import annotations

import base64
from typing import Any

# The classes reduce_tensor puts in a handle (tensor class, storage class): nothing else is rebuilt.
_CLASSES = ("Tensor", "Parameter", "TypedStorage", "UntypedStorage")


def _class(name: str) -> Any:
    import torch

    if name not in _CLASSES:
        raise ValueError(f"IPC handle names class {name!r}; only {_CLASSES} are accepted")
    return {
        "Tensor": torch.Tensor,
        "Parameter": torch.nn.Parameter,
        "TypedStorage": torch.storage.TypedStorage,
        "UntypedStorage": torch.UntypedStorage,
    }[name]


def encode_value(v: Any) -> Any:
    """One argument of ``rebuild_cuda_tensor`` as JSON: bytes, dtypes and classes tagged."""
    if isinstance(v, (bytes, bytearray)):
        return {"b64": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, type):
        return {"cls": v.__name__}
    if type(v).__name__ == "dtype" and type(v).__module__ == "torch":
        return {"dtype": str(v).removeprefix("torch.")}
    if isinstance(v, (list, tuple)):  # torch.Size is a tuple
        return [encode_value(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise TypeError(f"cannot encode {type(v).__name__} in an IPC handle")


def decode_value(v: Any) -> Any:
    if isinstance(v, dict):
        if "b64" in v:
            return base64.b64decode(v["b64"])
        if "cls" in v:
            return _class(str(v["cls"]))
        if "dtype" in v:
            import torch

            dtype = getattr(torch, str(v["dtype"]), None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"IPC handle names dtype {v['dtype']!r}, not a torch dtype")
            return dtype
        raise ValueError(f"unknown tagged value in an IPC handle: {sorted(v)}")
    if isinstance(v, list):
        return [decode_value(x) for x in v]
    return v


def encode_handles(handles: list[dict[str, tuple]]) -> list[dict[str, list]]:
    """``[{gpu_uuid: rebuild_cuda_tensor args}]`` (one per tensor) as JSON-safe lists."""
    return [{str(k): encode_value(list(args)) for k, args in h.items()} for h in handles]


def decode_handles(encoded: list[dict[str, list]]) -> list[dict[str, tuple]]:
    """The inverse of :func:`encode_handles`: tuples ``rebuild_cuda_tensor`` takes.

    Layout (torch's ``reduce_tensor``): ``[tensor_cls, size, stride, offset,
    storage_cls, dtype, device, handle, size_bytes, offset_bytes, requires_grad,
    ref_counter_handle, ref_counter_offset, event_handle, event_sync_required]``.
    """
    import torch

    out: list[dict[str, tuple]] = []
    for h in encoded:
        one: dict[str, tuple] = {}
        for gpu, args in h.items():
            a = decode_value(args)
            if len(a) != 15:
                raise ValueError(f"IPC handle for {gpu} has {len(a)} fields; torch's reduce_tensor gives 15")
            a[1], a[2] = torch.Size(a[1]), tuple(a[2])
            one[gpu] = tuple(a)
        out.append(one)
    return out
