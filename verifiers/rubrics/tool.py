"""ToolRubric: counts the tool calls a model made, as tracked (weight 0) metrics.

For tools ``[search, calculate]`` it reports ``search_calls``,
``calculate_calls`` and ``total_tool_calls`` (every call, including calls to
names that are not among ``tools``). Calls are read from the ``tool_calls``
of the completion's assistant messages; a text completion has none.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from verifiers.parsers.parser import Parser
from verifiers.rubrics.rubric import Rubric, reward_func_name
from verifiers.types import Messages


def _call_counter(tool_name: str) -> Callable[[Messages], float]:
    def count(completion: Messages) -> float:
        return float(sum(1 for name in Parser.get_tool_call_names(completion) if name == tool_name))

    count.__name__ = f"{tool_name}_calls"
    count.__qualname__ = f"ToolRubric.{tool_name}_calls"
    return count


class ToolRubric(Rubric):
    """Tracks tool usage. ``tools`` are the tool functions (or their names)."""

    def __init__(self, tools: Sequence[Callable[..., Any] | str] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.tools = list(tools or [])
        self.tool_names = [t if isinstance(t, str) else reward_func_name(t) for t in self.tools]
        for name in self.tool_names:
            self.add_reward_func(_call_counter(name), weight=0.0)
        self.add_reward_func(self.total_tool_calls, weight=0.0)

    @property
    def oai_tools(self) -> list[dict[str, Any]]:
        """The tools' OpenAI schemas (0.1.x attribute; tools given by name have none)."""
        from verifiers.utils.tool_utils import convert_func_to_oai_tool  # only when read

        return [convert_func_to_oai_tool(t) for t in self.tools if not isinstance(t, str)]

    def get_tool_call_count_func(self, tool_name: str) -> Callable[[Messages], float]:
        """A metric function counting calls to ``tool_name``, named ``<tool_name>_calls`` (0.1.x)."""
        return _call_counter(tool_name)

    def total_tool_calls(self, completion: Messages) -> float:
        """Number of tool calls in the completion."""
        return float(len(Parser.get_tool_calls(completion)))
