"""Dumps every public name of an installed verifiers 0.1.x release as JSON (tests/compat/).

Executed by a release's oracle Python (``python -I``, so ``import verifiers`` is the release).
Walks ``verifiers``, ``verifiers.types`` and every module under ``verifiers.envs``,
``verifiers.parsers``, ``verifiers.rubrics``, ``verifiers.utils`` and ``verifiers.inference``.
A module's public names are its ``__all__`` plus what its own source defines at top level
(re-exports of a package ``__init__`` count: that is how ``vf.X`` is spelled); names a module
merely imports (``Any``, ``asyncio``) do not. Classes of the env/parser/rubric families also
list their public methods and attributes, ``self.x = ...`` ones included (subclasses read them).
Writes ``{"version", "modules": {path: {"names": {...}}}, "failed": {path: error}}``.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import logging
import pkgutil
import sys
import textwrap
import types
import typing

logging.disable(logging.CRITICAL)

PACKAGES = (
    "verifiers.envs",
    "verifiers.parsers",
    "verifiers.rubrics",
    "verifiers.utils",
    "verifiers.inference",
)
FAMILIES = ("Env", "Parser", "Rubric")  # classes whose members subclasses use


def signature(obj) -> dict | None:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    return {
        "params": [
            {"name": p.name, "kind": p.kind.name, "default": p.default is not inspect.Parameter.empty}
            for p in sig.parameters.values()
        ],
        "coroutine": inspect.iscoroutinefunction(obj),
    }


def self_attributes(cls) -> set[str]:
    """Names assigned as ``self.<name> = ...`` in the class's own methods."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return set()
    found = set()
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for t in targets:
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                found.add(t.attr)
    return found


def members(cls) -> dict:
    out = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith("verifiers"):
            continue
        for name in self_attributes(klass):
            if not name.startswith("_"):
                out.setdefault(name, {"kind": "attribute"})
        for name, value in vars(klass).items():
            if name.startswith("_") or name in out:
                continue
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, property):
                out[name] = {"kind": "attribute"}
            elif inspect.isfunction(value):
                sig = signature(value)
                out[name] = {"kind": "method", "sig": sig}
            else:
                out[name] = {"kind": "attribute"}
    return out


def describe(obj) -> dict:
    if isinstance(obj, types.ModuleType):
        return {"kind": "module"}
    if inspect.isclass(obj):
        entry = {"kind": "class", "sig": signature(obj) if obj.__module__.startswith("verifiers") else None}
        if obj.__module__.startswith("verifiers") and any(f in obj.__name__ for f in FAMILIES):
            entry["members"] = members(obj)
        return entry
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return {"kind": "function", "sig": signature(obj)}
    return {"kind": "value"}


def own_names(module) -> set[str]:
    names = set(getattr(module, "__all__", ()) or ())
    try:
        tree = ast.parse(inspect.getsource(module))
    except (OSError, TypeError, SyntaxError):
        return names
    is_package = hasattr(module, "__path__")
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom) and is_package and (node.module or "").startswith("verifiers"):
            names.update(a.asname or a.name for a in node.names)
    return {n for n in names if not n.startswith("_")}


def walk() -> dict:
    paths = ["verifiers", "verifiers.types"]
    failed = {}
    for pkg in PACKAGES:
        try:
            module = importlib.import_module(pkg)
        except BaseException as e:  # noqa: BLE001
            failed[pkg] = f"{type(e).__name__}: {e}"[:300]
            continue
        paths.append(pkg)
        for info in pkgutil.walk_packages(module.__path__, pkg + ".", onerror=lambda name: None):
            paths.append(info.name)
    out = {}
    for path in paths:
        try:
            module = importlib.import_module(path)
        except BaseException as e:  # noqa: BLE001 - a module needing a hosted service or extra
            failed[path] = f"{type(e).__name__}: {e}"[:300]
            continue
        names = {}
        for name in sorted(own_names(module)):
            try:
                value = getattr(module, name)
            except BaseException:  # noqa: BLE001
                continue
            if isinstance(value, (logging.Logger, typing.TypeVar)):
                continue  # a module's own logger / type variables: never imported by users
            names[name] = describe(value)
        out[path] = {"names": names}
    return {"modules": out, "failed": failed}


if __name__ == "__main__":
    import contextlib

    # Some modules print at import ("vLLM is not installed"): keep stdout for the JSON.
    with contextlib.redirect_stdout(sys.stderr):
        import verifiers

        result = walk()
    result["version"] = getattr(verifiers, "__version__", "?")
    json.dump(result, sys.stdout)
