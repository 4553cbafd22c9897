"""The ``vf-vllm`` server: what runs in the vLLM process (its API server and its workers).

- ``main.py``: the server's main (``vf-vllm``'s parser and its choices, then vLLM's server with vf's routes).
- ``routes.py``: the ``/vf/...`` routes, one function each; ``state.py``: their shared state.
- ``worker.py``: the vLLM worker extension that loads the trainer's weights; ``adapter_upload.py``:
  an adapter uploaded over HTTP written out as a folder.
- ``kv_cache.py``, ``cpu_binding.py``, ``vllm_flags.py``, ``vllm_version.py``: choices made before vLLM starts.
- ``files.py``, ``parent_watch.py``, ``log_filter.py``: what the server leaves behind, its end with its
  launcher, and its log.

Nothing here imports ``verifiers.inference.client`` (the trainer's process); what both need is in
``verifiers.inference`` itself. The names below are those of the 0.2 module
``verifiers.inference.server``, imported on first use (fastapi is the server's, and this
package is imported by every vLLM process through the plugin in ``parent_watch.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verifiers.utils.extras import lazy_getattr

_STATE = "verifiers.inference.server.state"
_ROUTES = "verifiers.inference.server.routes"
_NAMES = {
    "ADMIN_HEADER": "verifiers.inference.wire",  # shared with the client: one definition
    **dict.fromkeys(("RouteError", "Settings", "State", "Update", "check_admin", "is_loopback"), _STATE),
    **dict.fromkeys(("attach", "build_router", "cleanup"), _ROUTES),
}

__all__ = list(_NAMES)

__getattr__ = lazy_getattr(__name__, _NAMES, extra=None)

if TYPE_CHECKING:  # pragma: no cover
    from verifiers.inference.server.routes import attach, build_router, cleanup  # noqa: F401
    from verifiers.inference.server.state import (  # noqa: F401
        RouteError,
        Settings,
        State,
        Update,
        check_admin,
        is_loopback,
    )
    from verifiers.inference.wire import ADMIN_HEADER  # noqa: F401
