"""Safetensors files and bytes, written directly from CPU tensors (both sides of a weight transfer write them).

The trainer writes the weight files and adapter folders it sends (verifiers/inference/client/); the
server writes an uploaded adapter out as a folder (verifiers/inference/server/adapter_upload.py).
torch is imported lazily.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_DTYPE_CODES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64"}


def layout(entries: list[tuple[str, tuple[int, ...], Any]], metadata: dict[str, str] | None = None):
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


def raw_bytes(t: Any) -> Any:
    """A tensor's bytes as a flat uint8 numpy view (bf16 included, which numpy lacks)."""
    import torch

    return t.detach().reshape(-1).contiguous().view(torch.uint8).numpy()


def write_safetensors(tensors: Mapping[str, Any], path: Path, metadata: dict[str, str] | None = None) -> Path:
    """Write CPU ``tensors`` to ``path`` atomically (a reader never sees half a file)."""
    head, spans = layout([(n, tuple(t.shape), t.dtype) for n, t in tensors.items()], metadata)
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb") as fh:
        fh.write(head)
        for name, _, _ in spans:
            fh.write(raw_bytes(tensors[name]).data)
    os.replace(tmp, path)
    return path


def safetensors_bytes(tensors: Mapping[str, Any], metadata: dict[str, str] | None = None) -> bytes:
    head, spans = layout([(n, tuple(t.shape), t.dtype) for n, t in tensors.items()], metadata)
    return b"".join([head, *(raw_bytes(tensors[name]).tobytes() for name, _, _ in spans)])
