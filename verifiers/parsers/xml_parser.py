"""XMLParser: answers written as ``<tag>...</tag>`` blocks.

A field is a tag name, or a tuple of alternative names whose first entry is
canonical. Every name is read on its own: with the field ``("code",
"answer")``, ``parse`` returns both ``.code`` (the ``<code>`` block) and
``.answer`` (the ``<answer>`` block), each None when absent, and
``parse_answer`` reads the tag that ``answer_field`` names. ``format`` writes a
field under its canonical name, whichever name its value is given under.

The reading rules are 0.1.4's, so an environment tuned there gets the same
answers and the same format reward here (tests/parity checks them against
0.1.4):

- A block is ``<tag>``, then the shortest text up to ``</tag>``; whitespace
  around the content is not part of it. Unclosed blocks are not blocks.
- ``parse`` takes a tag's **first** block (``last=True``: its last one).
- ``parse_answer`` of a chat completion reads the first ``answer_field`` block
  of the latest assistant message that has one; of a string completion, the
  string's last block.
- The format reward (see :meth:`XMLParser.format_score`) gives 0.2 to any
  message, 0.4 times the share of fields present once at least one block is
  complete, and 0.2 each for starting with a first-field tag and ending with a
  last-field closing tag.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from verifiers.errors import ConfigError, ConfigTypeError
from verifiers.parsers.parser import Parser, identity
from verifiers.types import Messages
from verifiers.utils.logging import warn_once

_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*\Z")


def _block_pattern(name: str) -> re.Pattern[str]:
    tag = re.escape(name)
    # Leading and trailing whitespace sit outside the group, as in 0.1.4, so the
    # content of `<answer>  42  </answer>` is "42" whether or not it is stripped.
    return re.compile(rf"<{tag}>\s*(.*?)\s*</{tag}>", re.DOTALL)


class XMLParser(Parser):
    """Parses and writes XML-style tagged fields.

    Args:
        fields: tag names, or tuples of alternative names (first = canonical).
        answer_field: the field ``parse_answer`` returns (any of its names).
        extract_fn: applied to the answer field's text by ``parse_answer``.
    """

    def __init__(
        self,
        fields: Sequence[str | tuple[str, ...]],
        answer_field: str = "answer",
        extract_fn: Callable[[str], Any] = identity,
        **kwargs: Any,
    ):
        super().__init__(extract_fn=extract_fn, **kwargs)
        if isinstance(fields, str):  # XMLParser("answer") means one field
            fields = [fields]
        self._fields: list[tuple[str, ...]] = []
        self._canonical: dict[str, str] = {}
        # Errors start with upstream's words and are of upstream's classes (ValueError / TypeError).
        for field in fields:
            if isinstance(field, str):
                names: tuple = (field,)
            elif isinstance(field, (tuple, list)):
                names = tuple(field)
            else:
                raise ConfigTypeError(
                    f"Each field must be a string or a tuple of strings. XMLParser got {field!r}",
                    "e.g. XMLParser(['think', ('code', 'answer')])",
                )
            if not names:
                raise ConfigError("Field tuple cannot be empty.", "give at least one tag name")
            for name in names:
                if not isinstance(name, str):
                    raise ConfigTypeError(
                        f"All alternatives in a tuple must be strings. XMLParser got {name!r} in {field!r}",
                        "list tag names as strings",
                    )
                if not _TAG_NAME.match(name):
                    raise ConfigError(
                        f"XMLParser field name {name!r} is not a valid tag name",
                        "use letters, digits, '_', '-' or '.', starting with a letter or '_'",
                    )
                if name in self._canonical:
                    raise ConfigError(f"Duplicate field name: {name}", "XMLParser: list each tag once")
                self._canonical[name] = names[0]
            self._fields.append(names)
        if not self._fields:
            raise ConfigError("XMLParser needs at least one field", "e.g. XMLParser(['think', 'answer'])")
        if "think" in self._canonical:
            warn_once(
                self.logger,
                "xmlparser-think-field",
                "You have included the 'think' field in the XMLParser. This should only be used with models "
                "which always include <think>...</think> tags but do NOT parse them automatically "
                "(logged once).",
            )
        self.answer_field = answer_field
        self._patterns: dict[str, re.Pattern[str]] = {}

    # -- reading ------------------------------------------------------------

    def get_fields(self) -> list[str]:
        """The canonical field names, in declaration order."""
        return [names[0] for names in self._fields]

    def _pattern(self, name: str) -> re.Pattern[str]:
        pattern = self._patterns.get(name)
        if pattern is None:
            pattern = self._patterns[name] = _block_pattern(name)
        return pattern

    def _block(self, text: str, name: str, last: bool = False) -> str | None:
        """Content of the first (or last) complete ``name`` block of ``text``; None if there is none."""
        pattern = self._pattern(name)
        if not last:
            match = pattern.search(text)
            return None if match is None else match.group(1)
        content = None
        for match in pattern.finditer(text):
            content = match.group(1)
        return content

    def parse(self, text: str, strip: bool = True, last: bool = False) -> SimpleNamespace:
        """One attribute per tag name (alternatives included): its first block's content, or None.

        ``last=True`` takes each tag's last block instead; ``strip`` removes
        surrounding whitespace from each value.
        """
        values: dict[str, str | None] = {}
        for names in self._fields:
            for name in names:
                content = self._block(text, name, last)
                values[name] = content.strip() if content is not None and strip else content
        return SimpleNamespace(**values)

    def parse_answer(self, completion: Messages) -> str | None:
        """``extract_fn`` of the ``answer_field`` tag's content; None when there is none.

        A string is read for its last block. A chat completion is read from
        its latest assistant message that has a block (in multi-turn rollouts the
        final message may be a remark after the answer), taking that message's
        first block. Only the tag ``answer_field`` names is read, and only if it
        is one of the fields (0.1.4). Unlike 0.1.4, which ignored it,
        ``extract_fn`` is applied (docs/migrating.md).
        """
        name = self.answer_field
        if name not in self._canonical:
            return None
        if isinstance(completion, str):
            content = self._block(completion, name, last=True)
        else:
            content = None
            for text in reversed(self.get_assistant_texts(completion)):
                content = self._block(text, name)
                if content is not None:
                    break
        return None if content is None else self.extract_fn(content.strip())

    # -- writing ------------------------------------------------------------

    def format(self, **kwargs: Any) -> str:
        """Write the given fields as tagged blocks, in declaration order.

        A field may be given under any of its names; the block uses its
        canonical name (0.1.x). Fields that are omitted or None are left out.
        """
        unknown = [key for key in kwargs if key not in self._canonical]
        if unknown:
            raise ConfigError(
                f"XMLParser.format got unknown field(s) {', '.join(map(repr, unknown))}",
                f"known names: {', '.join(self._canonical)}",
            )
        blocks: list[str] = []
        for names in self._fields:
            given = [name for name in names if kwargs.get(name) is not None]
            if len(given) > 1:
                raise ConfigError(
                    f"XMLParser.format got {' and '.join(given)}, which name the same field",
                    "pass only one of them",
                )
            if given:
                tag = names[0]
                blocks.append(f"<{tag}>\n{kwargs[given[0]]}\n</{tag}>")
        return "\n".join(blocks)

    def get_format_str(self) -> str:
        """A description of the expected format, for a system prompt.

        The same text as 0.1.x wrote (prompts built from it stay identical): a
        field with alternatives reads ``<[ code | answer ]>``.
        """
        lines = []
        for names in self._fields:
            tag = names[0] if len(names) == 1 else f"[ {' | '.join(names)} ]"
            lines.append(f"<{tag}>\n...\n</{tag}>")
        return "\n".join(lines)

    # -- format reward --------------------------------------------------------

    def format_score(self, text: str) -> float:
        """How well one message uses the fields, from 0.2 to 1 (0.1.4's weights).

        - 0.2 for every message (0.1.4 also awarded this "spacing" part, which
          its rules could not fail);
        - 0.4 times the share of fields whose tag appears (a complete block, or
          a lone opening or closing tag), but only once some field has a
          complete block;
        - 0.2 if the text, stripped, starts with an opening tag of the first field;
        - 0.2 if it ends with a closing tag of the last field.
        """
        # Summed in 0.1.4's order, so the floats are identical, not just close.
        score = 0.0
        complete = any(self._block(text, name) is not None for names in self._fields for name in names)
        if complete:
            present = sum(
                1
                for names in self._fields
                if any(f"<{name}>" in text or f"</{name}>" in text for name in names)
            )
            score += 0.4 * (present / len(self._fields))
        score += 0.2
        body = text.strip()
        if any(body.startswith(f"<{name}>") for name in self._fields[0]):
            score += 0.2
        if any(body.endswith(f"</{name}>") for name in self._fields[-1]):
            score += 0.2
        return score

    def get_format_reward_func(self) -> Callable[..., float]:
        """A reward function: the mean ``format_score`` over assistant messages.

        A string completion is judged as one message (0.1.4 raised); a
        completion without assistant messages scores 0.0.
        """

        def format_reward_func(completion: Messages, **kwargs: Any) -> float:
            texts = [completion] if isinstance(completion, str) else self.get_assistant_texts(completion)
            if not texts:
                return 0.0
            return sum(self.format_score(t) for t in texts) / len(texts)

        return format_reward_func
