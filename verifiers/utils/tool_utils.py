"""Turn a Python function into an OpenAI tool schema.

The schema is the one 0.1.4 sent (tests/parity compares them), so a model
sees the same tool text here: pydantic's JSON schema of the signature, made
strict (every parameter required, no additional properties), with the
docstring's text as the tool description and a Google-style ``Args:`` section
giving each parameter's description::

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


_HEADER = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
_PARAM_SECTIONS = ("args", "arguments", "parameters", "params")


def docstring_parts(doc: str | None) -> tuple[str, dict[str, str]]:
    """``(description, {parameter: description})`` of a Google-style docstring, read as 0.1.4 read it.

    A section is a ``Name:`` line after a blank line, followed by an indented
    block. The description is the text before the first section (paragraphs
    kept); a parameter's description is the text after its ``name:`` (or
    ``name (type):``), continuation lines joined by newlines. Other sections
    (Returns, Raises, notes) are left out.
    """
    if not doc:
        return "", {}
    # Cleaned again, as 0.1.4's docstring reader did: a docstring whose first line is a
    # section header has its indented lines shifted left, so that header is not a section.
    lines = inspect.cleandoc(doc).splitlines()

    def indent(line: str) -> int:
        return len(line) - len(line.lstrip())

    def block(start: int) -> int:
        """End (exclusive) of the indented block that starts at ``start``."""
        end = start
        while end < len(lines) and (not lines[end].strip() or indent(lines[end]) > 0):
            if not lines[end].strip() and (end + 1 >= len(lines) or indent(lines[end + 1]) == 0):
                break
            end += 1
        return end

    def is_header(i: int) -> bool:
        return (
            bool(_HEADER.match(lines[i]))
            and i > 0
            and not lines[i - 1].strip()
            and i + 1 < len(lines)
            and lines[i + 1].strip() != ""
            and indent(lines[i + 1]) > 0
        )

    text: list[str] = []
    args: dict[str, list[str]] = {}
    i = 0
    while i < len(lines) and not is_header(i):
        text.append(lines[i])
        i += 1
    while i < len(lines):
        if not is_header(i):
            i += 1
            continue
        name = _HEADER.match(lines[i]).group(1).strip().lower()
        end = block(i + 1)
        if name in _PARAM_SECTIONS:
            base = min(indent(line) for line in lines[i + 1 : end] if line.strip())
            current: str | None = None
            for line in lines[i + 1 : end]:
                if not line.strip():
                    continue
                am = _ARG_LINE.match(line.strip())
                if am and indent(line) == base:
                    current = am.group(1).lstrip("*")
                    args[current] = [am.group(3).strip()]
                elif current is not None:
                    args[current].append(line.strip())
        i = end
    return "\n".join(text).strip(), {k: "\n".join(v).strip() for k, v in args.items()}


def make_strict(schema: dict[str, Any], root: dict[str, Any] | None = None) -> dict[str, Any]:
    """``schema`` (changed in place) in the form OpenAI's strict mode accepts, as 0.1.4 sent it.

    Every object lists all its properties as required and allows no others,
    ``default: None`` is dropped, a single ``allOf`` is merged into its
    schema, and a ``$ref`` that has sibling keys is expanded. An object that
    allows additional properties (``dict`` parameters) is left as it is; 0.1.4
    refused such a tool (docs/migrating.md).
    """
    root = schema if root is None else root
    for defs_key in ("$defs", "definitions"):
        defs = schema.get(defs_key)
        if isinstance(defs, dict):
            for sub in defs.values():
                if isinstance(sub, dict):
                    make_strict(sub, root)
    if schema.get("type") == "object" and "additionalProperties" not in schema:
        schema["additionalProperties"] = False
    properties = schema.get("properties")
    if isinstance(properties, dict):
        schema["required"] = list(properties)
        schema["properties"] = {k: make_strict(v, root) for k, v in properties.items()}
    if isinstance(schema.get("items"), dict):
        schema["items"] = make_strict(schema["items"], root)
    if isinstance(schema.get("anyOf"), list):
        schema["anyOf"] = [make_strict(v, root) for v in schema["anyOf"]]
    all_of = schema.get("allOf")
    if isinstance(all_of, list):
        if len(all_of) == 1:
            schema.update(make_strict(all_of[0], root))
            schema.pop("allOf")
        else:
            schema["allOf"] = [make_strict(v, root) for v in all_of]
    if "default" in schema and schema["default"] is None:
        schema.pop("default")
    ref = schema.get("$ref")
    if isinstance(ref, str) and len(schema) > 1 and ref.startswith("#/"):
        target: Any = root
        for key in ref[2:].split("/"):
            target = target[key]
        schema.update({**target, **schema})
        schema.pop("$ref")
        return make_strict(schema, root)
    return schema


def _parameters_model(name: str, fields: dict[str, tuple[Any, Any]]) -> Any:
    """A pydantic model of the parameters; a type pydantic cannot describe becomes ``Any``."""
    from pydantic import create_model

    try:
        model = create_model(f"{name}_args", **fields)
        model.model_json_schema()
        return model
    except Exception:
        # 0.1.4 failed to build such a tool; here only that parameter loses its type.
        safe = {}
        for key, (annotation, info) in fields.items():
            try:
                create_model("probe", **{key: (annotation, info)}).model_json_schema()
                safe[key] = (annotation, info)
            except Exception:
                safe[key] = (Any, info)
        return create_model(f"{name}_args", **safe)


def function_to_tool_schema(fn: Callable[..., Any], args_to_skip: Iterable[str] = ()) -> dict[str, Any]:
    """The OpenAI tool schema (``{"type": "function", "function": {...}}``) for ``fn``, as 0.1.4 built it.

    The parameters are pydantic's JSON schema of the signature made strict
    (:func:`make_strict`): every parameter is required (one with a default
    keeps it as ``default``), ``additionalProperties`` is false, and the
    function has ``"strict": true``. Descriptions come from a Google-style
    docstring (:func:`docstring_parts`). ``args_to_skip`` are parameters the
    environment injects itself (see ``StatefulToolEnv.add_tool``); they are
    hidden from the model. ``*args`` / ``**kwargs`` are not offered to the model.
    """
    from pydantic import Field

    skip = set(args_to_skip)
    name = tool_name(fn)
    description, arg_docs = docstring_parts(inspect.getdoc(fn))
    hints = _type_hints(fn)
    fields: dict[str, tuple[Any, Any]] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if pname in skip or pname in ("self", "cls"):
            continue
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        annotation = hints.get(pname, param.annotation)
        if annotation is inspect.Parameter.empty:
            annotation = Any
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[pname] = (annotation, Field(default, description=arg_docs.get(pname)))
    parameters = make_strict(_parameters_model(name, fields).model_json_schema())
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters, "strict": True},
    }


# 0.1.x name for the same thing.
def convert_func_to_oai_tool(func: Callable[..., Any]) -> dict[str, Any]:
    """0.1.x's name (and parameter name) for :func:`function_to_tool_schema`."""
    return function_to_tool_schema(func)


def convert_func_to_tool_def(func: Callable[..., Any]) -> Any:
    """0.1.11+'s provider-neutral tool definition of ``func``: a :class:`Tool` (``name``,
    ``description``, ``parameters``), the same schema ``convert_func_to_oai_tool`` sends."""
    from verifiers.types import Tool

    function = function_to_tool_schema(func)["function"]
    return Tool(name=function["name"], description=function.get("description") or "",
                parameters=function["parameters"])  # fmt: skip


VALID_TOOL_CONTENT_PART_TYPES = frozenset({"text", "image_url"})
"""The content-part types 0.1.10+ accepted as a tool's result given as a list of parts."""


def is_valid_tool_content_parts(value: Any) -> bool:
    """Whether ``value`` is a list of content-part dicts, each of a type in
    :data:`VALID_TOOL_CONTENT_PART_TYPES` (0.1.10+; an empty list is one)."""
    return isinstance(value, list) and all(
        isinstance(part, dict) and part.get("type") in VALID_TOOL_CONTENT_PART_TYPES for part in value
    )


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
