"""The base parser: turns a model's output into the answer a rubric scores.

A parser has two jobs. ``parse(text)`` reads one piece of model text;
``parse_answer(completion)`` finds the answer in a whole completion (a string
for the completion API, a list of chat messages for the chat API). Subclasses
usually override only ``parse``; the message helpers here are shared.

Messages are normally OpenAI-style dicts, but environments sometimes keep the
client's pydantic objects, so every helper reads fields through
:func:`message_field`, which accepts both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from verifiers.types import ChatMessage, Messages, message_field


def identity(text: str) -> str:
    """Return ``text`` unchanged (the default ``extract_fn``)."""
    return text


def message_text(message: Any) -> str:
    """The text of a chat message's ``content`` ("" when there is none).

    Content given as a list of parts (``[{"type": "text", "text": ...}, ...]``)
    is joined; non-text parts (images, audio) are skipped.
    """
    content = message_field(message, "content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for part in content:
        if isinstance(part, str):
            parts.append(part)
        elif message_field(part, "type", "text") == "text":
            parts.append(message_field(part, "text") or "")
    return "".join(parts)


class Parser:
    """Extracts answers from model output with a plain function.

    ``parse(text)`` returns ``extract_fn(text)``. ``parse_answer`` applies it
    to the last assistant message of a chat completion, or to the whole string
    of a text completion. Extra keyword arguments become attributes, as for
    every verifiers component, so subclasses and users can carry settings.
    """

    def __init__(self, extract_fn: Callable[[str], Any] = identity, **kwargs: Any):
        self.extract_fn = extract_fn
        self.logger = logging.getLogger(f"verifiers.parsers.{type(self).__name__}")
        for key, value in kwargs.items():
            setattr(self, key, value)

    def parse(self, text: str) -> Any:
        """Parse one piece of model text."""
        return self.extract_fn(text)

    def parse_answer(self, completion: Messages) -> str | None:
        """The answer in ``completion``: ``parse`` of the string, or of the last assistant message.

        Returns None for a chat completion without any assistant message, and
        for a last assistant message without content (a tool-call-only turn),
        as 0.1.4 did. 0.1.4 parsed the last message whatever its role; a rollout
        that ended on an environment message had that text read as the model's
        answer, so here only assistant messages count (docs/migrating.md).
        """
        if isinstance(completion, str):
            return self.parse(completion)
        assistant = self.get_assistant_messages(completion)
        if not assistant or message_field(assistant[-1], "content") is None:
            return None
        return self.parse(message_text(assistant[-1]))

    def get_format_reward_func(self) -> Callable[..., float]:
        """A reward function scoring format adherence from 0 to 1.

        The base parser imposes no format, so every completion scores 1.0.
        """

        def format_reward_func(completion: Messages, **kwargs: Any) -> float:
            return 1.0

        return format_reward_func

    # -- message helpers --------------------------------------------------
    # The argument is named ``completion``, as in every 0.1.x release (callers pass it by keyword).

    @staticmethod
    def get_messages_by_role(messages: Messages, role: str) -> list[ChatMessage]:
        """The messages of ``messages`` whose role is ``role`` (none for a plain string)."""
        if isinstance(messages, str):
            return []
        return [m for m in messages if message_field(m, "role") == role]

    def get_assistant_messages(self, completion: Messages) -> list[ChatMessage]:
        """The assistant messages, in order."""
        return self.get_messages_by_role(completion, "assistant")

    def get_user_messages(self, completion: Messages) -> list[ChatMessage]:
        """The user messages, in order."""
        return self.get_messages_by_role(completion, "user")

    def get_system_messages(self, completion: Messages) -> list[ChatMessage]:
        """The system messages, in order."""
        return self.get_messages_by_role(completion, "system")

    def get_tool_messages(self, completion: Messages) -> list[ChatMessage]:
        """The tool-result messages (role ``tool``), in order."""
        return self.get_messages_by_role(completion, "tool")

    def get_assistant_texts(self, completion: Messages) -> list[str]:
        """The text of each assistant turn; a string completion is one turn."""
        if isinstance(completion, str):
            return [completion]
        return [message_text(m) for m in self.get_assistant_messages(completion)]

    @staticmethod
    def get_tool_calls(messages: Messages) -> list[Any]:
        """Every tool call made by the assistant messages, in order."""
        if isinstance(messages, str):
            return []
        calls: list[Any] = []
        for m in messages:
            if message_field(m, "role") == "assistant":
                calls.extend(message_field(m, "tool_calls") or [])
        return calls

    @staticmethod
    def get_tool_call_names(messages: Messages) -> list[str]:
        """The function name of each tool call made by the assistant, in order."""
        names: list[str] = []
        for call in Parser.get_tool_calls(messages):
            function = message_field(call, "function")
            name = message_field(function, "name") if function is not None else None
            names.append(name if isinstance(name, str) else "")
        return names
