"""``ToolEnv``: the model calls Python functions through OpenAI tool calls.

Each tool's schema comes from its signature, type hints and docstring
(``verifiers.utils.tool_utils``). After every assistant turn with
``tool_calls``, each call runs (async tools on the loop, sync tools in a worker
thread) and its result goes back as a ``role: "tool"`` message. Problems the
model caused (unknown tool, arguments that are not a JSON object, a tool that
raises or runs past ``tool_timeout``) become error text for the model, not
exceptions. A call that runs past ``tool_timeout`` is also counted in the
rollout's ``state["tool_timeouts"]`` (the trainer's metric ``errors/tool_timeout``)
and logged once per tool. The rollout ends when the assistant calls no tool
(``state["stop_condition"] = "no_tools_called"``, as 0.1.8+ names it).

0.1.5+ additions: ``remove_tool``; ``tool_defs`` (the schemas the model sees, as
``{name, description, parameters}`` records that read as attributes); ``stop_errors``
(exception types that end the rollout instead of becoming error text, raised as
``ToolCallError`` / ``ToolParseError``); and active tools: each rollout's tool schemas
live in ``state["oai_tools"]``, which ``setup_state`` may change for that rollout.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
from collections.abc import Callable
from typing import Any

from verifiers.compat.refused import refusing_getattr
from verifiers.envs.multiturn import MultiTurnEnv, completed_from_state
from verifiers.errors import ConfigError, ToolCallError, ToolParseError
from verifiers.types import ChatMessage, Messages, State, Tool
from verifiers.utils.async_utils import call_maybe_async
from verifiers.utils.logging import warn_once
from verifiers.utils.tool_utils import format_tool_result, function_to_tool_schema, tool_name

# The state of the rollout whose tool calls are running (each rollout runs in its own
# task, so this is per rollout): lets ``call_tool``, whose signature subclasses
# override, count timeouts in the right state.
_ROLLOUT_STATE: contextvars.ContextVar[State | None] = contextvars.ContextVar("vf_tool_state", default=None)


def _has_tool_rubric(rubric: Any) -> bool:
    """True if ``rubric`` is, or groups, a ``ToolRubric`` (its metrics must not be counted twice)."""
    from verifiers.rubrics.tool import ToolRubric

    if isinstance(rubric, ToolRubric):
        return True
    return any(_has_tool_rubric(member) for member in getattr(rubric, "rubrics", []) or [])


class ToolEnv(MultiTurnEnv):
    """Tool-calling environment. ``tool_timeout`` (seconds, None = no limit) bounds each call."""

    tool_timeout: float | None = 30.0

    def __init__(
        self,
        tools: list[Callable[..., Any]] | None = None,
        max_turns: int = 10,
        error_formatter: Callable[[Exception], str] = str,
        stop_errors: list[type[Exception]] | None = None,
        **kwargs: Any,
    ):
        if kwargs.get("message_type", "chat") != "chat":
            raise ConfigError("ToolEnv needs message_type='chat' (tool calls are chat messages)")
        if "tool_defs" in kwargs or "oai_tools" in kwargs:
            # As 0.1.12: ToolEnv makes its schemas from tools= (upstream fails with a TypeError).
            key = "tool_defs" if "tool_defs" in kwargs else "oai_tools"
            raise ConfigError(
                f"{type(self).__name__} makes its tool schemas from tools=; {key}= is not accepted",
                hint="pass the functions as tools=[...], or use a MultiTurnEnv with tool_defs= "
                "and answer the tool calls in env_response",
            )
        self.tools: list[Callable[..., Any]] = []
        self.tool_map: dict[str, Callable[..., Any]] = {}
        self.error_formatter = error_formatter
        self.stop_errors: list[type[Exception]] = list(stop_errors or [])
        schemas: list[dict] = []
        for tool in tools or []:
            schemas.append(self._register(tool, function_to_tool_schema(tool)))
        super().__init__(max_turns=max_turns, oai_tools=schemas, **kwargs)
        self._tool_monitor = None
        if self.later_api and not _has_tool_rubric(self.rubric):
            # 0.1.8+ tracks tool calls (total_tool_calls, <tool>_calls; weight 0).
            from verifiers.rubrics.tool import ToolRubric

            self._tool_monitor = ToolRubric(tools=list(self.tools), parser=self.parser)
            self.add_rubric(self._tool_monitor)

    def _register(self, tool: Callable[..., Any], schema: dict) -> dict:
        name = tool_name(tool)
        if name in self.tool_map:
            raise ConfigError(f"two tools are named {name!r}", hint="give each tool a distinct function name")
        self.tools.append(tool)
        self.tool_map[name] = tool
        return schema

    def add_tool(self, tool: Callable[..., Any]) -> None:
        """Add a tool after construction."""
        self._add(tool, function_to_tool_schema(tool))

    def _add(self, tool: Callable[..., Any], schema: dict) -> None:
        if self.oai_tools is None:
            self.oai_tools = []
        self.oai_tools.append(self._register(tool, schema))
        monitor = getattr(self, "_tool_monitor", None)
        name = tool_name(tool)
        if monitor is not None and name not in monitor.tool_names:
            from verifiers.rubrics.tool import _call_counter

            monitor.tool_names.append(name)
            monitor.add_reward_func(_call_counter(name), weight=0.0)

    def remove_tool(self, tool: Callable[..., Any] | str) -> None:
        """Remove a tool (the function, or its name): the model no longer sees or can call it (0.1.5+)."""
        name = tool if isinstance(tool, str) else tool_name(tool)
        if name not in self.tool_map:
            raise ConfigError(
                f"remove_tool: no tool is named {name!r}",
                hint=f"the tools are: {', '.join(self.tool_map) or 'none'}",
            )
        removed = self.tool_map.pop(name)
        self.tools = [t for t in self.tools if t is not removed]
        self.oai_tools = [t for t in (self.oai_tools or []) if (t.get("function") or {}).get("name") != name]
        getattr(self, "skipped_args", {}).pop(name, None)
        monitor = getattr(self, "_tool_monitor", None)
        if monitor is not None and name in monitor.tool_names:
            monitor.tool_names.remove(name)
            for i, spec_name in enumerate(monitor.get_reward_func_names()):
                if spec_name == f"{name}_calls":
                    del monitor._specs[i], monitor.reward_funcs[i], monitor.reward_weights[i]
                    break

    @completed_from_state
    async def is_completed(self, messages: Messages, state: State, **kwargs: Any) -> bool:
        # Done after an assistant turn without tool calls (as 0.1.4): not before the first model
        # call, and not after the tool replies, when the model has still to read them.
        last = messages[-1] if messages else {}
        done = last.get("role") == "assistant" and not last.get("tool_calls")
        if done and state.get("stop_condition") is None:
            state["stop_condition"] = "no_tools_called"  # 0.1.8+'s name for this stop
        return done

    async def env_response(
        self, messages: Messages, state: State, **kwargs: Any
    ) -> tuple[list[ChatMessage], State] | list[ChatMessage]:
        """One ``role: "tool"`` message per tool call of the last assistant turn.

        Returns ``(messages, state)`` as 0.1.4-0.1.7 did, or, for a module in the 0.1.8+ form
        (``later_api``), the messages alone, so a subclass's ``await super().env_response(...)``
        gets what its release returned.
        """
        # Calls run one after another, in the model's order: tools may share state.
        replies = []
        token = _ROLLOUT_STATE.set(state)
        try:
            for call in messages[-1].get("tool_calls") or []:
                replies.append(await self._run_tool_call(call, messages, state, **kwargs))
        finally:
            _ROLLOUT_STATE.reset(token)
        return replies if self.later_api else (replies, state)

    async def _run_tool_call(
        self, call: dict, messages: Messages, state: State, **kwargs: Any
    ) -> ChatMessage:
        fn = call.get("function") or {}
        name = fn.get("name") or ""
        call_id = call.get("id") or ""
        raw = fn.get("arguments")
        if name not in self.tool_map:
            available = ", ".join(self.tool_map) or "none"
            return _tool_message(f"Error: unknown tool {name!r}; available tools: {available}", call_id)
        try:
            args = json.loads(raw) if isinstance(raw, str) and raw.strip() else (raw or {})
        except json.JSONDecodeError as e:
            if self._stops_on(e):
                raise ToolParseError(f"the arguments for tool {name!r} are not valid JSON: {e}") from e
            return _tool_message(
                f"Error: the arguments for tool {name!r} are not valid JSON ({e.msg}): {str(raw)[:200]}",
                call_id,
            )
        if not isinstance(args, dict):
            return _tool_message(
                f"Error: the arguments for tool {name!r} must be a JSON object, got {type(args).__name__}",
                call_id,
            )
        args = await self.prepare_tool_args(name, args, messages, state, **kwargs)
        return await self.call_tool(name, args, call_id, **kwargs)

    async def prepare_tool_args(
        self, tool_name: str, tool_args: dict, messages: Messages, state: State, **kwargs: Any
    ) -> dict:
        """Hook to change a call's arguments before it runs (``StatefulToolEnv`` injects state here)."""
        return tool_args

    async def call_tool(
        self, tool_name: str, tool_args: dict, tool_call_id: str, **kwargs: Any
    ) -> ChatMessage:
        """Run one tool and return its ``role: "tool"`` message (errors become the message text)."""
        tool = self.tool_map.get(tool_name)
        if tool is None:
            return _tool_message(f"Error: unknown tool {tool_name!r}", tool_call_id)
        # partial(): the tool's own parameter names can never collide with the helper's keywords.
        call = functools.partial(tool, **tool_args)
        timeout = self.tool_timeout if self.tool_timeout and self.tool_timeout > 0 else None
        task = asyncio.ensure_future(call_maybe_async(call, executor=self._get_executor(), in_thread=True))
        try:
            # asyncio.wait, not wait_for: a tool that itself raises TimeoutError is a tool error, not ours.
            await asyncio.wait({task}, timeout=timeout)
        finally:
            if not task.done():
                task.cancel()  # our timeout, or this rollout was cancelled
        if task.cancelled() or not task.done():
            # A sync tool's thread cannot be killed; it finishes in the background.
            self._count_timeout(tool_name, timeout)
            return _tool_message(f"Error: tool {tool_name!r} timed out after {timeout:g}s", tool_call_id)
        err = task.exception()
        if err is not None:
            if self._stops_on(err):
                # 0.1.8+: an error listed in stop_errors ends the rollout (state["failure"]).
                raise ToolCallError(f"tool {tool_name!r} raised {type(err).__name__}: {err}") from err
            return _tool_message(str(self.error_formatter(err)), tool_call_id)
        result = task.result()
        return _tool_message(format_tool_result(result), tool_call_id)

    def _stops_on(self, err: BaseException) -> bool:
        """True if ``err`` is one of ``stop_errors`` (it ends the rollout instead of going to the model)."""
        return any(isinstance(err, kind) for kind in self.stop_errors)

    def _count_timeout(self, tool_name: str, timeout: float | None) -> None:
        state = _ROLLOUT_STATE.get()
        if state is not None:
            state["tool_timeouts"] = int(state.get("tool_timeouts") or 0) + 1
        warn_once(
            self.logger,
            f"{type(self).__name__}.tool-timeout:{tool_name}",
            "tool %r ran past tool_timeout=%gs; the model gets a timeout message instead of a result "
            "(logged once; later ones are counted in state['tool_timeouts'], metric errors/tool_timeout)",
            tool_name,
            timeout or 0.0,
        )


# 0.1.5-0.1.10 code names the record type ToolDef; 0.1.12 names it vf.Tool.
ToolDef = Tool


def _tool_message(content: str, tool_call_id: str) -> ChatMessage:
    return {"role": "tool", "content": content, "tool_call_id": tool_call_id}


# Names of upstream's module that are not offered here: refused in one line (verifiers.compat.refused).
__getattr__ = refusing_getattr(__name__)
