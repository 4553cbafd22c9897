"""Inference: the ``vf-vllm`` server's additions to vLLM, and the trainer's client of it, one package per process.

- ``server/``: what runs in the vLLM process (routes, state, worker extension, the server's main).
- ``client/``: what runs in the trainer (``VLLMClient``, choosing a transport and sending the
  weights over it, waiting out a lost server).
- What both must agree on lives here: ``wire.py`` (the protocol's names: transports, transfer file
  names, admin header; where transfer files live and who removes what a killed process left),
  ``safetensors_writer.py`` (the files both write), ``names.py`` (the served checkpoint's parameter
  names), ``ipc_handles.py`` (CUDA IPC handles as JSON).

``server/`` and ``client/`` never import each other, and nothing here imports ``verifiers.training``
(tests/inference/test_layout.py, tests/test_import_graph.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verifiers.utils.extras import lazy_getattr

_NAMES = {"VLLMClient": "verifiers.inference.client.vllm_client"}

__all__ = list(_NAMES)

__getattr__ = lazy_getattr(__name__, _NAMES)

if TYPE_CHECKING:  # pragma: no cover
    from verifiers.inference.client.vllm_client import VLLMClient  # noqa: F401
