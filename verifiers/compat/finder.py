"""The import hook that serves the old module paths of ``verifiers.compat.paths``.

``install()`` appends one finder to ``sys.meta_path`` (``import verifiers`` calls it; it
imports nothing else). The finder comes after the normal ones: a module that exists as a
file always wins, and the finder is asked only about names no other finder knows, which
it answers from the table with one set lookup.

It also gives the modules below compat that 0.1.x names are refused on (``REFUSING_ON_LOAD``:
types and utils import nothing from compat) their refusing ``__getattr__``:
those loaded already when ``install()`` runs at once, the others as they load (a second
finder, first on ``sys.meta_path``, asked about those names only).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import CodeType, ModuleType
from typing import Any

from verifiers.compat.paths import MOVED, NEEDS_EXTRA, OLD_PATHS, REEXPORTED
from verifiers.compat.refused import REFUSED_MODULES, refuse, refusing_getattr

REFUSING_ON_LOAD: frozenset[str] = frozenset(
    {"verifiers.types", "verifiers.utils.async_utils", "verifiers.utils.message_utils"}
)
"""Modules with names in ``REFUSED_NAMES`` that sit below compat (they import nothing from it), so
the hook gives them ``refusing_getattr``, after their own ``__getattr__`` where they have one
(any other module with refused names sets it itself)."""

# Refused modules are served too (a module whose every name is refused), unless the path moved.
_SERVED: frozenset[str] = OLD_PATHS | frozenset(REFUSED_MODULES)
_PACKAGES: frozenset[str] = frozenset(p for p in _SERVED if any(q.startswith(p + ".") for q in _SERVED))


def _import(module: str, feature: str, extra: str | None) -> ModuleType:
    if extra is None:
        return importlib.import_module(module)
    from verifiers.utils.extras import import_with_extra

    return import_with_extra(module, feature, extra)


def _resolve(old: str, name: str) -> Any:
    """``name`` of the old module ``old``, from where it lives now."""
    source = REEXPORTED[old][name]
    # "verifiers": one of the lazy top-level names; it raises MissingExtraError itself.
    extra = None if source == "verifiers" else NEEDS_EXTRA.get(old)
    return getattr(_import(source, f"{old}.{name}", extra), name)


def _refused_module(old: str) -> ModuleType:
    module = ModuleType(
        old, f"Old module path ``{old}``: not part of verifiers 0.2 ({REFUSED_MODULES[old]})."
    )
    module.__getattr__ = refusing_getattr(old)
    module.__all__ = []
    return module


def _reexporting_module(old: str) -> ModuleType:
    names = REEXPORTED[old]
    module = ModuleType(old, f"Old module path ``{old}``: its names, resolved from where they live now.")

    def __getattr__(name: str) -> Any:
        if name not in names:
            refuse(old, name)  # a refused name of the old module, else AttributeError
        value = _resolve(old, name)
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(module.__dict__) | set(names))

    module.__all__ = list(names)
    module.__getattr__ = __getattr__
    module.__dir__ = __dir__
    return module


class OldPathLoader(importlib.abc.Loader):
    """Loads an old path: the module it moved to, or a module of its re-exported names."""

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        if spec.name in REEXPORTED:
            return _reexporting_module(spec.name)
        if spec.name in REFUSED_MODULES and spec.name not in MOVED:
            return _refused_module(spec.name)
        return None  # a placeholder; exec_module puts the real module in its place

    def exec_module(self, module: ModuleType) -> None:
        old = module.__name__
        extra = NEEDS_EXTRA.get(old)
        if old in MOVED:
            # The import system returns whatever sys.modules holds once this returns:
            # the moved module itself, not a copy.
            sys.modules[old] = _import(MOVED[old], old, extra)
        elif extra is not None and old in REEXPORTED:
            for name in REEXPORTED[old]:  # imported the training stack at import, as before
                getattr(module, name)

    def get_code(self, fullname: str) -> CodeType | None:
        """The moved module's code: ``python -m <old path>`` runs it."""
        if fullname not in MOVED:
            return None
        spec = importlib.util.find_spec(MOVED[fullname])
        loader = spec.loader if spec else None
        return loader.get_code(MOVED[fullname]) if isinstance(loader, importlib.abc.InspectLoader) else None


class OldPathFinder(importlib.abc.MetaPathFinder):
    """Finds the old module paths of ``verifiers.compat.paths`` and the refused modules of
    ``verifiers.compat.refused`` (and nothing else)."""

    loader = OldPathLoader()

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _SERVED:
            return None
        spec = importlib.machinery.ModuleSpec(fullname, self.loader, is_package=fullname in _PACKAGES)
        if fullname in MOVED:
            # The moved module's file, so that ``python -m <old path>`` runs with its ``__file__``.
            moved = importlib.util.find_spec(MOVED[fullname])
            if moved is not None and moved.has_location:
                spec.origin, spec.has_location = moved.origin, True
        return spec


def _give_refusing_getattr(module: ModuleType) -> None:
    """``module.__getattr__`` refuses its refused names: after its own ``__getattr__``, if it has one."""
    own = module.__dict__.get("__getattr__")
    if getattr(own, "_vf_refusing", False):
        return  # given already
    refusing = refusing_getattr(module.__name__)
    if own is None:
        combined = refusing
    else:

        def combined(name: str) -> Any:
            try:
                return own(name)
            except AttributeError:
                return refusing(name)

    combined._vf_refusing = True  # type: ignore[attr-defined]
    module.__getattr__ = combined  # type: ignore[method-assign]


class _RefusingLoader(importlib.abc.Loader):
    """The module's own loader, then its refusing ``__getattr__``; everything else is the own loader's."""

    def __init__(self, loader: Any):
        self._loader = loader

    def __getattr__(self, name: str) -> Any:  # get_code, get_source, get_filename, ...
        return getattr(self._loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _give_refusing_getattr(module)


class RefusingOnLoadFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of ``REFUSING_ON_LOAD`` where they are, and loads them through ``_RefusingLoader``."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in REFUSING_ON_LOAD:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _RefusingLoader(spec.loader)
        return spec


def install() -> None:
    """Serve the old module paths from now on (once per interpreter)."""
    if not any(isinstance(f, OldPathFinder) for f in sys.meta_path):
        sys.meta_path.append(OldPathFinder())
    if not any(isinstance(f, RefusingOnLoadFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, RefusingOnLoadFinder())
    for name in REFUSING_ON_LOAD:
        if name in sys.modules:
            _give_refusing_getattr(sys.modules[name])
