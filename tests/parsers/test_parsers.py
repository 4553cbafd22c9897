"""Parser, XMLParser and ThinkParser: parsing, writing and format rewards."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from verifiers.errors import ConfigError
from verifiers.parsers.parser import Parser, message_text
from verifiers.parsers.think_parser import ThinkParser
from verifiers.parsers.xml_parser import XMLParser


def chat(*turns: tuple[str, str], **extra) -> list[dict]:
    return [{"role": role, "content": content, **extra} for role, content in turns]


# Text a model might put inside a tag: anything but the tag delimiters.
tag_free_text = st.text(alphabet=st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)))

# -- Parser ---------------------------------------------------------------------


def test_parser_parse_answer_uses_last_assistant_message_and_extract_fn():
    parser = Parser(extract_fn=str.upper)
    completion = chat(("assistant", "first"), ("tool", "result"), ("assistant", "second"), ("user", "bye"))
    assert parser.parse("abc") == "ABC"
    assert parser.parse_answer(completion) == "SECOND"
    assert parser.parse_answer("plain text") == "PLAIN TEXT"
    assert parser.parse_answer(chat(("user", "no answer"))) is None


def test_parser_message_helpers_accept_dicts_objects_and_content_parts():
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "he"}, {"type": "image_url"}, "llo"]},
        SimpleNamespace(role="assistant", content=None, tool_calls=[{"function": {"name": "search"}}]),
        {"role": "tool", "content": "found", "tool_call_id": "1"},
        {
            "role": "assistant",
            "content": "done",
            "tool_calls": [SimpleNamespace(function=SimpleNamespace(name="calc"))],
        },
    ]
    parser = Parser()
    assert [message_text(m) for m in parser.get_user_messages(messages)] == ["hello"]
    assert len(parser.get_system_messages(messages)) == 1
    assert [m["content"] for m in parser.get_tool_messages(messages)] == ["found"]
    assert parser.get_assistant_texts(messages) == ["", "done"]
    assert parser.get_tool_call_names(messages) == ["search", "calc"]
    assert parser.get_assistant_messages("a string") == []
    assert parser.get_format_reward_func()(completion=messages) == 1.0


def test_parser_kwargs_become_attributes():
    assert Parser(custom=3).custom == 3


# -- XMLParser --------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(values=st.lists(tag_free_text, min_size=3, max_size=3))
def test_xml_round_trip(values):
    parser = XMLParser(["think", "answer", "note"])
    kwargs = dict(zip(["think", "answer", "note"], values, strict=True))
    text = parser.format(**kwargs)
    stripped = parser.parse(text)
    raw = parser.parse(text, strip=False)
    for name, value in kwargs.items():
        assert getattr(stripped, name) == value.strip()
        # 0.1.4: whitespace around a block's content is outside the match, stripped or not.
        assert getattr(raw, name) == value.strip()


@settings(max_examples=40, deadline=None)
@given(value=tag_free_text, use_alternative=st.booleans())
def test_xml_round_trip_with_alternative_names(value, use_alternative):
    parser = XMLParser(["think", ("answer", "result")])
    name = "result" if use_alternative else "answer"
    text = parser.format(think="t", **{name: value})
    assert "<answer>" in text and "<result>" not in text  # 0.1.x: written under the canonical name
    parsed = parser.parse(text)
    assert parsed.answer == value.strip()
    assert parsed.result is None  # 0.1.x: one attribute per name, each read on its own
    assert parser.parse_answer([{"role": "assistant", "content": text}]) == value.strip()


def test_xml_parse_missing_fields_are_none_and_fields_listed():
    parser = XMLParser(["think", ("code", "python")])
    assert parser.get_fields() == ["think", "code"]
    parsed = parser.parse("<python>print(1)</python>")
    assert parsed.think is None and parsed.code is None and parsed.python == "print(1)"


def test_xml_alternatives_parse_each_name_on_its_own_as_in_01x():
    """0.1.x tool envs declared ("tool", "answer") and ran a tool only when `.tool` was set."""
    parser = XMLParser(["think", ("tool", "answer")])
    answered = parser.parse("<think>done</think>\n<answer>42</answer>")
    assert answered.tool is None and answered.answer == "42"
    called = parser.parse("<tool>add(1, 2)</tool>")
    assert called.tool == "add(1, 2)" and called.answer is None
    assert parser.format(think="t", answer="42") == "<think>\nt\n</think>\n<tool>\n42\n</tool>"
    assert parser.get_format_str() == "<think>\n...\n</think>\n<[ tool | answer ]>\n...\n</[ tool | answer ]>"


def test_xml_first_block_wins_as_in_014():
    """0.1.4: parse takes a tag's first block (last=True its last); a chat answer is the
    latest assistant message's first block, a string answer the string's last block."""
    parser = XMLParser(["think", "answer"])
    text = "<answer>7</answer> ... <answer>8</answer>"
    assert parser.parse(text).answer == "7"
    assert parser.parse(text, last=True).answer == "8"
    assert parser.parse_answer(chat(("assistant", text))) == "7"
    assert parser.parse_answer(text) == "8"
    assert parser.parse("<answer>7</answer> then <answer>unclosed").answer == "7"
    assert parser.parse("<answer>truncated").answer is None
    # A mention of the tag starts the first block (0.1.4's shortest match from the first tag).
    assert (
        parser.parse("<answer> is where it goes: <answer>1</answer>").answer == "is where it goes: <answer>1"
    )


def test_xml_parse_answer_searches_back_through_assistant_messages():
    parser = XMLParser(["think", "answer"], extract_fn=lambda s: s + "!")
    completion = chat(
        ("assistant", "<answer>old</answer>"),
        ("user", "<answer>user text is ignored</answer>"),
        ("assistant", "<answer>new</answer>"),
        ("assistant", "thanks, bye"),
    )
    assert parser.parse_answer(completion) == "new!"
    assert parser.parse_answer(chat(("assistant", "nothing"))) is None
    assert parser.parse_answer("<answer> s </answer>") == "s!"


def test_xml_answer_field_reads_only_the_tag_it_names():
    parser = XMLParser([("code", "python")], answer_field="python")
    assert parser.parse_answer("<python>x = 1</python>") == "x = 1"
    assert parser.parse_answer("<code>x = 1</code>") is None  # 0.1.x: getattr(parsed, answer_field)


def test_xml_format_rejects_unknown_and_duplicate_fields():
    parser = XMLParser(["think", ("answer", "result")])
    with pytest.raises(ConfigError, match="unknown"):
        parser.format(thought="x")
    with pytest.raises(ConfigError, match="same field"):
        parser.format(answer="a", result="b")
    assert parser.format(think="t", answer=None) == "<think>\nt\n</think>"


@pytest.mark.parametrize(
    "fields",
    [[], ["ok", "ok"], ["ok", ("other", "ok")], ["bad tag"], [()], ["1abc"]],
)
def test_xml_invalid_fields_raise_config_error(fields):
    with pytest.raises(ConfigError):
        XMLParser(fields)


def test_xml_format_str_names_every_tag_and_alternative():
    text = XMLParser(["think", ("answer", "result")]).get_format_str()
    for tag in ("<think>", "</think>", "<[ answer | result ]>", "</[ answer | result ]>"):
        assert tag in text


def test_xml_format_reward_uses_014_weights():
    """0.2 always, 0.4 x share of fields present (once a block is complete), 0.2 for starting
    with the first field's tag, 0.2 for ending with the last field's closing tag."""
    parser = XMLParser(["think", "answer"])
    reward = parser.get_format_reward_func()
    perfect = "<think>\nreasoning\n</think>\n<answer>\n42\n</answer>"
    assert reward(completion=perfect) == pytest.approx(1.0)
    assert reward(completion=chat(("assistant", perfect))) == pytest.approx(1.0)
    assert reward(completion=chat(("assistant", "<answer>  42  </answer>"))) == pytest.approx(0.6)
    assert reward(completion="Sure! " + perfect) == pytest.approx(0.8)
    assert reward(completion="no tags at all") == pytest.approx(0.2)
    assert reward(completion="<think>unclosed") == pytest.approx(0.4)  # starts right, no block
    assert reward(completion=chat(("user", perfect))) == 0.0  # no assistant message
    # Mean over assistant messages; a tool-call-only message (no text) counts, with 0.2.
    mixed = [
        {"role": "assistant", "content": perfect},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]},
        {"role": "assistant", "content": "untagged"},
    ]
    assert reward(completion=mixed) == pytest.approx((1.0 + 0.2 + 0.2) / 3)


@settings(max_examples=60, deadline=None)
@given(text=st.text())
def test_xml_format_reward_is_bounded(text):
    score = XMLParser(["think", ("answer", "result")]).get_format_reward_func()(completion=text)
    assert 0.0 <= score <= 1.0


# -- ThinkParser --------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("<think>hmm</think>\n 42 ", "42"),
        ("<think>a</think>draft</think> final", "final"),  # after the last </think>
        ("reasoning from a template-opened block</think>7", "7"),
        ("  no think block at all  ", ""),  # 0.1.4: no </think>, no answer
        ("<think>still thinking when cut off", ""),
        ("<think>done</think>", ""),
    ],
)
def test_think_parse(text, expected):
    assert ThinkParser().parse(text) == expected


def test_think_parse_answer_applies_extract_fn_to_the_last_assistant_message():
    parser = ThinkParser(extract_fn=lambda s: s.split()[-1])
    completion = chat(("assistant", "<think>x</think> answer is 1"), ("assistant", "<think>y</think> so 2"))
    assert parser.parse_answer(completion) == "2"
    # 0.1.4: without </think> the answer part is "" and extract_fn sees "".
    assert ThinkParser().parse_answer("<think>never closed") == ""
    assert ThinkParser().parse_answer(chat(("assistant", "hello"))) == ""


@pytest.mark.parametrize(
    "text, ok",
    [
        ("<think>r</think>answer", True),
        ("\n  <think>r</think>\nanswer", True),
        ("answer first <think>r</think> more", False),
        ("<think>r</think><think>s</think>answer", False),
        ("<think>r</think>   ", True),  # 0.1.4: anything after </think>, whitespace too
        ("<think>r</think>", False),
        ("<think>r</think>answer</think>", False),
        ("plain answer", False),
    ],
)
def test_think_format_reward_single_message(text, ok):
    reward = ThinkParser().get_format_reward_func()
    assert reward(completion=text) == (1.0 if ok else 0.0)
    assert reward(completion=chat(("assistant", text))) == (1.0 if ok else 0.0)


def test_think_format_reward_is_the_share_of_good_assistant_messages():
    reward = ThinkParser().get_format_reward_func()
    completion = [
        {"role": "assistant", "content": "<think>r</think>", "tool_calls": [{"function": {"name": "f"}}]},
        {"role": "tool", "content": "no think here, but not an assistant"},
        {"role": "assistant", "content": "<think>r</think>final"},
        {"role": "assistant", "content": "forgot to think"},
    ]
    # 0.1.4: a tool-call message needs an answer after </think> like any other.
    assert reward(completion=completion) == pytest.approx(1 / 3)
    assert reward(completion=chat(("user", "hi"))) == 0.0


@pytest.mark.parametrize("role", ["assistant", "user", "system", "tool"])
def test_message_helpers_take_completion_by_keyword_as_upstream(role):
    """0.1.4-0.1.12 name the argument ``completion``; code calling it by keyword keeps working."""
    messages = [{"role": r, "content": r} for r in ("system", "user", "assistant", "tool")]
    for parser in (Parser(), XMLParser(["answer"]), ThinkParser()):
        got = getattr(parser, f"get_{role}_messages")(completion=messages)
        assert got == [{"role": role, "content": role}]


@pytest.mark.parametrize(
    "text, answer",
    [
        ("<think>a</think> 42 ", "42"),
        ("just 42", "just 42"),
        ("<think>a</think>x</think> y", "y"),
        ("<think>unfinished", "<think>unfinished"),
    ],
)
def test_maybe_think_parser_reads_after_an_optional_think_block(text, answer):
    """0.1.7-0.1.12's MaybeThinkParser: after the last </think>, or the whole text without one."""
    from verifiers.parsers import MaybeThinkParser
    from verifiers.parsers.maybe_think_parser import MaybeThinkParser as same

    assert MaybeThinkParser is same
    assert MaybeThinkParser().parse(text) == answer
    assert MaybeThinkParser(extract_fn=str.upper).parse_answer([{"role": "assistant", "content": text}]) == (
        answer.upper()
    )
