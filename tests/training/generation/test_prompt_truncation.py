"""max_prompt_length: prompts are cut from the left before they reach the server, and counted."""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("transformers")

from tests.doubles.generation import FakeEnv  # noqa: E402
from verifiers.tokenization.assembly import prompt_length, truncate_prompt  # noqa: E402
from verifiers.training.generation.producer import (  # noqa: E402
    PROMPT_TRUNCATED_KEY,
    PromptStream,
    PromptTruncation,
    RolloutProducer,
)

LONG = " ".join(f"word{i}" for i in range(200))


def test_short_prompt_is_left_alone(smol_tokenizer):
    prompt = [{"role": "user", "content": "hi"}]
    out, cut = truncate_prompt(prompt, smol_tokenizer, 512)
    assert out is prompt and cut is False


def test_oldest_messages_go_first_system_and_last_message_stay(smol_tokenizer):
    prompt = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "old question " + LONG},
        {"role": "assistant", "content": "old answer " + LONG},
        {"role": "user", "content": "What is 2 + 2?"},
    ]
    limit = 60
    assert prompt_length(prompt, smol_tokenizer) > limit
    out, cut = truncate_prompt(prompt, smol_tokenizer, limit)
    assert cut and prompt_length(out, smol_tokenizer) <= limit
    assert out == [prompt[0], prompt[3]]  # the few-shot pair is dropped whole
    assert prompt[1]["content"].startswith("old question")  # the dataset row is not modified


def test_one_long_message_loses_the_start_of_its_text(smol_tokenizer):
    prompt = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": LONG}]
    out, cut = truncate_prompt(prompt, smol_tokenizer, 80)
    assert cut and prompt_length(out, smol_tokenizer) <= 80
    assert out[0] == prompt[0]
    assert out[1]["content"].endswith("word199") and not out[1]["content"].startswith("word0 ")


class ToolTemplate:
    """SmolLM2's tokenizer with a chat template that renders tool schemas (SmolLM2's ignores them)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def apply_chat_template(self, messages, tools=None, **kw):
        head = [{"role": "system", "content": json.dumps(tools)}] if tools else []
        return self.tokenizer.apply_chat_template(head + list(messages), **kw)


class ToolEnv:
    def tools_for(self, info):
        return info.get("oai_tools")


TOOLS = [{"type": "function", "function": {"name": "search", "description": "Search the wiki. " * 5}}]


def test_tool_schemas_count_towards_the_length(smol_tokenizer):
    template = ToolTemplate(smol_tokenizer)
    prompt = [{"role": "user", "content": "find " + " ".join(["x"] * 120)}]
    n_plain = prompt_length(prompt, template)
    assert prompt_length(prompt, template, TOOLS) > n_plain
    assert not truncate_prompt(prompt, template, n_plain)[1]
    out, cut = truncate_prompt(prompt, template, n_plain, TOOLS)
    assert cut and prompt_length(out, template, TOOLS) <= n_plain
    # the dataset view asks the env for the row's tools (info may be a JSON string)
    rows = [{"prompt": prompt, "info": json.dumps({"oai_tools": TOOLS})}, {"prompt": prompt, "info": {}}]
    data = PromptTruncation(rows, ToolEnv(), template, n_plain)
    assert PROMPT_TRUNCATED_KEY in data[0] and PROMPT_TRUNCATED_KEY not in data[1]


def test_text_prompt_keeps_its_last_tokens(smol_tokenizer):
    out, cut = truncate_prompt(LONG, smol_tokenizer, 20)
    assert cut and prompt_length(out, smol_tokenizer) <= 20 and out.endswith("word199")


def test_producer_sends_cut_prompts_and_counts_them(smol_tokenizer):
    rows = [{"prompt": LONG if i % 2 else "short", "answer": ""} for i in range(4)]
    data = PromptTruncation(rows, env=None, processing_class=smol_tokenizer, max_prompt_length=16)
    assert len(data) == 4 and PROMPT_TRUNCATED_KEY in data[1] and PROMPT_TRUNCATED_KEY not in data[0]
    env = FakeEnv()
    producer = RolloutProducer(
        env, None, "m", data, PromptStream(4, shuffle=False), num_prompts=4, num_generations=2
    )
    batch = asyncio.run(producer.produce(0, 0))
    assert batch.metrics["prompt_truncated_frac"] == 0.5
    sent = batch.outputs.prompt  # what a_generate was given: the cut prompts, no marker key
    assert all(prompt_length(p, smol_tokenizer) <= 16 for p in sent)
    assert sent[0] == "short" and sent[2] != LONG and sent[2].endswith("word199")


def test_limit_below_the_templates_own_tokens_is_a_config_error(smol_tokenizer):
    from verifiers.errors import ConfigError

    with pytest.raises(ConfigError, match=r"max_prompt_length=3 is shorter than the chat template") as info:
        truncate_prompt([{"role": "user", "content": LONG}], smol_tokenizer, 3)
    assert info.value.hint == "raise max_prompt_length"
