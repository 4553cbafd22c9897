"""Checks one public name of a release (an entry of ``release_walk.py``'s JSON) against ours.

A name is fine when ``import <module>`` here (old paths through ``verifiers.compat``) has the
attribute, and a callable's signature is compatible: every parameter the release accepts by
name is accepted here (by that name, or by ``**kwargs``), and every parameter required here is
required there. Methods and attributes of the env/parser/rubric classes are checked the same
way on our class (attributes: on the class, or assigned as ``self.<name>`` in one of its
methods). A method that takes several releases' forms (``verifiers.compat.forms``) is fine when
one of its forms is. A name listed in ``verifiers.compat.refused`` (module, name or member) is
fine too: it is refused in one line when used. ``problems`` returns one line per name that is
not fine.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import textwrap
from typing import Any

from verifiers.compat.forms import forms_of, other_form
from verifiers.compat.paths import MOVED
from verifiers.compat.refused import member_refusal, name_refusal
from verifiers.envs.refused import RefusedEnv

_NAMED = ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY")


def _sig(obj: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


def signature_problem(theirs: dict | None, ours: Any, *, method: bool = False) -> str | None:
    if theirs is None:
        return None
    sig = _sig(ours)
    if sig is None:
        return None
    params = list(sig.parameters.values())
    their_params = theirs["params"]
    if method and their_params and their_params[0]["name"] in ("self", "cls"):
        their_params = their_params[1:]
    if method and params and params[0].name in ("self", "cls"):
        params = params[1:]
    by_name = {p.name: p for p in params}
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    var_pos = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    required_there = {p["name"] for p in their_params if not p["default"] and p["kind"] in _NAMED}
    required_there |= {p["name"] for p in their_params if p["kind"] == "POSITIONAL_ONLY" and not p["default"]}
    for p in their_params:
        if p["kind"] in _NAMED:
            mine = by_name.get(p["name"])
            if mine is None and not var_kw:
                return f"does not accept {p['name']}="
            if mine is not None and mine.kind is inspect.Parameter.POSITIONAL_ONLY:
                return f"takes {p['name']} only by position"
    # Positional callers: the release's positional parameters, in order, are ours too.
    their_pos = [p["name"] for p in their_params if p["kind"] in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")]
    our_pos = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    for i, name in enumerate(their_pos):
        if name not in required_there:
            continue  # optional ones are nearly always passed by name
        if i >= len(our_pos):
            if not var_pos:
                return f"does not take {name} as positional argument {i + 1}"
        elif our_pos[i] != name:
            return f"positional argument {i + 1} is {our_pos[i]} here, {name} there"
    for p in params:
        if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            if p.name not in required_there:
                return f"requires {p.name}, which the release does not"
    return None


@functools.cache
def _self_attributes(cls: type) -> frozenset[str]:
    found: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("verifiers"):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    found.add(t.attr)
    return frozenset(found)


def compatible(theirs: dict | None, ours: Any, *, method: bool = False) -> str | None:
    """``signature_problem`` against ours and each other form it takes (``compat.forms``): None
    when any one of them takes the release's calls."""
    first = signature_problem(theirs, ours, method=method)
    if first is None or any(signature_problem(theirs, f, method=method) is None for f in forms_of(ours)):
        return None
    return first


def member_problem(cls: type, name: str, entry: dict) -> str | None:
    if member_refusal(cls, name) is not None:
        return None
    if entry["kind"] == "attribute":
        if hasattr(cls, name) or name in _self_attributes(cls):
            return None
        return "missing attribute"
    value = inspect.getattr_static(cls, name, None)
    if value is None:
        return "missing method"
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if not callable(value):
        return "not a method here"
    bad = compatible(entry.get("sig"), value, method=True)
    return None if bad is not None and other_form(cls, name) is not None else bad


def problems(module: str, names: dict[str, dict]) -> tuple[int, list[str]]:
    """``(names checked, one line per name neither resolved nor refused)`` for one module."""
    checked, out = 0, []
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        mod, import_error = None, f"{type(e).__name__}: {e}"
    for name, entry in names.items():
        checked += 1
        if name_refusal(module, name) is not None or name_refusal(MOVED.get(module, ""), name) is not None:
            continue
        if mod is None:
            out.append(f"{module}.{name}: module does not import ({import_error[:120]})")
            continue
        if entry["kind"] == "module":
            continue  # submodules are walked as modules of their own
        try:
            ours = getattr(mod, name)
        except AttributeError:
            out.append(f"{module}.{name}: missing")
            continue
        except Exception as e:  # noqa: BLE001 - a lazy name whose extra is missing resolves elsewhere
            if type(e).__name__ == "MissingExtraError":
                continue
            raise
        if inspect.isclass(ours) and issubclass(ours, RefusedEnv):
            checked += len(entry.get("members") or {})
            continue  # refused when constructed (verifiers.envs.refused): its members are never reached
        if entry["kind"] in ("class", "function"):
            bad = compatible(entry.get("sig"), ours)
            if bad:
                out.append(f"{module}.{name}: {bad}")
        for member, m_entry in (entry.get("members") or {}).items():
            checked += 1
            if not inspect.isclass(ours):
                out.append(f"{module}.{name}.{member}: {name} is not a class here")
                continue
            bad = member_problem(ours, member, m_entry)
            if bad:
                out.append(f"{module}.{name}.{member}: {bad}")
    return checked, out
