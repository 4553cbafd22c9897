"""Turn a Python function into an OpenAI tool schema.

The schema comes from the signature (parameter names, defaults), the type hints
(JSON Schema types) and the docstring: its summary becomes the tool
description and a Google-style ``Args:`` section gives each parameter's
description::

    def search(query: str, limit: int = 5) -> list[str]:
        '''Search the corpus.

        Args:
            query: What to look for.
            limit (int): How many hits to return.
        '''
"""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from typing import Any

_SECTION = re.compile(
    r"^\s*(Args|Arguments|Parameters|Params|Returns|Return|Yields|Raises|Examples?|Notes?|Attributes|See Also)\s*:\s*$",
    re.IGNORECASE,
)
_ARG_LINE = re.compile(r"^(\*{0,2}\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")

_SCALARS: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}


def tool_name(fn: Callable[..., Any]) -> str:
    """The name the model calls ``fn`` by."""
    name = getattr(fn, "__name__", None)
    if name is None and hasattr(fn, "func"):  # functools.partial
        name = getattr(fn.func, "__name__", None)
    return name or type(fn).__name__


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str], str]:
    """Split a Google-style docstring into (summary, {arg: description}, returns text)."""
    if not doc:
        return "", {}, ""
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    args: dict[str, str] = {}
    returns: list[str] = []
    section = None
    current: str | None = None
    arg_indent: int | None = None
    for line in lines:
        m = _SECTION.match(line)
        if m:
            section = m.group(1).lower()
            current, arg_indent = None, None
            continue
        if section is None:
            summary.append(line)
        elif section in ("args", "arguments", "parameters", "params"):
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            am = _ARG_LINE.match(line.strip())
            # A new argument starts at the section's first indentation level; deeper lines continue it.
            if am and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                current = am.group(1).lstrip("*")
                args[current] = am.group(3).strip()
            elif current is not None:
                args[current] = f"{args[current]} {line.strip()}".strip()
        elif section in ("returns", "return") and line.strip():
            returns.append(line.strip())
    # The summary is the text before the first section, paragraphs joined by one space.
    text = " ".join(s.strip() for s in summary if s.strip())
    return text, args, " ".join(returns)


def type_to_schema(tp: Any) -> dict[str, Any]:
    """JSON Schema for a Python type hint (unknown types give ``{}``, i.e. anything)."""
    if tp is inspect.Parameter.empty or tp is Any:
        return {}
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    origin = typing.get_origin(tp)
    targs = typing.get_args(tp)
    if origin is typing.Literal:
        values = list(targs)
        schema: dict[str, Any] = {"enum": values}
        kinds = {type(v) for v in values}
        if len(kinds) == 1 and next(iter(kinds)) in _SCALARS:
            schema["type"] = _SCALARS[next(iter(kinds))]
        return schema
    if origin is typing.Union or (hasattr(types, "UnionType") and origin is types.UnionType):
        options = [a for a in targs if a is not type(None)]
        if len(options) == 1:  # Optional[X]: the null is expressed by the default, not the type
            return type_to_schema(options[0])
        return {"anyOf": [type_to_schema(a) for a in options]}
    if origin is typing.Annotated:
        return type_to_schema(targs[0])
    if tp in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset, Iterable, Sequence):
        schema = {"type": "array"}
        if targs and targs[0] is not Ellipsis:
            item = type_to_schema(targs[0])
            if item:
                schema["items"] = item
        return schema
    if tp is dict or origin is dict:
        schema = {"type": "object"}
        if len(targs) == 2:
            value = type_to_schema(targs[1])
            if value:
                schema["additionalProperties"] = value
        return schema
    return {}


def _type_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    target = fn.func if hasattr(fn, "func") and not inspect.isfunction(fn) else fn
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception:
        # Unresolvable forward references: fall back to the raw annotations (strings become "anything").
        raw = getattr(target, "__annotations__", {}) or {}
        return {k: v for k, v in raw.items() if not isinstance(v, str)}


def function_to_tool_schema(fn: Callable[..., Any], args_to_skip: Iterable[str] = ()) -> dict[str, Any]:
    """The OpenAI tool schema (``{"type": "function", "function": {...}}``) for ``fn``.

    ``args_to_skip`` are parameters the environment injects itself (see
    ``StatefulToolEnv.add_tool``); they are hidden from the model.
    """
    skip = set(args_to_skip)
    summary, arg_docs, returns = parse_docstring(inspect.getdoc(fn))
    hints = _type_hints(fn)
    sig = inspect.signature(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in sig.parameters.items():
        if name in skip or name in ("self", "cls"):
            continue
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        prop = dict(type_to_schema(hints.get(name, param.annotation)))
        if name in arg_docs and arg_docs[name]:
            prop["description"] = arg_docs[name]
        if param.default is inspect.Parameter.empty:
            required.append(name)
        elif param.default is None or isinstance(param.default, (str, int, float, bool)):
            prop["default"] = param.default
        properties[name] = prop
    description = summary
    if returns:
        description = f"{summary} Returns: {returns}".strip()
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return {
        "type": "function",
        "function": {"name": tool_name(fn), "description": description, "parameters": parameters},
    }


# 0.1.x name for the same thing.
convert_func_to_oai_tool = function_to_tool_schema


def format_tool_result(result: Any) -> str:
    """A tool's return value as the text of its ``role: "tool"`` message (JSON for dicts and lists)."""
    import json

    if isinstance(result, str):
        return result
    if isinstance(result, (dict, list)):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            pass
    return str(result)


ToolCallRound = Sequence[tuple[str, dict[str, Any], Any]]
"""One assistant turn's tool calls: ``(tool name, arguments, the tool's return value)`` each."""


def tool_call_example(
    question: str, rounds: Sequence[ToolCallRound], answer: str, tag: str = "example"
) -> list[dict[str, Any]]:
    """A worked tool-use exchange as chat messages, for an environment's ``few_shot``.

    For each round, one assistant message with those ``tool_calls`` and one
    ``role: "tool"`` message per call (the return value written as ``ToolEnv``
    writes it); then the assistant's final ``answer``. The chat template renders
    them in the model's own tool format (verifiers' Hermes fallback where the
    model's template drops tools), so a small model sees the call format used, not
    only described: SmolLM2-135M made no tool call with the schema and instructions
    alone, and called the calculator in about a fifth of its replies after two such
    exchanges (environments/calculator). ``tag`` keeps call ids unique across examples.
    """
    import json

    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    for r, calls in enumerate(rounds):
        ids = [f"{tag}_{r}_{i}" for i in range(len(calls))]
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
                    for cid, (name, args, _) in zip(ids, calls, strict=True)
                ],
            }
        )
        messages += [
            {"role": "tool", "content": format_tool_result(result), "tool_call_id": cid}
            for cid, (_, _, result) in zip(ids, calls, strict=True)
        ]
    messages.append({"role": "assistant", "content": answer})
    return messages
