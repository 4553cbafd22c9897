"""An adapter uploaded over HTTP (``PUT /vf/lora/upload/{name}``), written out as the PEFT folder vLLM loads.

The blob is what the trainer's ``adapters.lora_blob`` makes (verifiers/inference/client/adapters.py):
one safetensors file whose metadata carries the adapter config under ``ADAPTER_CONFIG_KEY``. The
folder is named and owned as the trainer's own adapter folders are (verifiers/inference/wire.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from verifiers.inference.safetensors_writer import write_safetensors
from verifiers.inference.wire import ADAPTER_CONFIG_KEY, new_lora_dir, transfer_dir


def unpack_lora_blob(data: bytes, root: Path | None = None) -> Path:
    """Write the blob out as a PEFT folder, owned by this process as the trainer's
    ``write_lora_dir`` folders are by theirs."""
    import struct

    from safetensors.torch import load

    (header_len,) = struct.unpack("<Q", data[:8])
    config = json.loads(json.loads(data[8 : 8 + header_len])["__metadata__"][ADAPTER_CONFIG_KEY])
    tensors = load(data)
    with new_lora_dir(root or transfer_dir(len(data))) as out:
        (out / "adapter_config.json").write_text(json.dumps(config))
        write_safetensors(tensors, out / "adapter_model.safetensors")
    return out
