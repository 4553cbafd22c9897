"""Importing a module whose third-party dependencies come with a pip extra (``train``, ``envs``), now or lazily."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

from verifiers.errors import MissingExtraError


def import_with_extra(module: str, feature: str, extra: str = "train") -> ModuleType:
    """Import ``module``; a missing third-party package raises ``MissingExtraError`` naming ``extra``.

    ``feature`` is what the caller asked for (``verifiers.GRPOTrainer``), named in the
    message. Only a missing dependency maps to the extra: an import error inside
    verifiers itself is a bug and surfaces unchanged.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name and not err.name.startswith("verifiers"):
            raise MissingExtraError(feature, extra, err) from err
        raise


def lazy_getattr(package: str, names: Mapping[str, str], extra: str | None = "train") -> Callable[[str], Any]:
    """A package's module ``__getattr__`` that imports each of ``names`` (name -> module) on first use.

    Keeps ``import <package>`` light: torch and friends load when a name is used, and a
    missing dependency raises ``MissingExtraError`` naming ``extra`` (None: plain import).
    The value is cached in the package, so the lookup runs once per name.
    """

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if extra is None:
            module = importlib.import_module(names[name])
        else:
            module = import_with_extra(names[name], f"{package}.{name}", extra)
        value = getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
