"""ThinkParser: reasoning in a ``<think>...</think>`` block, then the answer.

What counts as the answer of a text:

- With a ``</think>``: the text after the **last** ``</think>``. This also
  covers chat templates that put the opening ``<think>`` into the prompt, so
  the completion holds only ``reasoning</think>answer``.
- With a ``<think>`` but no ``</think>``: no answer (None). The model was
  still thinking when it stopped (usually truncation); scoring candidate
  answers from unfinished reasoning would reward rambling.
- With neither tag: the whole text. The model did not use a think block (a
  non-reasoning model, or thinking disabled); its format reward says so.

In every case surrounding whitespace is stripped before ``extract_fn``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verifiers.parsers.parser import Parser, identity, message_field, message_text
from verifiers.types import Messages

OPEN, CLOSE = "<think>", "</think>"


class ThinkParser(Parser):
    """Parses ``<think>reasoning</think>answer`` output; ``extract_fn`` is applied to the answer."""

    def __init__(self, extract_fn: Callable[[str], Any] = identity, **kwargs: Any):
        super().__init__(extract_fn=extract_fn, **kwargs)

    @staticmethod
    def answer_text(text: str) -> str | None:
        """The raw answer part of ``text`` (see the module docstring), stripped; None if unfinished."""
        end = text.rfind(CLOSE)
        if end >= 0:
            return text[end + len(CLOSE) :].strip()
        if OPEN in text:
            return None
        return text.strip()

    def parse(self, text: str) -> Any:
        """``extract_fn`` of the answer part, or None if the text ends inside a think block."""
        answer = self.answer_text(text)
        return None if answer is None else self.extract_fn(answer)

    @staticmethod
    def is_well_formatted(text: str, has_tool_calls: bool = False) -> bool:
        """Whether ``text`` starts with exactly one think block followed by an answer.

        The answer must be non-empty text, unless the message carries native
        tool calls, which then are its answer.
        """
        body = text.lstrip()
        if not body.startswith(OPEN) or body.count(OPEN) != 1 or body.count(CLOSE) != 1:
            return False
        after = body[body.index(CLOSE) + len(CLOSE) :]
        return bool(after.strip()) or has_tool_calls

    def get_format_reward_func(self) -> Callable[..., float]:
        """A reward function: the share of assistant messages that are well formatted (0 to 1)."""

        def format_reward_func(completion: Messages, **kwargs: Any) -> float:
            if isinstance(completion, str):
                return 1.0 if self.is_well_formatted(completion) else 0.0
            messages = self.get_assistant_messages(completion)
            if not messages:
                return 0.0
            good = sum(
                self.is_well_formatted(message_text(m), bool(message_field(m, "tool_calls")))
                for m in messages
            )
            return good / len(messages)

        return format_reward_func
