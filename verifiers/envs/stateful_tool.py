"""``StatefulToolEnv``: tools that receive per-rollout state the model never sees.

``add_tool(tool, args_to_skip=["session_id"])`` hides those parameters from
the tool's schema (``oai_tools`` / ``tool_defs``); ``update_tool_args`` fills them in
(from ``state``, typically set up in ``setup_state``) before each call. A value the
model sends for a hidden parameter is dropped, so the model cannot forge it.

``update_tool_args`` has two forms, told apart by its signature:

- 0.1.5+: ``update_tool_args(tool_name, tool_args, messages, state, **kwargs)``;
- 0.1.4: ``update_tool_args(tool_args, messages, state, **kwargs)`` (``kwargs["tool_name"]``
  names the tool when the override accepts it).

Either may be sync or async, and may return the new arguments or change them in place
(returning None).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from verifiers.compat.refused import refusing_getattr
from verifiers.envs.tool import ToolEnv
from verifiers.errors import ConfigError
from verifiers.types import Messages, State
from verifiers.utils.async_utils import resolve
from verifiers.utils.tool_utils import function_to_tool_schema, tool_name


class StatefulToolEnv(ToolEnv):
    """Override :meth:`update_tool_args` (sync or async) to inject state into tool calls."""

    def __init__(
        self,
        tools: list[Callable[..., Any]] | None = None,
        max_turns: int = 10,
        error_formatter: Callable[[Exception], str] = str,
        **kwargs: Any,
    ):
        self.skipped_args: dict[str, list[str]] = {}
        super().__init__(tools=tools, max_turns=max_turns, error_formatter=error_formatter, **kwargs)

    def add_tool(self, tool: Callable[..., Any], args_to_skip: list[str] | None = None) -> None:
        """Add ``tool``; ``args_to_skip`` are hidden from the model and set by ``update_tool_args``."""
        skip = list(args_to_skip or [])
        params = inspect.signature(tool).parameters
        missing = [a for a in skip if a not in params]
        if missing:
            raise ConfigError(
                f"args_to_skip {missing} are not parameters of tool {tool_name(tool)!r}",
                hint=f"its parameters are: {', '.join(params)}",
            )
        self._add(tool, function_to_tool_schema(tool, args_to_skip=skip))
        self.skipped_args[tool_name(tool)] = skip

    def update_tool_args(self, *args: Any, **kwargs: Any) -> dict:
        """Return the arguments to call the tool with (see the module for the two forms). Default: unchanged."""
        tool_args = (
            args[1] if len(args) >= 4 or (args and isinstance(args[0], str)) else (args[0] if args else {})
        )
        return tool_args

    async def prepare_tool_args(
        self, tool_name: str, tool_args: dict, messages: Messages, state: State, **kwargs: Any
    ) -> dict:
        hidden = set(self.skipped_args.get(tool_name, []))
        args = {k: v for k, v in tool_args.items() if k not in hidden}
        hook = self.update_tool_args
        if _takes_tool_name_first(hook):
            updated = await resolve(hook(tool_name, args, messages, state, **kwargs))
        else:
            hook_kwargs = dict(kwargs)
            if _accepts(hook, "tool_name"):
                hook_kwargs["tool_name"] = tool_name
            updated = await resolve(hook(args, messages, state, **hook_kwargs))
        return args if updated is None else updated


def _takes_tool_name_first(fn: Callable[..., Any]) -> bool:
    """True for 0.1.5+'s ``update_tool_args(tool_name, tool_args, messages, state, ...)``: four
    positional parameters, or a first one named ``tool_name`` (0.1.4's form has three)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind is p.VAR_POSITIONAL for p in params) and not positional:
        return True  # the default (*args): either form; call it the 0.1.5+ way
    return bool(positional) and (positional[0].name == "tool_name" or len(positional) >= 4)


def _accepts(fn: Callable[..., Any], name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


# Names of upstream's module that are not offered here: refused in one line (verifiers.compat.refused).
__getattr__ = refusing_getattr(__name__)
