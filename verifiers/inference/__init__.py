"""Inference: the ``vf-vllm`` server's additions to vLLM, and the trainer's client of it.

Server side (runs inside vLLM): ``server.py``, ``server_state.py``, ``worker.py``,
``cpu_binding.py``, ``kv_cache.py``, ``vllm_flags.py``, ``vllm_version.py``. Client side
(runs in the trainer): ``client.py`` (``VLLMClient``), ``transport.py``, ``nccl_update.py``,
``ipc_update.py``. Nothing here imports ``verifiers.training`` except the weight names
(``verifiers/inference/names.py``), which both sides must agree on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verifiers.utils.extras import lazy_getattr

_NAMES = {"VLLMClient": "verifiers.inference.client.vllm_client"}

__all__ = list(_NAMES)

__getattr__ = lazy_getattr(__name__, _NAMES)

if TYPE_CHECKING:  # pragma: no cover
    from verifiers.inference.client.vllm_client import VLLMClient  # noqa: F401
