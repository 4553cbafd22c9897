"""MaybeThinkParser: the answer after a ``<think>...</think>`` block, if the text has one (0.1.7-0.1.12).

For models that think only sometimes: the answer is what follows the last ``</think>``,
stripped, or the whole text (stripped) when there is no ``</think>``; ``extract_fn`` is
applied to it. (ThinkParser, for models that always think, gives no answer without one.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from verifiers.parsers.parser import Parser, identity

CLOSE = "</think>"


class MaybeThinkParser(Parser):
    """Parses ``[<think>reasoning</think>]answer``; ``extract_fn`` is applied to the answer."""

    def __init__(self, extract_fn: Callable[[str], Any] = identity, **kwargs: Any):
        super().__init__(extract_fn=extract_fn, **kwargs)

    def parse(self, text: str) -> Any:
        """``extract_fn`` of the text after the last ``</think>`` (all of it without one), stripped."""
        return self.extract_fn(text.split(CLOSE)[-1].strip())
