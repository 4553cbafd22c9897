"""Public names of verifiers 0.1.x releases that this library does not offer, each with its reason.

Three tables, one per kind of name, each entry saying why the name is not here and what to do
instead:

* ``REFUSED_MODULES``: old module paths none of whose names is offered (hosted services,
  upstream's own command-line tooling). ``import <path>`` works (the import hook of
  ``verifiers.compat.finder`` makes the module), so a module that only imports it loads; using
  any of its names is refused.
* ``REFUSED_NAMES``: ``(module, name)`` for single names of modules that exist here. The module's
  ``__getattr__`` (``refusing_getattr``) refuses them on first use.
* ``REFUSED_MEMBERS``: ``(class, member)`` for attributes and methods of our env, rubric and
  parser classes (``class`` is the ``__name__`` of the class of ours the member would be on; its
  subclasses inherit the entry). ``Environment.__getattr__`` and ``Rubric.__getattr__`` refuse
  them on first use.

A refused module name is a ``RefusedNameError`` (an ``ImportError``: what ``from module import
name`` raises for a missing name, so code that guards an optional import keeps working); a
refused member is a ``RefusedMemberError`` (an ``AttributeError``, so ``hasattr`` and
``getattr(obj, name, default)`` answer as for a missing one). Both are one line. The release
walk (tests/compat/) accepts a name of a release only if it resolves here with a compatible
signature or is listed here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from verifiers.errors import VerifiersError

_OWN_TOOL = "write it as your own tool function (any Python function with a docstring works with vf.ToolEnv)"

REFUSED_MODULES: dict[str, str] = {
    # -- verifiers.utils.* -----------------------------------------------------------------------

    # -- verifiers.envs.experimental.* -----------------------------------------------------------

    # -- other ------------------------------------------------------------------------------------
}

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
    # -- verifiers and verifiers.types -------------------------------------------------------
    # -- verifiers.utils.* ---------------------------------------------------------------------
    # -- verifiers.envs.* (module-level names) -------------------------------------------------
}

REFUSED_MEMBERS: dict[tuple[str, str], str] = {
    # -- Environment and its subclasses ----------------------------------------------------------
    # -- Rubric and its subclasses ---------------------------------------------------------------
    # -- SandboxEnv, PythonEnv -------------------------------------------------------------------
}


class RefusedNameError(VerifiersError, ImportError):
    """A public name of a 0.1.x release that is not offered here (``REFUSED_NAMES`` says why)."""


class RefusedMemberError(VerifiersError, AttributeError):
    """A member of a 0.1.x class that is not offered here (``REFUSED_MEMBERS`` says why)."""


def name_refusal(module: str, name: str) -> str | None:
    """Why ``module.name`` is refused, or None when it is not."""
    return REFUSED_NAMES.get((module, name)) or REFUSED_MODULES.get(module)


def refuse(module: str, name: str) -> NoReturn:
    """Raise the one-line error for a refused name (``AttributeError`` for a name never public)."""
    reason = name_refusal(module, name)
    if reason is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    raise RefusedNameError(f"{module}.{name} is not part of verifiers 0.2: {reason}")


def refusing_getattr(module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` that refuses the module's names of ``REFUSED_NAMES``."""

    def __getattr__(name: str) -> Any:
        refuse(module, name)

    return __getattr__


def member_refusal(cls: type, name: str) -> str | None:
    """Why ``name`` is refused on ``cls`` (an entry of any class of its MRO), or None."""
    for klass in cls.__mro__:
        reason = REFUSED_MEMBERS.get((klass.__name__, name))
        if reason is not None:
            return reason
    return None


def refuse_member(obj: Any, name: str) -> NoReturn:
    """Raise the one-line error for a refused member of ``obj`` (plain ``AttributeError`` otherwise)."""
    cls = obj if isinstance(obj, type) else type(obj)
    reason = None if name.startswith("__") else member_refusal(cls, name)
    if reason is None:
        raise AttributeError(f"{cls.__name__!r} object has no attribute {name!r}")
    raise RefusedMemberError(
        f"{cls.__name__}.{name} (verifiers 0.1.x) is not part of verifiers 0.2: {reason}"
    )
