"""0.1.x names of ``verifiers.utils.*`` and ``verifiers.models`` (issue 41), each called as that
release's code calls it; the ones refused raise one line naming the reason."""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
from types import SimpleNamespace

import pytest

import verifiers as vf
from verifiers.compat.refused import RefusedNameError

# -- async_utils ----------------------------------------------------------------------------------


def test_maybe_await_takes_0_1_x_function_form_and_the_walk_sees_it():
    from verifiers.compat.forms import forms_of
    from verifiers.utils.async_utils import maybe_await

    async def add(a, b=0):
        return a + b

    assert asyncio.run(maybe_await(add, 1, b=2)) == 3  # 0.1.x: maybe_await(func, *args, **kwargs)
    assert list(forms_of(maybe_await)[0].__code__.co_varnames[:1]) == ["func"]


def test_semaphore_helpers_and_named_args():
    from verifiers.utils.async_utils import (
        NullAsyncContext,
        NullContext,
        maybe_call_with_named_args,
        maybe_semaphore,
        with_sem,
    )

    async def run():
        none, two = await maybe_semaphore(None), await maybe_semaphore(2)
        assert isinstance(none, NullAsyncContext) and isinstance(two, asyncio.Semaphore)

        async def value():
            return 7

        got = await with_sem(two, value())
        never = value()
        task = asyncio.ensure_future(with_sem(asyncio.Semaphore(0), never))  # waits for the semaphore
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert never.cr_frame is None  # closed: no "never awaited" warning

        def reward(completion, answer):
            return float(completion == answer)

        named = await maybe_call_with_named_args(reward, completion="a", answer="a", state={})
        everything = await maybe_call_with_named_args(lambda **kw: sorted(kw), x=1, y=2)
        return got, named, everything

    assert asyncio.run(run()) == (7, 1.0, ["x", "y"])
    with NullContext() as nothing:
        assert nothing is None


def test_event_loop_lag_monitor_and_stats():
    from verifiers.utils.async_utils import EventLoopLagMonitor, EventLoopLagStats

    monitor = EventLoopLagMonitor(measure_interval=0.001, max_measurements=3)

    async def run():
        task = monitor.run_in_background()
        while len(monitor.lags) < 3:
            await asyncio.sleep(0.001)
        task.cancel()

    asyncio.run(run())
    stats = EventLoopLagStats.from_monitor(monitor)
    assert stats.n == 3 and stats.min <= stats.median <= stats.p90 <= stats.max and "n=3" in str(stats)
    monitor.lags.extend([0.0, 1.0, 2.0])
    assert EventLoopLagStats.from_monitor(monitor).p90 == pytest.approx(1.8)  # numpy's linear percentile
    monitor.reset_lags()
    assert str(EventLoopLagStats.from_monitor(monitor)) == "no samples"


# -- data_utils -----------------------------------------------------------------------------------


def test_extract_boxed_answer_strict():
    from verifiers.utils.data_utils import extract_boxed_answer

    assert extract_boxed_answer(r"so \boxed{4}", strict=True) == "4"
    assert extract_boxed_answer("no box", strict=True) == "" and extract_boxed_answer("no box") == "no box"
    assert vf.extract_boxed_answer(r"\boxed{open", strict=True) == ""


def test_load_example_dataset_defaults_to_gsm8k(monkeypatch):
    from verifiers.utils import data

    seen = []
    monkeypatch.setattr(data, "_load_hub", lambda key, split, n, seed: seen.append((key, split)) or "rows")
    assert vf.load_example_dataset() == "rows" and seen == [("gsm8k", "test")]


def test_get_preprocess_fn_turns_a_raw_row_into_question_and_answer():
    from verifiers.utils.data_utils import get_preprocess_fn

    assert get_preprocess_fn("gsm8k")({"question": "q", "answer": "work #### 12"}) == {
        "question": "q",
        "answer": "12",
    }
    mmlu = get_preprocess_fn("mmlu")({"question": "q?", "choices": ["x", "y"], "answer": 1})
    assert mmlu == {"question": "Question: q?\n\nA: x\nB: y", "temp_answer": "B"}  # as 0.1.x
    with pytest.raises(ValueError, match="no preprocess function"):
        get_preprocess_fn("nope")


def test_format_dataset_adds_example_id_and_prompt():
    from datasets import Dataset

    from verifiers.utils.data_utils import format_dataset

    rows = Dataset.from_dict({"q": ["1+1?"], "a": ["2"], "example_id": ["src-7"]})
    out = format_dataset(rows, system_prompt="Be brief.", question_key="q", answer_key="a")
    assert out[0]["example_id"] == 0 and out[0]["src_id"] == "src-7" and out[0]["answer"] == "2"
    assert out[0]["prompt"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "1+1?"},
    ]
    kept = format_dataset(Dataset.from_dict({"prompt": [[{"role": "user", "content": "x"}]]}))
    assert kept.column_names == ["prompt", "example_id"]


# -- logging_utils --------------------------------------------------------------------------------


@pytest.fixture()
def verifiers_logger():
    logger = logging.getLogger("verifiers")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    root = logging.getLogger()
    root_saved = (list(root.handlers), root.level)
    yield logger
    for handler in logger.handlers:
        if handler not in saved[0]:
            handler.close()
    logger.handlers, logger.level, logger.propagate = list(saved[0]), saved[1], saved[2]
    root.handlers, root.level = list(root_saved[0]), root_saved[1]


def test_setup_logging_to_a_file_as_json(tmp_path, verifiers_logger):
    from verifiers.utils.logging_utils import LOGGER_NAME, setup_logging

    log = tmp_path / "run.log"
    setup_logging("WARNING", log_file=str(log), file_logging=True, console_logging=False, json_logging=True)
    logging.getLogger(LOGGER_NAME + ".x").warning("hello %s", "there")
    logging.getLogger(LOGGER_NAME + ".x").info("not shown")
    entry = json.loads(log.read_text().splitlines()[-1])
    assert (
        entry["message"] == "hello there"
        and entry["level"] == "WARNING"
        and len(log.read_text().splitlines()) == 1
    )
    with pytest.raises(vf.ConfigError, match="needs log_file"):
        setup_logging(file_logging=True)


def test_setup_logging_0_1_10_file_level(tmp_path, verifiers_logger):
    from verifiers.utils.logging_utils import setup_logging

    log = tmp_path / "debug.log"
    vf.setup_logging("ERROR", log_file=str(log), log_file_level="DEBUG")  # 0.1.10: log_file alone writes
    logging.getLogger("verifiers.y").debug("detail")
    assert "detail" in log.read_text()
    setup_logging(None)
    logging.getLogger("verifiers.y").error("off")
    assert "off" not in log.read_text()


def test_log_level_quiet_and_once(caplog, verifiers_logger):
    from verifiers.utils.logging_utils import log_level, log_once, quiet_verifiers, warning_once

    logger = verifiers_logger
    logger.setLevel(logging.DEBUG)
    with quiet_verifiers():
        assert logger.level == logging.WARNING
        with log_level("ERROR"):
            assert logger.level == logging.ERROR
    assert logger.level == logging.DEBUG
    other = logging.getLogger("tests.utils_names")
    with caplog.at_level(logging.INFO, logger="tests.utils_names"):
        warning_once(other, "careful")
        warning_once(other, "careful")
        log_once(other, logging.INFO, "note")
    assert [r.getMessage() for r in caplog.records] == ["careful", "note"]


def test_print_time_size_truncate():
    from verifiers.utils.logging_utils import print_size, print_time, truncate

    assert [print_time(t) for t in (90061, 3600, 125, 42, 0.25)] == ["1d 1h", "1h", "2m 5s", "42s", "250ms"]
    assert [print_size(b) for b in (3 * 1024**3, 1536 * 1024, 2048, 12)] == [
        "3.0 GB",
        "1.5 MB",
        "2.0 KB",
        "12 bytes",
    ]
    assert truncate("abcdef", 3) == "abc..." and truncate("abc", 3) == "abc"


def test_print_prompt_completions_sample_with_errors_in_both_orders(capsys):
    from verifiers.utils.logging_utils import print_prompt_completions_sample

    # 0.1.9+: (prompts, completions, errors, rewards, step)
    print_prompt_completions_sample(["p0"], ["c0"], [ValueError("boom")], [0.5], 3)
    out = capsys.readouterr().out
    assert "Step 3" in out and "ValueError: boom" in out and "0.500" in out
    print_prompt_completions_sample(["p0"], ["c0"], [{"error": "late"}], rewards=[1.0], step=4)
    assert "late" in capsys.readouterr().out
    vf.print_prompt_completions_sample(["p0"], ["c0"], [0.25], 5)  # 0.1.4's order, no errors
    out = capsys.readouterr().out
    assert "Step 5" in out and "error" not in out


# -- message_utils, response_utils, tool_utils -------------------------------------------------------


def test_message_helpers():
    from verifiers.utils.message_utils import (
        concat_messages,
        format_messages,
        from_raw_message,
        strip_nones_from_content,
    )

    user, reply = [{"role": "user", "content": "hi"}], [{"role": "assistant", "content": "yo"}]
    assert concat_messages([user, reply]) == user + reply
    parts = [{"role": "user", "content": [{"type": "text", "text": "a", "image_url": None}]}]
    assert strip_nones_from_content(parts)[0]["content"] == [{"type": "text", "text": "a"}]
    message = from_raw_message({"role": "assistant", "content": "x"})
    assert isinstance(message, vf.AssistantMessage) and message.content == "x"
    with pytest.raises(vf.ConfigError, match="unknown message role"):
        from_raw_message({"role": "text", "content": "x"})
    assert format_messages(user + reply).plain == "user: hi\nassistant: yo"


def _chat_response(finish_reason="stop"):
    message = SimpleNamespace(content="4", tool_calls=None)
    return SimpleNamespace(
        choices=[SimpleNamespace(message=message, finish_reason=finish_reason, logprobs=None)]
    )


def test_response_helpers_0_1_10_forms():
    from verifiers.utils.response_utils import (
        parse_is_truncated,
        parse_response_messages,
        parse_response_tokens,
    )

    async def run():
        return (
            await parse_response_messages(_chat_response(), "chat"),
            await parse_is_truncated(_chat_response("length"), "chat"),
            await parse_is_truncated(_chat_response(), "chat"),
            await parse_response_tokens(_chat_response(), "chat", 100),  # 0.1.8-0.1.10's order
        )

    messages, truncated, finished, tokens = asyncio.run(run())
    assert messages == [{"role": "assistant", "content": "4"}] and truncated and not finished
    assert tokens is None  # the server sent no token data


def test_tool_content_parts():
    from verifiers.utils.tool_utils import VALID_TOOL_CONTENT_PART_TYPES, is_valid_tool_content_parts

    assert VALID_TOOL_CONTENT_PART_TYPES == {"text", "image_url"}
    assert is_valid_tool_content_parts(
        [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {}}]
    )
    assert not is_valid_tool_content_parts([{"type": "audio"}]) and not is_valid_tool_content_parts("text")


# -- moved modules, models ---------------------------------------------------------------------------


def test_moved_utils_modules_are_ours():
    from verifiers.utils.config_utils import MissingKeyError, ensure_keys
    from verifiers.utils.decorators import stop
    from verifiers.utils.env_utils import load_environment

    assert load_environment is vf.load_environment and stop is vf.stop
    with pytest.raises(MissingKeyError, match="VF_TEST_UNSET_KEY"):
        ensure_keys(["VF_TEST_UNSET_KEY"])


def test_models_take_model_name():
    pytest.importorskip("torch")
    from verifiers.utils.model_utils import get_model, get_tokenizer, is_liger_available

    assert isinstance(is_liger_available(), bool)
    with pytest.raises(vf.ConfigError, match="cannot load a tokenizer"):
        get_tokenizer(model_name="/nonexistent/model")
    with pytest.raises(vf.ConfigError, match="cannot load model"):
        get_model(model_name="/nonexistent/model")


# -- refused ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "name", "reason"),
    [
        ("verifiers.utils.eval_utils", "run_evaluation", "vf-eval"),
        ("verifiers.utils.tunnel_utils", "TunnelPool", "hosted Prime service"),
        ("verifiers.utils.client_utils", "setup_client", "openai.AsyncOpenAI"),
        ("verifiers.utils.async_utils", "maybe_retry", "max_retries"),
        ("verifiers.utils.message_utils", "normalize_messages", "as_message"),
        ("verifiers.utils.env_utils", "env_config_type", "keyword"),
    ],
)
def test_refused_utils_names_fail_in_one_line(module, name, reason):
    mod = importlib.import_module(module)  # the module itself imports
    with pytest.raises(RefusedNameError) as info:
        getattr(mod, name)
    message = str(info.value)
    assert reason in message and f"{module}.{name}" in message and "\n" not in message
    assert not hasattr(mod, "__path__")  # a plain module: the import system's own lookups are not refused
