"""ThinkParser: reasoning in a ``<think>...</think>`` block, then the answer.

The rules are 0.1.4's, so an environment tuned there gets the same answers
and the same format reward here (tests/parity checks them against 0.1.4):

- The answer of a text is what follows its **last** ``</think>``, stripped.
  This also covers chat templates that put the opening ``<think>`` into the
  prompt, so the completion holds only ``reasoning</think>answer``.
- A text without ``</think>`` has no answer: ``parse`` gives ``extract_fn("")``.
  The parser is meant for models that always think; a reply without the closing
  tag is unfinished (usually truncated) or off-format, and scoring it would
  reward skipping the format.
- The format reward of a message is 1.0 when, after leading whitespace, it
  starts with ``<think>``, holds exactly one ``<think>`` and one ``</think>``,
  and something (even whitespace) follows the ``</think>``; otherwise 0.0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verifiers.parsers.parser import Parser, identity
from verifiers.types import Messages
from verifiers.utils.logging import warn_once

OPEN, CLOSE = "<think>", "</think>"


class ThinkParser(Parser):
    """Parses ``<think>reasoning</think>answer`` output; ``extract_fn`` is applied to the answer."""

    def __init__(self, extract_fn: Callable[[str], Any] = identity, **kwargs: Any):
        super().__init__(extract_fn=extract_fn, **kwargs)
        # Upstream's warning, in its words; logged once per process rather than per parser.
        warn_once(
            self.logger,
            "thinkparser-intended-use",
            "ThinkParser is intended for use with models which always include <think>...</think> tags but "
            "do NOT parse them automatically. A reply without </think> has no answer (logged once).",
        )

    @staticmethod
    def answer_text(text: str) -> str:
        """The raw answer part of ``text``: after the last ``</think>``, stripped ("" without one)."""
        end = text.rfind(CLOSE)
        return text[end + len(CLOSE) :].strip() if end >= 0 else ""

    def parse(self, text: str) -> Any:
        """``extract_fn`` of the answer part (see the module docstring)."""
        return self.extract_fn(self.answer_text(text))

    @staticmethod
    def is_well_formatted(text: str) -> bool:
        """Whether ``text`` is one think block followed by something (see the module docstring)."""
        return (
            text.lstrip().startswith(OPEN)
            and text.count(OPEN) == 1
            and text.count(CLOSE) == 1
            and not text.endswith(CLOSE)
        )

    def get_format_reward_func(self) -> Callable[..., float]:
        """A reward function: the share of assistant messages that are well formatted (0 to 1).

        A string completion is judged as one message; a completion without
        assistant messages scores 0.0 (0.1.4 raised on both).
        """

        def format_reward_func(completion: Messages, **kwargs: Any) -> float:
            texts = [completion] if isinstance(completion, str) else self.get_assistant_texts(completion)
            if not texts:
                return 0.0
            return sum(1.0 for text in texts if self.is_well_formatted(text)) / len(texts)

        return format_reward_func
