"""Runs batches of cases through verifiers 0.1.4 (the oracle) and prints the results as JSON.

Executed by the oracle virtual environment's Python (``python -I``, so this folder
and the checkout are not on ``sys.path``): ``import verifiers`` is 0.1.4. Reads
``{"tokenizer_dir": ..., "groups": {op: [case, ...]}}`` on stdin and writes
``{op: [result, ...]}`` to stdout; a case that raises gives ``{"error": "Type: message"}``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import sys
from pathlib import Path

logging.disable(logging.CRITICAL)  # 0.1.4 logs reward errors and warnings; the results say enough

import verifiers as vf  # noqa: E402  (0.1.4)

if not vf.__version__.startswith("0.1.4"):
    raise SystemExit(f"oracle driver expects verifiers 0.1.4, got {vf.__version__} from {vf.__file__}")

_spec = importlib.util.spec_from_file_location(
    "parity_rewards", Path(__file__).parents[1] / "parity" / "rewards.py"
)
rewards = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rewards)

TOKENIZER = None


def tokenizer():
    global TOKENIZER
    if TOKENIZER is None:
        # The folder was written by transformers 5 (TokenizersBackend); 0.1.4's era loads the
        # same tokenizer.json and chat template through PreTrainedTokenizerFast.
        from transformers import PreTrainedTokenizerFast

        folder = Path(os.environ["PARITY_TOKENIZER_DIR"])
        config = json.loads((folder / "tokenizer_config.json").read_text())
        TOKENIZER = PreTrainedTokenizerFast(
            tokenizer_file=str(folder / "tokenizer.json"),
            **{k: config[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if config.get(k)},
        )
        TOKENIZER.chat_template = (folder / "chat_template.jinja").read_text()
    return TOKENIZER


def fields_of(spec):
    return [f if isinstance(f, str) else tuple(f) for f in spec]


def make_parser(spec):
    if spec is None:
        return vf.Parser()
    if spec["kind"] == "think":
        return vf.ThinkParser()
    if spec["kind"] == "think_boxed":
        return vf.ThinkParser(extract_fn=vf.extract_boxed_answer)
    return vf.XMLParser(fields_of(spec["fields"]), answer_field=spec.get("answer_field", "answer"))


def attempt(fn):
    try:
        return fn()
    except BaseException as e:  # noqa: BLE001 - any failure of 0.1.4 is a result here
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}


def run(coro):
    return asyncio.run(coro)


def with_timing(state):
    state = dict(state)
    state.setdefault("timing", {"generation_ms": 0.0, "scoring_ms": 0.0, "total_ms": 0.0})
    return state


# -- ops ------------------------------------------------------------------------------------


def op_xml(case):
    parser = vf.XMLParser(fields_of(case["fields"]), answer_field=case.get("answer_field", "answer"))
    text = case["text"]
    return {
        "parse": attempt(lambda: vars(parser.parse(text))),
        "parse_last": attempt(lambda: vars(parser.parse(text, last=True))),
        "parse_nostrip": attempt(lambda: vars(parser.parse(text, strip=False))),
        "answer_text": attempt(lambda: parser.parse_answer(text)),
        "answer": attempt(lambda: parser.parse_answer(case["completion"])),
        "format": attempt(lambda: parser.get_format_reward_func()(case["completion"])),
        "format_str": parser.get_format_str(),
    }


def op_think(case):
    parser = vf.ThinkParser()
    boxed = vf.ThinkParser(extract_fn=vf.extract_boxed_answer)
    return {
        "parse": attempt(lambda: parser.parse(case["text"])),
        "parse_boxed": attempt(lambda: boxed.parse(case["text"])),
        "answer": attempt(lambda: parser.parse_answer(case["completion"])),
        "format": attempt(lambda: parser.get_format_reward_func()(case["completion"])),
    }


def op_base(case):
    return {"answer": attempt(lambda: vf.Parser().parse_answer(case["completion"]))}


def op_extract(case):
    from verifiers.utils.data_utils import extract_boxed_answer, extract_hash_answer

    return {
        "boxed": attempt(lambda: extract_boxed_answer(case["text"])),
        "hash": attempt(lambda: extract_hash_answer(case["text"])),
    }


def make_rubric(spec):
    funcs = [rewards.LIBRARY[name] for name in spec["funcs"]]
    return vf.Rubric(
        funcs=funcs,
        weights=spec.get("weights"),
        parser=make_parser(spec.get("parser")),
        parallelize_scoring=spec.get("parallelize", True),
    )


def score_all(rubric, rollouts, kwargs):
    singles = []
    for r in rollouts:
        singles.append(
            attempt(
                lambda r=r: run(
                    rubric.score_rollout(
                        r["prompt"],
                        r["completion"],
                        r["answer"],
                        with_timing(r["state"]),
                        r["task"],
                        r["info"],
                        **kwargs,
                    )
                ).model_dump()
            )
        )
    batch = attempt(
        lambda: run(
            rubric.score_rollouts(
                [r["prompt"] for r in rollouts],
                [r["completion"] for r in rollouts],
                [r["answer"] for r in rollouts],
                [with_timing(r["state"]) for r in rollouts],
                [r["task"] for r in rollouts],
                [r["info"] for r in rollouts],
                **kwargs,
            )
        ).model_dump()
    )
    return singles, batch


def op_rubric(case):
    rubric = make_rubric(case["rubric"])
    kwargs = case.get("kwargs", {})
    singles, batch = score_all(rubric, case["rollouts"], kwargs)
    r = case["rollouts"][0]
    calls = {
        name: attempt(
            lambda name=name: run(
                rubric.call_reward_func(
                    rewards.LIBRARY[name],
                    r["prompt"],
                    r["completion"],
                    r["answer"],
                    with_timing(r["state"]),
                    r["task"],
                    r["info"],
                    **kwargs,
                )
            )
        )
        for name in case["rubric"]["funcs"]
    }
    return {"names": rubric.get_reward_func_names(), "single": singles, "batch": batch, "call": calls}


def op_rubric_group(case):
    members = [make_rubric(spec) for spec in case["rubrics"]]
    group = vf.RubricGroup(rubrics=members)
    for name in case.get("add", []):
        group.add_reward_func(rewards.LIBRARY[name])
    singles, batch = score_all(group, case["rollouts"], {})
    return {
        "names": group.get_reward_func_names(),
        "weights": group.get_reward_weights(),
        "single": singles,
        "batch": batch,
    }


def op_math(case):
    from verifiers.rubrics.math_rubric import MathRubric

    rubric = MathRubric()
    rollouts = case["rollouts"]
    return attempt(
        lambda: run(
            rubric.score_rollouts(
                [r["prompt"] for r in rollouts],
                [r["completion"] for r in rollouts],
                [r["answer"] for r in rollouts],
                [with_timing({}) for _ in rollouts],
                ["default"] * len(rollouts),
                [{} for _ in rollouts],
            )
        ).model_dump()
    )


def op_judge(case):
    client = rewards.RecordingJudge()
    rubric = vf.JudgeRubric(judge_client=client, judge_sampling_args=case.get("sampling_args"))
    rubric.add_reward_func(rewards.judged)
    defaults = {
        "parallelize_scoring": rubric.parallelize_scoring,
        "judge_model": rubric.judge_model,
        "parser": type(rubric.parser).__name__,
    }
    singles, batch = score_all(rubric, case["rollouts"], {})
    return {"defaults": defaults, "single": singles, "batch": batch, "calls": client.calls}


def op_tool(case):
    namespace: dict = {}
    exec(case["source"], namespace)  # noqa: S102 - generated test functions
    return attempt(lambda: json.dumps(_tool(namespace[case["name"]])))


def _tool(fn):
    from verifiers.utils.tool_utils import convert_func_to_oai_tool

    return convert_func_to_oai_tool(fn)


def _tiny():
    from datasets import Dataset

    return Dataset.from_dict({"question": ["q"], "answer": ["a"]})


def op_dataset(case):
    from datasets import Dataset

    def go():
        rows = Dataset.from_dict(case["rows"])
        sp, fs = case.get("system_prompt"), case.get("few_shot")
        if case.get("question_key", "question") != "question" or case.get("answer_key", "answer") != "answer":
            env = vf.SingleTurnEnv(dataset=_tiny())
            ds = env.format_dataset(
                rows, sp, fs, question_key=case["question_key"], answer_key=case["answer_key"]
            )
        else:
            env = vf.SingleTurnEnv(dataset=rows, system_prompt=sp, few_shot=fs)
            ds = env.dataset
        return {
            "prompt": list(ds["prompt"]),
            "answer": list(ds["answer"]) if "answer" in ds.column_names else None,
            "id": list(ds["id"]),
            "format_prompt": env.format_prompt("What is 6 x 7?", sp, fs),
            "format_prompt_bare": env.format_prompt("Q"),
        }

    return attempt(go)


def op_process(case):
    from openai.types.chat.chat_completion import ChatCompletion
    from openai.types.completion import Completion

    def go():
        message_type = case["message_type"]
        rows = {"prompt": ["p"]} if message_type == "completion" else {"question": ["q"]}
        from datasets import Dataset

        env = vf.SingleTurnEnv(dataset=Dataset.from_dict(rows), message_type=message_type)
        cls = ChatCompletion if message_type == "chat" else Completion
        states = []
        for s in case["states"]:
            s = dict(s)
            s["responses"] = [cls.model_validate(r) for r in s["responses"]]
            states.append(s)
        out = env.process_env_results_vllm(
            case["prompts"],
            case["completions"],
            states,
            case["rewards"],
            tokenizer(),
            max_seq_len=case["max_seq_len"],
            mask_env_responses=case["mask_env_responses"],
            mask_truncated_completions=case["mask_truncated_completions"],
            zero_truncated_completions=case["zero_truncated_completions"],
        )
        return out.model_dump()

    return attempt(go)


def op_group(case):
    from datasets import Dataset

    def go():
        envs = []
        for m in case["members"]:
            kw = {"dataset": Dataset.from_dict({"question": m["questions"], "answer": m["answers"]})}
            if m.get("eval_questions"):
                kw["eval_dataset"] = Dataset.from_dict(
                    {"question": m["eval_questions"], "answer": m["eval_answers"]}
                )
            rubric = vf.Rubric(funcs=[rewards.LIBRARY[n] for n in m["funcs"]], weights=m["weights"])
            envs.append(vf.SingleTurnEnv(system_prompt=m.get("system_prompt"), rubric=rubric, **kw))
        group = vf.EnvGroup(envs=envs, env_names=case.get("env_names"))
        scores = [
            attempt(
                lambda r=r: run(
                    group.rubric.score_rollout(
                        r["prompt"],
                        r["completion"],
                        r["answer"],
                        with_timing(r["state"]),
                        r["task"],
                        r["info"],
                    )
                ).model_dump()
            )
            for r in case["rollouts"]
        ]
        return {
            "tasks": list(group.dataset["task"]),
            "prompts": list(group.dataset["prompt"]),
            "answers": list(group.dataset["answer"]),
            "eval_tasks": list(group.eval_dataset["task"]) if group.eval_dataset is not None else None,
            "all_reward_names": group.rubric.all_reward_names,
            "names": group.rubric.get_reward_func_names(),
            "scores": scores,
            "route": {t: envs.index(group.get_env_for_task(t)) for t in case["route"]},
        }

    return attempt(go)


def op_encode(case):
    tok = tokenizer()
    return {
        "encode": tok.encode(case["text"]),
        "chat": tok.apply_chat_template(conversation=case["messages"], add_generation_prompt=True),
    }


OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}


def main() -> None:
    request = json.load(sys.stdin)
    if request.get("tokenizer_dir"):
        os.environ["PARITY_TOKENIZER_DIR"] = request["tokenizer_dir"]
    out = {
        op: [attempt(lambda c=c, op=op: OPS[op](c)) for c in cases] for op, cases in request["groups"].items()
    }
    json.dump(out, sys.stdout, default=repr)


if __name__ == "__main__":
    main()
