"""Chat-message helpers that 0.1.x code imports from ``verifiers.utils.message_utils``.

- ``message_to_printable`` / ``messages_to_printable``: a message with its
  content as one string (image parts become ``[image]``, audio ``[audio]``),
  for printing and logging.
- ``cleanup_message`` / ``cleanup_messages``: a plain-dict copy holding only
  what an OpenAI request accepts (``role``, ``content``, ``tool_calls``,
  ``tool_call_id``), with the stray keys of multimodal parts removed.
- ``sanitize_tool_calls``: assistant tool calls as JSON strings, so that
  messages can be stored in an Arrow table (``datasets``), whose columns
  cannot hold the nested objects.
- later 0.1.x helpers: ``concat_messages``, ``strip_nones_from_content``,
  ``from_raw_message`` (the typed message dict of a role, ``verifiers.types``)
  and ``format_messages`` (rich text for display).

Messages may be dicts or the openai client's pydantic objects (read through
:func:`verifiers.types.message_field`); a string (completion API)
passes through unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from verifiers.types import ChatMessage, Messages, message_field

__all__ = [
    "cleanup_message",
    "cleanup_messages",
    "concat_messages",
    "format_messages",
    "from_raw_message",
    "message_to_printable",
    "messages_to_printable",
    "sanitize_tool_calls",
    "strip_nones_from_content",
]

# 0.1.x names refused with a reason (e.g. normalize_messages): verifiers.compat's import hook
# gives this module its refusing __getattr__ (utils sits below compat and imports nothing from it).


def _as_dict(obj: Any) -> Any:
    """``obj`` as plain data: pydantic models are dumped, dicts and lists copied, the rest returned."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(exclude_none=True)
    if isinstance(obj, dict):
        return {k: _as_dict(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_as_dict(v) for v in obj]
    return obj


def _part_text(part: Any) -> str | None:
    """Printable text of one content part (None for a part with nothing to show)."""
    if isinstance(part, str):
        return part
    kind = str(message_field(part, "type", "text") or "")
    if kind == "text":
        return message_field(part, "text") or ""
    if kind == "image_url":
        return "[image]"
    if kind.startswith("input_audio"):
        return "[audio]"
    return None


def message_to_printable(message: ChatMessage | Any) -> ChatMessage:
    """``{"role", "content": str[, "tool_calls"]}``: parts joined by blank lines, media as placeholders."""
    out: dict[str, Any] = {"role": message_field(message, "role"), "content": ""}
    tool_calls = message_field(message, "tool_calls")
    if tool_calls:
        out["tool_calls"] = _as_dict(tool_calls)
    content = message_field(message, "content")
    if isinstance(content, str):
        out["content"] = content
    elif content is not None:
        texts = [_part_text(part) for part in content]
        out["content"] = "\n\n".join(t for t in texts if t is not None)
    return out


def messages_to_printable(messages: Messages) -> Messages:
    """:func:`message_to_printable` of every message (a string is returned unchanged)."""
    return _each_message(message_to_printable, messages)


def _each_message(convert: Callable[[Any], ChatMessage], messages: Messages) -> Messages:
    return messages if isinstance(messages, str) else [convert(m) for m in messages]


def _clean_part(part: Any) -> Any:
    part = _as_dict(part)
    if not isinstance(part, dict):
        return part
    kind = str(part.get("type", ""))
    if kind == "text":
        part.pop("image_url", None)
    elif kind == "image_url":
        part.pop("text", None)
    elif kind.startswith("input_audio"):
        # The API rejects any other key on an audio part.
        part = {"type": "input_audio", "input_audio": part.get("input_audio", {})}
    return part


def cleanup_message(message: ChatMessage | Any) -> ChatMessage:
    """A plain-dict copy with only ``role``, ``content``, ``tool_calls`` and ``tool_call_id``.

    Content parts keep only the keys their ``type`` allows (a text part loses
    a stray ``image_url``, an image part a stray ``text``, an audio part
    everything but ``input_audio``). A missing content stays missing (None).
    """
    out: dict[str, Any] = {"role": message_field(message, "role")}
    for key in ("tool_calls", "tool_call_id"):
        value = message_field(message, key)
        if value is not None:
            out[key] = _as_dict(value)
    content = message_field(message, "content")
    out["content"] = (
        content if content is None or isinstance(content, str) else [_clean_part(p) for p in content]
    )
    return out


def cleanup_messages(messages: Messages) -> Messages:
    """:func:`cleanup_message` of every message (a string is returned unchanged)."""
    return _each_message(cleanup_message, messages)


def sanitize_tool_calls(messages: Messages) -> Messages:
    """Messages whose ``tool_calls`` are JSON strings (one per call); other messages unchanged.

    A message with tool calls keeps only ``role``, ``content`` and
    ``tool_calls``, as in 0.1.x.
    """
    if not isinstance(messages, list):
        return messages
    out: list[Any] = []
    for m in messages:
        calls = message_field(m, "tool_calls")
        if calls is None:
            out.append(m)
            continue
        out.append(
            {
                "role": message_field(m, "role"),
                "content": message_field(m, "content") or "",
                "tool_calls": [c if isinstance(c, str) else json.dumps(_as_dict(c)) for c in calls],
            }
        )
    return out


def concat_messages(messages_list: list[Messages]) -> Messages:
    """The messages of each list in ``messages_list``, in order, as one list (0.1.8+)."""
    return [m for messages in messages_list for m in messages]


def strip_nones_from_content(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Messages whose content parts lose their ``None``-valued keys (0.1.9-0.1.10).

    An Arrow table gives every part of a column every key any part had
    (``image_url: None`` on a text part); only the messages with list content are copied.
    """
    out: list[ChatMessage] = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            parts = [
                {k: v for k, v in p.items() if v is not None} if isinstance(p, dict) else p for p in content
            ]
            m = {**m, "content": parts}
        out.append(m)
    return out


def from_raw_message(message: dict) -> ChatMessage:
    """``message`` as the message type of its role (0.1.11+): ``vf.SystemMessage``,
    ``vf.UserMessage``, ``vf.AssistantMessage`` or ``vf.ToolMessage`` (dicts that also read
    as attributes here); ``ConfigError`` for another role or a missing required key."""
    from verifiers.errors import ConfigError
    from verifiers.types import AssistantMessage, SystemMessage, ToolMessage, UserMessage

    by_role = {
        "system": SystemMessage,
        "user": UserMessage,
        "assistant": AssistantMessage,
        "tool": ToolMessage,
    }
    role = message.get("role")
    if role not in by_role:
        hint = "a completion-API prompt is a plain string here" if role == "text" else None
        raise ConfigError(f"unknown message role {role!r}", hint=hint or f"use one of: {', '.join(by_role)}")
    return by_role[role](message)


def format_messages(messages: Messages | Any) -> Any:
    """``messages`` as ``rich.text.Text`` for display (0.1.10+): a string as is, chat messages
    as ``role: content`` blocks with their tool calls (``verifiers.utils.display``)."""
    from rich.text import Text

    from verifiers.utils.display import format_messages as plain

    return Text(plain(messages))
