"""Type checks of TOML config values against dataclass annotations (pydantic, strict), and their wording.

``check_type("trainer.args.max_steps", "5", int)`` raises the one-line ``ConfigError``
``key 'trainer.args.max_steps' must be an integer, got "5" (a string)``.
"""

from __future__ import annotations

import enum
import functools
import json
import types
import typing
from collections.abc import Sequence
from typing import Any

from verifiers.errors import ConfigError


def check_type(path: str, value: Any, tp: Any) -> None:
    """A one-line ``ConfigError`` unless ``value`` (as TOML holds it) is of type ``tp``."""
    if not _matches(value, tp):
        raise ConfigError(f"key '{path}' must be {describe_type(tp)}, got {describe_value(value)}")


def _matches(value: Any, tp: Any) -> bool:
    adapter = _adapter(tp)
    if adapter is None:  # a type TOML cannot express: the dataclass decides
        return True
    import pydantic

    try:
        adapter.validate_python(value, strict=True)  # strict: no "5" -> 5, no true -> 1
    except pydantic.ValidationError:
        return False
    return True


@functools.cache
def _adapter(tp: Any) -> Any:
    """A pydantic ``TypeAdapter`` for what TOML can hold of ``tp``; None where ``tp`` is not expressible."""
    import pydantic

    try:
        return pydantic.TypeAdapter(_as_toml(tp))
    except (pydantic.PydanticSchemaGenerationError, TypeError):
        return None


def _as_toml(tp: Any) -> Any:
    """``tp`` as TOML values come: sequences are lists, an enum is its string (the dataclass
    checks the choice and names the valid ones), ``None`` is never written."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        kept = tuple(_as_toml(a) for a in args if a is not type(None))
        return Any if Any in kept else functools.reduce(lambda a, b: a | b, kept)
    if origin in (list, tuple, set, Sequence) or tp in (list, tuple, set):
        return list[_as_toml(args[0])] if args else list
    if origin is dict:
        return dict
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return str
    return tp


_TYPE_WORDS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", dict: "a table"}


def describe_type(tp: Any) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(describe_type(a) for a in args if a is not type(None)))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (list, tuple, set, Sequence):
        inner = describe_type(args[0]) if args else "values"
        return f"a list of {inner.removeprefix('a ').removeprefix('an ')}s"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "a string"
    return _TYPE_WORDS.get(origin or tp, getattr(tp, "__name__", str(tp)))


def describe_value(value: Any) -> str:
    """A value as TOML would show it, and its TOML kind: ``"5" (a string)``."""
    if isinstance(value, dict):
        shown = "{...}"
    elif isinstance(value, bool):
        shown = "true" if value else "false"
    elif isinstance(value, (str, list)):
        shown = json.dumps(value)
    else:
        shown = repr(value)
    kind = {**_TYPE_WORDS, list: "a list"}.get(type(value), type(value).__name__)
    return f"{shown} ({kind})"
