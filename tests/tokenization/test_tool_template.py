"""Tools reach every model: verifiers' tool chat template (verifiers/tokenization/chat_template.py).

SmolLM2's chat template (also the tiny test model's) ignores ``tools``. The fallback
must be detected, render schemas, tool calls and tool results in the model's own
ChatML form, produce replies vLLM's own Hermes parser reads back, be what vf-vllm
serves by default, and be what the trainer renders with (token in, token out). (vf-vllm's flags
for it: tests/inference/server/test_main.py; vf-rl's: tests/cli/rl/test_plan.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from tests.doubles.chat_templates import TOOLS_TEMPLATE
from verifiers.errors import ConfigError
from verifiers.tokenization.assembly import prompt_length, render_chat_ids
from verifiers.tokenization.chat_template import (
    ENV_VAR,
    effective_chat_template,
    is_tool_template,
    renders_tools,
    server_messages,
    server_tools,
    wrap_chat_template,
)

pytestmark = pytest.mark.usefixtures("no_template_override")  # tests/conftest.py

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
CALL = {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
CONVERSATION = [
    {"role": "system", "content": "Use the tools."},
    {"role": "user", "content": "What is 2 + 3?"},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "content": "5", "tool_call_id": "call_1"},
]
HERMES_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
# Strict user/assistant alternation after an optional system message (Llama-2 / Mistral style).
ALTERNATING_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m['role'] != 'system' and (m['role'] == 'user') != (loop.index0 % 2 == (1 if messages[0]['role'] == 'system' else 0)) -%}"
    "{{ raise_exception('roles must alternate user/assistant') }}{%- endif -%}"
    "{{ '[' + m['role'] + '] ' + m['content'] + '\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt %}{{ '[assistant] ' }}{% endif -%}"
)


@pytest.fixture
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


def render(tok, messages, tools=None, template=None, add_generation_prompt=True):
    kw = {"tools": tools} if tools else {}
    template = template if template is not None else effective_chat_template(tok)
    return tok.apply_chat_template(
        messages, chat_template=template, tokenize=False, add_generation_prompt=add_generation_prompt, **kw
    )


# -- (a) detection and rendering, no server ----------------------------------------------------


@pytest.mark.parametrize("which", ["tiny", "smollm2"])
def test_smollm2_style_templates_drop_tools_and_get_the_fallback(which, request):
    tok = request.getfixturevalue("tiny_tokenizer" if which == "tiny" else "smol_tokenizer")
    assert renders_tools(tok) is False
    template = effective_chat_template(tok)
    assert is_tool_template(template) and template.endswith(tok.chat_template)  # the model's own, wrapped
    assert renders_tools(tok, template) is True
    assert effective_chat_template(tok) is template  # decided once per template


def test_a_template_that_renders_tools_is_left_alone(smol_tokenizer):
    assert renders_tools(smol_tokenizer, TOOLS_TEMPLATE) is True
    assert wrap_chat_template(wrap_chat_template("x")) == wrap_chat_template("x")
    original = smol_tokenizer.chat_template
    try:
        smol_tokenizer.chat_template = TOOLS_TEMPLATE
        assert effective_chat_template(smol_tokenizer) == TOOLS_TEMPLATE
    finally:
        smol_tokenizer.chat_template = original


def test_fallback_renders_schemas_calls_and_results_in_chatml(smol_tokenizer):
    text = render(smol_tokenizer, CONVERSATION, [ADD])
    system = text.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nUse the tools.\n\n# Tools")  # appended to the user's system
    assert json.dumps(ADD) in system  # the schema, as JSON
    assert "<tool_call>" in system  # and the call format
    assert f"<|im_start|>assistant\n{HERMES_CALL}<|im_end|>\n" in text
    assert "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>\n" in text
    assert text.endswith("<|im_start|>assistant\n")
    # no system message: one is made for the tools (SmolLM2's default one would hide them)
    no_system = render(smol_tokenizer, CONVERSATION[1:2], [ADD])
    assert no_system.startswith("<|im_start|>system\n# Tools") and "named SmolLM" not in no_system
    # without tools or tool messages: byte for byte the model's own template
    for messages in (CONVERSATION[:2], CONVERSATION[1:2]):
        assert render(smol_tokenizer, messages) == render(
            smol_tokenizer, messages, template=smol_tokenizer.chat_template
        )


def test_parallel_calls_and_results_keep_turns_alternating(smol_tokenizer):
    calls = [CALL, {**CALL, "id": "call_2", "function": {"name": "add", "arguments": '{"a": 1, "b": 1}'}}]
    messages = [
        {"role": "user", "content": "2+3 and 1+1?"},
        {"role": "assistant", "content": "Two sums.", "tool_calls": calls},
        {"role": "tool", "content": "5", "tool_call_id": "call_1"},
        {"role": "tool", "content": "2", "tool_call_id": "call_2"},
    ]
    text = render(smol_tokenizer, messages, [ADD], template=wrap_chat_template(ALTERNATING_TEMPLATE))
    assert "[assistant] Two sums.<tool_call>" in text and "</tool_call>\n<tool_call>" in text
    assert "[user] <tool_response>\n5\n</tool_response>\n<tool_response>\n2\n</tool_response>\n" in text
    with pytest.raises(Exception, match="alternate"):  # the model's template alone rejects tool messages
        render(smol_tokenizer, messages, template=ALTERNATING_TEMPLATE)


def test_server_and_trainer_shapes_render_the_same(smol_tokenizer):
    """vLLM parses tool-call arguments into dicts and dumps tools in its own field order."""
    reordered = {"type": "function", "function": {"parameters": ADD["function"]["parameters"], "name": "add",
                                                  "description": "Add two integers."}}  # fmt: skip
    as_client_sends = render(smol_tokenizer, CONVERSATION, [reordered])
    as_vllm_renders = render(smol_tokenizer, server_messages(CONVERSATION), server_tools([reordered]))
    assert as_client_sends == as_vllm_renders
    assert server_messages(CONVERSATION)[2]["tool_calls"][0]["function"]["arguments"] == {"a": 2, "b": 3}
    assert CONVERSATION[2]["tool_calls"][0]["function"]["arguments"] == '{"a": 2, "b": 3}'  # not modified
    assert server_tools([reordered])[0]["function"] == {**ADD["function"]}


def test_a_hermes_reply_parses_with_vllms_own_parser(smol_tokenizer):
    pytest.importorskip("vllm")
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser

    request = ChatCompletionRequest(model="m", messages=CONVERSATION[:2], tools=[ADD])
    reply = "I will add them.\n" + HERMES_CALL  # what the system prompt asks the model to write
    parsed = Hermes2ProToolParser(smol_tokenizer).extract_tool_calls(reply, request)
    assert parsed.tools_called and parsed.content == "I will add them.\n"
    (call,) = parsed.tool_calls
    assert call.function.name == "add" and json.loads(call.function.arguments) == {"a": 2, "b": 3}
    # the parsed message renders back to exactly the text the model wrote
    message = {"role": "assistant", "content": parsed.content, "tool_calls": [call.model_dump()]}
    text = render(smol_tokenizer, [CONVERSATION[1], message], [ADD], add_generation_prompt=False)
    assert f"<|im_start|>assistant\n{reply}<|im_end|>" in text


def test_trainer_counts_the_tool_schemas(smol_tokenizer):
    prompt = CONVERSATION[1:2]
    assert prompt_length(prompt, smol_tokenizer, [ADD]) > prompt_length(prompt, smol_tokenizer) + 50
    ids = render_chat_ids(smol_tokenizer, CONVERSATION, True, [ADD])
    assert smol_tokenizer.decode(ids) == render(smol_tokenizer, CONVERSATION, [ADD])


def test_vf_chat_template_makes_the_trainer_follow_another_server_template(
    smol_tokenizer, monkeypatch, tmp_path
):
    own = smol_tokenizer.chat_template
    monkeypatch.setenv(ENV_VAR, "model")  # server started with --no-tool-template
    assert effective_chat_template(smol_tokenizer) == own
    assert prompt_length(CONVERSATION[1:2], smol_tokenizer, [ADD]) == prompt_length(
        CONVERSATION[1:2], smol_tokenizer
    )
    path = tmp_path / "mine.jinja"
    path.write_text(TOOLS_TEMPLATE)
    monkeypatch.setenv(ENV_VAR, str(path))  # server started with --chat-template mine.jinja
    assert effective_chat_template(smol_tokenizer) == TOOLS_TEMPLATE
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "missing.jinja"))
    with pytest.raises(ConfigError, match=ENV_VAR):
        effective_chat_template(smol_tokenizer)


# -- (b) + (c) a real vf-vllm server -----------------------------------------------------------


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


@pytest.mark.server
def test_server_renders_tools_and_parses_calls_and_trainer_tokens_match(tiny_model_dir, tmp_path):
    """vf-vllm with default flags: a chat request's prompt holds the tool schema, a Hermes reply
    comes back as tool_calls, and for a 2-turn ToolEnv rollout the trainer-side rendering of
    prompt + env turns is token for token what the server saw."""
    pytest.importorskip("vllm")
    from datasets import Dataset
    from transformers import AutoTokenizer

    from tests.doubles.vllm_server import serve
    from verifiers.envs.tool import ToolEnv

    tok_dir = str(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tok_dir)
    dataset = Dataset.from_list([{"question": "What is 2 + 3?", "answer": "5"}])
    env = ToolEnv(tools=[add], max_turns=2, dataset=dataset)
    # The random tiny model cannot choose to call a tool: the regex makes it write one call.
    forced = r'<tool_call>\n\{"name": "add", "arguments": \{"a": 2, "b": 3\}\}\n</tool_call>'
    # At most one token per character (+ EOS): the call always fits in max_tokens.
    sampling = {"max_tokens": 80, "temperature": 1.0, "extra_body": {"structured_outputs": {"regex": forced}}}
    with serve(tiny_model_dir, tmp_path, "--max-num-seqs", "4", max_model_len=1024) as server:
        with contextlib.closing(server.client()) as client:
            health = client.wait_until_ready(timeout=60)
            assert health["tool_template"] and health["tool_template"].endswith(".jinja")
            prompt = [{"role": "user", "content": "What is 2 + 3?"}]
            completion, state = asyncio.run(
                env.rollout(client, tok_dir, prompt, answer="5", sampling_args=sampling)
            )
    # (b) the tool call came back structured, and the schema was in the prompt the model saw
    first = completion[0]
    assert first["role"] == "assistant" and first["tool_calls"][0]["function"]["name"] == "add"
    assert json.loads(first["tool_calls"][0]["function"]["arguments"]) == {"a": 2, "b": 3}
    assert completion[1] == {"role": "tool", "content": "5", "tool_call_id": first["tool_calls"][0]["id"]}
    turns = state["turn_tokens"]
    assert len(turns) == 2
    seen = tok.decode(turns[0].prompt_ids)
    # The template writes name, description and parameters (not 0.1.4's "strict" flag).
    shown = {
        "type": "function",
        "function": {k: v for k, v in env.oai_tools[0]["function"].items() if k != "strict"},
    }
    assert json.dumps(shown) in seen and seen.endswith("<|im_start|>assistant\n")
    # (c) trainer-side tokens of prompt + env turns == the server's prompt ids, turn by turn
    for turn, k in zip(turns, (0, 2), strict=True):
        assert render_chat_ids(tok, prompt + completion[:k], True, env.oai_tools) == list(turn.prompt_ids)
    # and the server re-rendered the sampled call as the text the model wrote
    sampled = tok.decode(turns[0].completion_ids)
    assert sampled.replace("<|im_end|>", "") in tok.decode(turns[1].prompt_ids)
