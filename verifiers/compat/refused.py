"""Public names of verifiers 0.1.x releases that this library does not offer, each with its reason.

``REFUSED_NAMES`` maps ``(module, name)`` (``name`` may be ``Class.member``, or ``*`` for every
name of a module) to why it is not here and what to do instead. The module that would hold the
name refuses it in one line on first use (``refuse``, from its ``__getattr__``), an
``ImportError`` (what ``from module import name`` raises for a missing name, so code that
guards an optional import keeps working). The release walk (tests/compat/) accepts a name of a
release only if it resolves here with a compatible signature or is listed here.
"""

from __future__ import annotations

from typing import NoReturn

from verifiers.errors import VerifiersError

_OWN_TOOL = "write it as your own tool function (any Python function with a docstring works with vf.ToolEnv)"

REFUSED_NAMES: dict[tuple[str, str], str] = {
    ("verifiers.utils.tools", "search"): (
        f"Brave web search (needed the brave package and an API key); {_OWN_TOOL}"
    ),
    ("verifiers.utils.tools", "search_ddg"): (
        f"DuckDuckGo web search (needed the duckduckgo_search package and the network); {_OWN_TOOL}"
    ),
    ("verifiers.utils.tools", "ask"): (
        f"asking an LLM about a web page (needed a DeepInfra API key and the network); {_OWN_TOOL}"
    ),
}


class RefusedNameError(VerifiersError, ImportError):
    """A public name of a 0.1.x release that is not offered here (``REFUSED_NAMES`` says why)."""


def refuse(module: str, name: str) -> NoReturn:
    """Raise the one-line error for a refused name (``AttributeError`` for a name never public)."""
    reason = REFUSED_NAMES.get((module, name)) or REFUSED_NAMES.get((module, "*"))
    if reason is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    raise RefusedNameError(f"{module}.{name} is not part of verifiers 0.2: {reason}")
