"""The trainer's side of a vf-vllm server: what runs in the trainer's process.

- ``vllm_client.py``: ``VLLMClient``, the trainer's handle on one server (health, weight updates, adapters).
- ``transport.py``: which transport an update takes, its tensors cut into pieces, the shm staging files.
- ``adapters.py``: a LoRA adapter as a PEFT folder or an upload blob.
- ``nccl_update.py``, ``nccl_sender.py``, ``ipc_update.py``: the sending side of the GPU weight transfers.
- ``recovery.py``: waiting out a lost server, then re-syncing.

Nothing here imports ``verifiers.inference.server`` (the other process); what both need is in
``verifiers.inference`` itself (``wire.py``, ``safetensors_writer.py``, ``names.py``, ``ipc_handles.py``). The names
below are those of the 0.2 module ``verifiers.inference.client``, imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verifiers.utils.extras import lazy_getattr

_NAMES = {
    **dict.fromkeys(("VLLMClient", "is_server_lost"), "verifiers.inference.client.vllm_client"),
    "ADMIN_HEADER": "verifiers.inference.wire",  # shared with the server: one definition
}

__all__ = list(_NAMES)

__getattr__ = lazy_getattr(__name__, _NAMES)

if TYPE_CHECKING:  # pragma: no cover
    from verifiers.inference.client.vllm_client import VLLMClient, is_server_lost  # noqa: F401
    from verifiers.inference.wire import ADMIN_HEADER  # noqa: F401
