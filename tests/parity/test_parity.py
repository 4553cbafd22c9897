"""Differential tests: generated calls under verifiers 0.1.4 (the oracle, see conftest.py) and ours.

Default behaviour must be 0.1.4's: the same parser output, rewards, tool schemas, prompts and
training tensors. Where 0.1.4 crashes or is plainly unintended we differ on purpose; every such
case is checked against the id in ``exceptions.EXCEPTIONS`` that explains it (and must be in
docs/migrating.md), so a difference nobody listed fails.
"""

from __future__ import annotations

import asyncio
import copy
import json
import math
from collections import Counter
from pathlib import Path

import pytest

import verifiers as vf
from tests.parity import rewards
from tests.parity.exceptions import EXCEPTIONS
from verifiers.errors import ConfigError

DOCS = Path(__file__).resolve().parents[2] / "docs" / "migrating.md"
seen_exceptions: Counter[str] = Counter()


def excepted(key: str) -> None:
    """Record that a case differs from 0.1.4 for the listed reason ``key``."""
    assert key in EXCEPTIONS, key
    seen_exceptions[key] += 1


def is_error(value) -> bool:
    return isinstance(value, dict) and set(value) == {"error"}


def fields_of(spec):
    return [f if isinstance(f, str) else tuple(f) for f in spec]


def close(a, b) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12)


def without_errors(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if not k.endswith("_error")}


def last_assistant_text(completion):
    msgs = [m for m in completion if m["role"] == "assistant"]
    return None if not msgs else msgs[-1]["content"]


@pytest.fixture(scope="module")
def results(parity):
    groups, oracle, seconds = parity
    print(f"oracle: {sum(len(v) for v in groups.values())} cases in {seconds:.1f} s")
    return groups, oracle


def pairs(results, op):
    groups, oracle = results
    assert len(groups[op]) == len(oracle[op])
    return list(zip(groups[op], oracle[op], strict=True))


def test_same_tokenizer_on_both_sides(results, smol_tokenizer):
    for case, theirs in pairs(results, "encode"):
        assert smol_tokenizer.encode(case["text"]) == theirs["encode"]
        chat = smol_tokenizer.apply_chat_template(case["messages"], add_generation_prompt=True, tokenize=True)
        assert list(chat["input_ids"] if hasattr(chat, "keys") else chat) == theirs["chat"]


# -- parsers ------------------------------------------------------------------------------------


def test_xml_parser(results):
    for case, theirs in pairs(results, "xml"):
        parser = vf.XMLParser(fields_of(case["fields"]), answer_field=case["answer_field"])
        text, completion = case["text"], case["completion"]
        assert vars(parser.parse(text)) == theirs["parse"], text
        assert vars(parser.parse(text, last=True)) == theirs["parse_last"], text
        assert vars(parser.parse(text, strip=False)) == theirs["parse_nostrip"], text
        assert parser.parse_answer(text) == theirs["answer_text"], text
        assert parser.parse_answer(completion) == theirs["answer"], completion
        assert parser.get_format_reward_func()(completion) == theirs["format"], completion
        assert parser.get_format_str() == theirs["format_str"]


def test_issue_examples():
    """The cases issue 23 names, with 0.1.4's values."""
    parser = vf.XMLParser(["think", "answer"])
    fmt = parser.get_format_reward_func()
    assert fmt([{"role": "assistant", "content": "<answer>  42  </answer>"}]) == pytest.approx(0.6)
    assert fmt([{"role": "assistant", "content": "42"}]) == pytest.approx(0.2)
    assert (
        parser.parse_answer([{"role": "assistant", "content": "<answer>7</answer> ... <answer>8</answer>"}])
        == "7"
    )
    assert vf.ThinkParser().parse_answer([{"role": "assistant", "content": "no think tags"}]) == ""
    wrong = [{"role": "assistant", "content": "<answer>  41  </answer>"}]
    rubric = vf.Rubric(funcs=[rewards.exact, fmt], weights=[1.0, 0.2], parser=parser)
    assert asyncio.run(rubric.score_rollout([], wrong, "42", {})).reward == pytest.approx(0.12)
    assert (
        vf.ThinkParser().get_format_reward_func()([{"role": "assistant", "content": "<think>a</think>\n"}])
        == 1.0
    )


def test_think_parser(results):
    for case, theirs in pairs(results, "think"):
        parser = vf.ThinkParser()
        boxed = vf.ThinkParser(extract_fn=vf.extract_boxed_answer)
        completion = case["completion"]
        assert parser.parse(case["text"]) == theirs["parse"], case["text"]
        assert boxed.parse(case["text"]) == theirs["parse_boxed"], case["text"]
        ours_format = parser.get_format_reward_func()(completion)
        if is_error(theirs["format"]):
            assert "ZeroDivisionError" in theirs["format"]["error"] and ours_format == 0.0
            excepted("no-assistant-message")
        else:
            assert ours_format == theirs["format"], completion
        ours_answer = parser.parse_answer(completion)
        if completion[-1]["role"] != "assistant":
            text = last_assistant_text(completion)
            assert ours_answer == (None if text is None else parser.parse(text))
            if ours_answer != theirs["answer"]:
                excepted("answer-after-env-message")
        else:
            assert ours_answer == theirs["answer"], completion


def test_base_parser(results):
    for case, theirs in pairs(results, "base"):
        completion = case["completion"]
        ours = vf.Parser().parse_answer(completion)
        if completion[-1]["role"] != "assistant":
            assert ours == last_assistant_text(completion)
            if ours != theirs["answer"]:
                excepted("answer-after-env-message")
        else:
            assert ours == theirs["answer"], completion


def test_extract_helpers(results):
    for case, theirs in pairs(results, "extract"):
        assert vf.extract_boxed_answer(case["text"]) == theirs["boxed"], case["text"]
        assert vf.extract_hash_answer(case["text"]) == theirs["hash"], case["text"]


def test_parser_exceptions():
    """The listed parser differences, each shown once."""
    from verifiers.utils.data import THINK_BOXED_SYSTEM_PROMPT

    assert "tags.     Then" in THINK_BOXED_SYSTEM_PROMPT  # 0.1.4's text, spaces included
    xml = vf.XMLParser(["think", "answer"])
    assert xml.get_format_reward_func()("<think>a</think><answer>b</answer>") == pytest.approx(1.0)
    excepted("string-completion-format")
    assert vf.ThinkParser().get_format_reward_func()([{"role": "user", "content": "x"}]) == 0.0
    excepted("no-assistant-message")
    tool_turn = [{"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]}]
    assert vf.ThinkParser().get_format_reward_func()(tool_turn) == 0.0
    excepted("none-content-think")
    upper = vf.XMLParser(["answer"], extract_fn=str.upper)
    assert upper.parse_answer([{"role": "assistant", "content": "<answer>yes</answer>"}]) == "YES"
    excepted("xml-extract-fn")


# -- rubrics ------------------------------------------------------------------------------------


def make_parser(spec):
    if spec is None:
        return vf.Parser()
    if spec["kind"] == "think":
        return vf.ThinkParser()
    return vf.XMLParser(fields_of(spec["fields"]), answer_field=spec.get("answer_field", "answer"))


def make_rubric(spec):
    return vf.Rubric(
        funcs=[rewards.LIBRARY[n] for n in spec["funcs"]],
        weights=spec.get("weights"),
        parser=make_parser(spec.get("parser")),
        parallelize_scoring=spec.get("parallelize", True),
    )


def score_all(rubric, rollouts, kwargs):
    singles = [
        asyncio.run(
            rubric.score_rollout(
                r["prompt"],
                r["completion"],
                r["answer"],
                copy.deepcopy(r["state"]),
                r["task"],
                r["info"],
                **kwargs,
            )
        )
        for r in rollouts
    ]
    batch = asyncio.run(
        rubric.score_rollouts(
            [r["prompt"] for r in rollouts],
            [r["completion"] for r in rollouts],
            [r["answer"] for r in rollouts],
            [copy.deepcopy(r["state"]) for r in rollouts],
            [r["task"] for r in rollouts],
            [r["info"] for r in rollouts],
            **kwargs,
        )
    )
    return singles, batch


def compare_scores(singles, batch, theirs, failing: set[str]):
    for ours, their in zip(singles, theirs["single"], strict=True):
        assert close(ours.reward, their["reward"]), (ours, their)
        assert without_errors(ours.metrics).keys() == their["metrics"].keys()
        for k, v in their["metrics"].items():
            assert close(ours.metrics[k], v), (k, ours, their)
        for name in failing & set(their["metrics"]):
            assert ours.metrics[f"{name}_error"] >= 1.0  # a RubricGroup sums it over its members
            excepted("reward-error-metric")
    assert all(close(a, b) for a, b in zip(batch.reward, theirs["batch"]["reward"], strict=True))
    for k, values in theirs["batch"]["metrics"].items():
        assert all(close(a, b) for a, b in zip(batch.metrics[k], values, strict=True)), k


FAILING = {"boom", "returns_none"}


def test_rubric_weighted_sums_and_error_handling(results):
    for case, theirs in pairs(results, "rubric"):
        rubric = make_rubric(case["rubric"])
        assert rubric.get_reward_func_names() == theirs["names"]
        singles, batch = score_all(rubric, case["rollouts"], case["kwargs"])
        compare_scores(singles, batch, theirs, FAILING)
        r = case["rollouts"][0]
        for name, their in theirs["call"].items():
            ours = asyncio.run(
                rubric.call_reward_func(
                    rewards.LIBRARY[name],
                    r["prompt"],
                    r["completion"],
                    r["answer"],
                    copy.deepcopy(r["state"]),
                    r["task"],
                    r["info"],
                    **case["kwargs"],
                )
            )
            assert close(ours, their), (name, ours, their)


def test_rubric_group(results):
    for case, theirs in pairs(results, "rubric_group"):
        group = vf.RubricGroup(rubrics=[make_rubric(spec) for spec in case["rubrics"]])
        for name in case["add"]:
            group.add_reward_func(rewards.LIBRARY[name])
        assert group.get_reward_func_names() == theirs["names"]
        assert group.get_reward_weights() == theirs["weights"]
        singles, batch = score_all(group, case["rollouts"], {})
        compare_scores(singles, batch, theirs, FAILING)


def test_math_rubric_default_parser(results):
    pytest.importorskip("math_verify")
    from verifiers.rubrics.math_rubric import MathRubric

    ((case, theirs),) = pairs(results, "math")
    rollouts = case["rollouts"]
    ours = asyncio.run(
        MathRubric().score_rollouts(
            [r["prompt"] for r in rollouts],
            [r["completion"] for r in rollouts],
            [r["answer"] for r in rollouts],
            [{} for _ in rollouts],
        )
    )
    assert ours.reward == theirs["reward"]
    assert 0 < sum(ours.reward) < len(rollouts)  # the generated set has both outcomes
    boxed_only = [{"role": "assistant", "content": "\\boxed{3}"}]
    assert asyncio.run(MathRubric().score_rollout([], boxed_only, "3", {})).reward == 0.0  # issue 23


def test_judge_rubric_defaults(results):
    for case, theirs in pairs(results, "judge"):
        client = rewards.RecordingJudge()
        rubric = vf.JudgeRubric(judge_client=client, judge_sampling_args=case["sampling_args"])
        rubric.add_reward_func(rewards.judged)
        assert {
            "parallelize_scoring": rubric.parallelize_scoring,
            "judge_model": rubric.judge_model,
            "parser": type(rubric.parser).__name__,
        } == theirs["defaults"]
        singles, batch = score_all(rubric, case["rollouts"], {})
        compare_scores(singles, batch, theirs, set())
        # The same prompts, model and arguments (0.1.4 sent a batch's calls concurrently, so in any order).
        dump = lambda call: json.dumps(call, sort_keys=True)  # noqa: E731
        assert sorted(map(dump, client.calls)) == sorted(map(dump, theirs["calls"]))


def test_rubric_exceptions():
    def nan(completion):
        return float("nan")

    score = asyncio.run(vf.Rubric(funcs=[nan]).score_rollout([], [], "", {}))
    assert score.reward == 0.0 and score.metrics["nan_error"] == 1.0
    excepted("nonfinite-reward")
    with pytest.raises(ConfigError, match="weights"):
        vf.Rubric(funcs=[rewards.exact, rewards.boom], weights=[1.0])
    with pytest.raises(ConfigError, match="named"):
        vf.Rubric(funcs=[rewards.exact, rewards.exact])
    excepted("rubric-construction")
    first = vf.Rubric(funcs=[rewards.exact])
    group = vf.RubricGroup(rubrics=[first], funcs=[rewards.length_score])
    assert first.get_reward_func_names() == ["exact", "length_score"]
    assert group.get_reward_func_names() == ["exact", "length_score"]
    excepted("rubric-group-funcs")


# -- tool schemas -------------------------------------------------------------------------------


def test_tool_schemas(results):
    from verifiers.utils.tool_utils import convert_func_to_oai_tool

    for case, theirs in pairs(results, "tool"):
        namespace: dict = {}
        exec(case["source"], namespace)  # noqa: S102 - generated test functions
        ours = json.dumps(convert_func_to_oai_tool(namespace[case["name"]]))
        assert ours == theirs, case["source"]  # key order too: it is the text the template renders
    env = vf.ToolEnv(tools=[namespace[case["name"]]], dataset={"question": ["q"]})
    assert json.dumps(env.oai_tools[0]) == theirs  # what ToolEnv sends is that schema


def test_tool_schema_exceptions():
    from verifiers.utils.tool_utils import convert_func_to_oai_tool

    class Opaque:
        pass

    def f(x: Opaque, *args: int, **kwargs: str) -> None:
        """F."""

    params = convert_func_to_oai_tool(f)["function"]["parameters"]
    assert list(params["properties"]) == ["x"] and params["properties"]["x"] == {"title": "X"}
    excepted("tool-schema-untyped")


# -- dataset formatting -------------------------------------------------------------------------


def test_dataset_formatting(results):
    from datasets import Dataset

    for case, theirs in pairs(results, "dataset"):
        rows = Dataset.from_dict(case["rows"])
        sp, fs = case.get("system_prompt"), case.get("few_shot")
        if "question_key" in case:
            env = vf.SingleTurnEnv(dataset={"question": ["q"], "answer": ["a"]})
            ds = env.format_dataset(
                rows, sp, fs, question_key=case["question_key"], answer_key=case["answer_key"]
            )
        else:
            env = vf.SingleTurnEnv(dataset=rows, system_prompt=sp, few_shot=fs)
            ds = env.dataset
        assert list(ds["prompt"]) == theirs["prompt"]
        assert list(ds["answer"]) == theirs["answer"]
        assert list(ds["id"]) == theirs["id"]
        assert env.format_prompt("What is 6 x 7?", sp, fs) == theirs["format_prompt"]
        assert env.format_prompt("Q") == theirs["format_prompt_bare"]


def test_dataset_exceptions():
    env = vf.SingleTurnEnv(
        dataset={"question": ["2+2?"]}, system_prompt="Be brief.", message_type="completion"
    )
    assert env.dataset["prompt"] == ["Be brief.\n\n2+2?"]
    excepted("completion-env-system-prompt")


# -- env results processing -----------------------------------------------------------------------


def ours_process(case, tokenizer):
    env = vf.SingleTurnEnv(dataset={"question": ["q"]}, message_type=case["message_type"])
    return env.process_env_results_vllm(
        case["prompts"],
        case["completions"],
        copy.deepcopy(case["states"]),
        case["rewards"],
        tokenizer,
        max_seq_len=case["max_seq_len"],
        mask_env_responses=case["mask_env_responses"],
        mask_truncated_completions=case["mask_truncated_completions"],
        zero_truncated_completions=case["zero_truncated_completions"],
    )


def env_positions(case, i, tokenizer) -> list[bool]:
    """Per completion token of rollout ``i``: True where it is environment text (not sampled)."""
    from verifiers.tokenization.assembly import turns_from_responses

    turns = turns_from_responses(case["prompts"][i], case["completions"][i], case["states"][i], tokenizer)
    flags: list[bool] = [False] * len(turns[0].completion_ids)
    end = len(turns[0].prompt_ids) + len(turns[0].completion_ids)
    for turn in turns[1:]:
        flags += [True] * (len(turn.prompt_ids) - end) + [False] * len(turn.completion_ids)
        end = len(turn.prompt_ids) + len(turn.completion_ids)
    return flags


def test_process_env_results(results, smol_tokenizer):
    compared = 0
    for case, theirs in pairs(results, "process"):
        ours = ours_process(case, smol_tokenizer)
        if is_error(theirs):
            err = theirs["error"]
            if "Completion not fully consumed" in err:
                ends = [
                    s["responses_start_idx"][-1] + len(s["responses"][-1]["choices"][0]["text"])
                    for s in case["states"]
                ]
                assert any(end < len(c) for end, c in zip(ends, case["completions"], strict=True))
                excepted("trailing-env-text")
            else:
                assert "Prompt ids" in err, err
                assert any(
                    len(p) == case["max_seq_len"] and not c
                    for p, c in zip(ours.prompt_ids, ours.completion_ids, strict=True)
                )
                excepted("prompt-over-max-seq-len")
            continue
        compared += 1
        assert ours.prompt_ids == theirs["prompt_ids"]
        assert ours.completion_ids == theirs["completion_ids"]
        assert ours.completion_mask == theirs["completion_mask"]
        assert ours.rewards == theirs["rewards"]
        assert [len(m) for m in ours.prompt_mask] == [len(m) for m in theirs["prompt_mask"]]
        assert all(set(m) <= {1} for m in ours.prompt_mask) and all(
            set(m) <= {0} for m in theirs["prompt_mask"]
        )
        excepted("prompt-mask")
        for i, (lp_ours, lp_theirs, mask) in enumerate(
            zip(ours.completion_logprobs, theirs["completion_logprobs"], ours.completion_mask, strict=True)
        ):
            env = env_positions(case, i, smol_tokenizer)
            for a, b, m, is_env in zip(lp_ours, lp_theirs, mask, env, strict=False):
                if m == 0:
                    assert a == 0.0
                elif is_env:
                    assert math.isnan(a) and b == 0.0
                    excepted("env-token-logprob")
                else:
                    assert a == b
    assert compared >= 60


# -- EnvGroup -------------------------------------------------------------------------------------


def test_env_group(results):
    from datasets import Dataset

    for case, theirs in pairs(results, "group"):
        envs = []
        for m in case["members"]:
            kw = {"dataset": Dataset.from_dict({"question": m["questions"], "answer": m["answers"]})}
            if m.get("eval_questions"):
                kw["eval_dataset"] = Dataset.from_dict(
                    {"question": m["eval_questions"], "answer": m["eval_answers"]}
                )
            rubric = vf.Rubric(funcs=[rewards.LIBRARY[n] for n in m["funcs"]], weights=m["weights"])
            envs.append(vf.SingleTurnEnv(system_prompt=m.get("system_prompt"), rubric=rubric, **kw))
        group = vf.EnvGroup(envs=envs, env_names=case["env_names"])
        assert list(group.dataset["task"]) == theirs["tasks"]
        assert list(group.dataset["prompt"]) == theirs["prompts"]
        assert list(group.dataset["answer"]) == theirs["answers"]
        assert list(group.eval_dataset["task"]) == theirs["eval_tasks"]
        assert group.rubric.all_reward_names == theirs["all_reward_names"]
        assert group.rubric.get_reward_func_names() == theirs["names"]
        for r, their in zip(case["rollouts"], theirs["scores"], strict=True):
            ours = asyncio.run(
                group.rubric.score_rollout(
                    r["prompt"], r["completion"], r["answer"], copy.deepcopy(r["state"]), r["task"], r["info"]
                )
            )
            assert close(ours.reward, their["reward"]) and without_errors(ours.metrics) == their["metrics"]
        for task, index in theirs["route"].items():
            assert group.get_env_for_task(task) is envs[index]


def test_env_group_exceptions():
    env = vf.SingleTurnEnv(dataset={"question": ["q"]}, rubric=vf.Rubric(funcs=[rewards.boom]))
    group = vf.EnvGroup(envs=[env], env_names=["only"])
    with pytest.raises(ConfigError, match="only"):
        group.get_env_for_task("nobody")
    excepted("unknown-task-route")
    score = asyncio.run(group.rubric.score_rollout([], [], "", {}, task="only"))
    assert score.metrics == {"boom": 0.0, "boom_error": 1.0}
    excepted("group-error-metrics")


# -- the exceptions table -------------------------------------------------------------------------


def test_every_exception_is_met_and_documented():
    """Runs last in this module: each listed difference was met by a test above, and
    docs/migrating.md names it."""
    if seen_exceptions:  # the module ran as a whole (not a -k selection)
        missing = sorted(set(EXCEPTIONS) - set(seen_exceptions))
        assert not missing, f"listed differences no test met: {missing}"
    text = DOCS.read_text()
    undocumented = sorted(key for key in EXCEPTIONS if f"`{key}`" not in text)
    assert not undocumented, f"docs/migrating.md does not list: {undocumented}"
    print({k: seen_exceptions[k] for k in sorted(seen_exceptions)})
