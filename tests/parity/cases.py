"""Seeded generators of the parity tier's cases (JSON-serialisable, the same for both sides).

``build_all(tokenizer)`` returns ``{op: [case, ...]}`` for ``oracle_driver.py``; the
test modules run the same cases through ours. Generated, not hand-picked: texts are
built from words, whitespace and the fields' tags (complete blocks, lone opening or
closing tags, repeats), so the parsers meet the messy output models write.
"""

from __future__ import annotations

import random
from typing import Any

SEED = 20260114
WORDS = [
    "the",
    "answer",
    "is",
    "42",
    "7",
    "so",
    "hmm",
    "x = 3",
    "ok.",
    "\\boxed{3}",
    "\\boxed{\\frac{1}{2}}",
    "####",
    "#### 12",
]
SPACES = ["", " ", "  ", "\n", "\n\n", "\t"]

XML_FIELD_SETS: list[tuple[list[Any], str]] = [
    (["think", "answer"], "answer"),
    (["answer"], "answer"),
    (["think", ["code", "answer"]], "answer"),
    (["think", ["code", "answer"]], "code"),
    (["reasoning", "answer", "note"], "answer"),
    ([["answer", "result"]], "result"),
    (["think", "answer"], "missing"),  # answer_field that is not a field
]


def _names(fields: list[Any]) -> list[str]:
    return [n for f in fields for n in ([f] if isinstance(f, str) else f)]


def rand_words(rng: random.Random, k: int | None = None) -> str:
    k = rng.randint(0, 4) if k is None else k
    return " ".join(rng.choice(WORDS) for _ in range(k))


def rand_tagged(rng: random.Random, names: list[str]) -> str:
    """Text made of words, whitespace and tags of ``names`` (blocks, lone tags, repeats)."""
    parts = []
    for _ in range(rng.randint(0, 5)):
        r = rng.random()
        name = rng.choice(names)
        if r < 0.5:
            parts.append(f"<{name}>{rng.choice(SPACES)}{rand_words(rng)}{rng.choice(SPACES)}</{name}>")
        elif r < 0.6:
            parts.append(f"<{name}>")
        elif r < 0.7:
            parts.append(f"</{name}>")
        else:
            parts.append(rand_words(rng))
    return rng.choice(SPACES) + rng.choice(SPACES).join(parts) + rng.choice(SPACES)


def rand_think(rng: random.Random) -> str:
    r = rng.random()
    body = rand_words(rng)
    after = rng.choice(SPACES) + rand_words(rng)
    if r < 0.4:
        return f"{rng.choice(SPACES)}<think>{body}</think>{after}"
    if r < 0.5:
        return f"<think>{body}</think>{after}</think>{rand_words(rng)}"
    if r < 0.6:
        return f"<think>{body}</think><think>{body}</think>{after}"
    if r < 0.7:
        return f"{body}</think>{after}"  # template-opened think block
    if r < 0.8:
        return f"<think>{body}"  # cut off while thinking
    if r < 0.85:
        return f"<think>{body}</think>"
    return after


def chat(
    rng: random.Random, make_text, end_with_assistant: bool = True, none_content: bool = False
) -> list[dict]:
    """1-4 messages, mostly assistant; tool-call-only assistant turns when ``none_content``."""
    messages = []
    for _ in range(rng.randint(1, 4)):
        role = rng.choice(["assistant", "assistant", "assistant", "user", "tool"])
        if role == "assistant" and none_content and rng.random() < 0.2:
            messages.append(
                {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function"}]}
            )
        else:
            messages.append({"role": role, "content": make_text(rng)})
    if end_with_assistant and messages[-1]["role"] != "assistant":
        messages.append({"role": "assistant", "content": make_text(rng)})
    return messages


# -- parsers ----------------------------------------------------------------------------------


def xml_cases(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        fields, answer_field = XML_FIELD_SETS[i % len(XML_FIELD_SETS)]
        names = _names(fields) + ["think"]

        def make(r, names=names):
            return rand_tagged(r, names)

        out.append(
            {
                "fields": fields,
                "answer_field": answer_field,
                "text": make(rng),
                "completion": chat(rng, make, end_with_assistant=rng.random() < 0.8, none_content=True),
            }
        )
    return out


def think_cases(rng: random.Random, n: int) -> list[dict]:
    return [
        {"text": rand_think(rng), "completion": chat(rng, rand_think, end_with_assistant=rng.random() < 0.85)}
        for _ in range(n)
    ]


def base_cases(rng: random.Random, n: int) -> list[dict]:
    return [
        {"completion": chat(rng, rand_words, end_with_assistant=rng.random() < 0.8, none_content=True)}
        for _ in range(n)
    ]


def extract_cases(rng: random.Random, n: int) -> list[dict]:
    pieces = ["\\boxed{", "}", "{", "3", "\\frac{1}{2}", " ", "####", " 12", "x", "\\boxed{4}"]
    return [{"text": "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))} for _ in range(n)]


# -- rubrics ----------------------------------------------------------------------------------

REWARD_NAMES = [
    "exact",
    "length_score",
    "async_contains",
    "uses_state",
    "boom",
    "returns_none",
    "numeric_string",
    "takes_extra",
    "takes_all",
]
PARSERS = [None, {"kind": "xml", "fields": ["think", "answer"]}, {"kind": "think"}]


def rollout(rng: random.Random) -> dict:
    answer = rng.choice(["42", "7", "x = 3"])
    said = rng.choice(["42", "7", "x = 3", "no idea"])
    completion = [
        {"role": "assistant", "content": f"<think>{rand_words(rng)}</think>\n<answer>{said}</answer>"}
    ]
    if rng.random() < 0.3:
        completion = (
            [{"role": "assistant", "content": rand_words(rng)}]
            + [{"role": "user", "content": "more"}]
            + completion
        )
    return {
        "prompt": [{"role": "user", "content": f"question {rng.randint(0, 99)}"}],
        "completion": completion,
        "answer": answer,
        "state": {"marks": [1] * rng.randint(0, 2)},
        "task": rng.choice(["t0", "t1"]),
        "info": {"bonus": rng.choice([0.0, 0.5])},
    }


def rubric_spec(rng: random.Random) -> dict:
    funcs = rng.sample(REWARD_NAMES, rng.randint(1, 4))
    weights = None if rng.random() < 0.3 else [rng.choice([0.0, 0.2, 0.5, 1.0, -1.0, 2.0]) for _ in funcs]
    return {
        "funcs": funcs,
        "weights": weights,
        "parser": rng.choice(PARSERS),
        "parallelize": rng.random() < 0.5,
    }


def rubric_cases(rng: random.Random, n: int) -> list[dict]:
    return [
        {
            "rubric": rubric_spec(rng),
            "rollouts": [rollout(rng) for _ in range(rng.randint(1, 4))],
            "kwargs": {"extra_bonus": 0.3} if rng.random() < 0.3 else {},
        }
        for _ in range(n)
    ]


def rubric_group_cases(rng: random.Random, n: int) -> list[dict]:
    out = []
    for _ in range(n):
        rubrics = []
        for _ in range(rng.randint(1, 3)):
            spec = rubric_spec(rng)
            spec["funcs"] = [f for f in spec["funcs"] if f not in ("takes_extra",)] or ["length_score"]
            spec["weights"] = None if spec["weights"] is None else [1.0] * len(spec["funcs"])
            rubrics.append(spec)
        taken = set(rubrics[0]["funcs"])
        add = [
            name for name in ["numeric_string", "async_contains"] if name not in taken and rng.random() < 0.3
        ]
        out.append(
            {"rubrics": rubrics, "add": add, "rollouts": [rollout(rng) for _ in range(rng.randint(1, 3))]}
        )
    return out


MATH_ANSWERS = ["3", "1/2", "0.5", "\\frac{1}{2}", "2\\sqrt{2}", "\\sqrt{8}", "x^2", "10", "-4", "\\pi"]


def math_cases(rng: random.Random, n: int) -> list[dict]:
    rollouts = []
    for _ in range(n):
        answer = rng.choice(MATH_ANSWERS)
        said = rng.choice(MATH_ANSWERS)
        style = rng.random()
        if style < 0.5:
            text = f"<think>{rand_words(rng)}</think> The answer is \\boxed{{{said}}}."
        elif style < 0.65:
            text = f"\\boxed{{{said}}}"  # 0.1.4's default parser needs </think>: 0.0
        elif style < 0.8:
            text = f"<think>\\boxed{{{said}}}"
        else:
            text = f"<think>r</think> {said}"
        rollouts.append(
            {
                "prompt": [{"role": "user", "content": "q"}],
                "completion": [{"role": "assistant", "content": text}],
                "answer": answer,
            }
        )
    return [{"rollouts": rollouts}]


def judge_cases(rng: random.Random, n: int) -> list[dict]:
    out = []
    for _ in range(n):
        rollouts = []
        for _ in range(rng.randint(1, 3)):
            r = rollout(rng)
            if rng.random() < 0.3:
                r["prompt"] = [{"role": "system", "content": "sys"}] + r["prompt"]
            rollouts.append(r)
        args = rng.choice(
            [
                None,
                {"max_tokens": 16, "temperature": 0.0},
                {"max_tokens": None, "top_p": None},
                {"temperature": 0.5},
            ]
        )
        out.append({"rollouts": rollouts, "sampling_args": args})
    return out


# -- tools ------------------------------------------------------------------------------------

ANNOTATIONS = [
    "str",
    "int",
    "float",
    "bool",
    "list[str]",
    "list[int]",
    "str | None",
    "Optional[int]",
    "Literal['a', 'b']",
    None,
]
DEFAULTS = {
    "str": ['"x"', '""'],
    "int": ["0", "5"],
    "float": ["0.5"],
    "bool": ["True", "False"],
    "list[str]": [],
    "list[int]": [],
    "str | None": ["None"],
    "Optional[int]": ["None", "3"],
    "Literal['a', 'b']": ["'a'"],
    None: ["None", "1"],
}


def tool_cases(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        name = f"tool_{i}"
        params, docs, seen_default = [], [], False
        for j in range(rng.randint(0, 4)):
            ann = rng.choice(ANNOTATIONS)
            p = f"p{j}" + (f": {ann}" if ann else "")
            if (seen_default or rng.random() < 0.4) and DEFAULTS[ann]:
                p += f" = {rng.choice(DEFAULTS[ann])}"
                seen_default = True
            elif seen_default:
                continue  # a parameter without a default cannot follow one with
            params.append(p)
            if rng.random() < 0.7:
                more = "\n            more words" if rng.random() < 0.2 else ""
                docs.append(f"        p{j}: what p{j} is{more}")
        summary = rng.choice(["Do a thing.", "Do a thing.\n\n    Second paragraph.", ""])
        if docs and not summary:
            summary = "Summary."  # a docstring that opens with "Args:" is read differently (not compared)
        doc = summary
        if docs:
            doc += ("\n\n" if summary else "\n") + "    Args:\n" + "\n".join(docs)
        if rng.random() < 0.3:
            doc += "\n\n    Returns:\n        the result"
        body = f'    """{doc}\n    """\n' if doc else ""
        source = (
            f"from typing import Literal, Optional\ndef {name}({', '.join(params)}):\n{body}    return None\n"
        )
        out.append({"name": name, "source": source})
    return out


# -- datasets -----------------------------------------------------------------------------------


def dataset_cases(rng: random.Random, n: int) -> list[dict]:
    out = []
    for i in range(n):
        k = rng.randint(1, 5)
        few_shot = None
        if rng.random() < 0.5:
            few_shot = []
            for _ in range(rng.randint(1, 2)):
                few_shot += [
                    {"role": "user", "content": rand_words(rng, 3)},
                    {"role": "assistant", "content": rand_words(rng, 2)},
                ]
        case = {
            "rows": {
                "question": [rand_words(rng, 3) for _ in range(k)],
                "answer": [str(rng.randint(0, 9)) for _ in range(k)],
            },
            "system_prompt": rng.choice([None, "", "You are terse.", "Think step by step."]),
            "few_shot": few_shot,
        }
        if i % 4 == 3:  # 0.1.4's question_key / answer_key
            case["rows"] = {"q": case["rows"]["question"], "a": case["rows"]["answer"]}
            case["question_key"], case["answer_key"] = "q", "a"
        out.append(case)
    return out


# -- env results --------------------------------------------------------------------------------


def _chat_response(ids: list[int], content: str, logprobs: list[float]) -> dict:
    return {
        "id": "r",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": content},
                "logprobs": {
                    "content": [
                        {"token": f"token_id:{t}", "logprob": lp, "bytes": None, "top_logprobs": []}
                        for t, lp in zip(ids, logprobs, strict=False)
                    ]
                },
            }
        ],
    }


def _text_response(ids: list[int], text: str, logprobs: list[float]) -> dict:
    return {
        "id": "r",
        "object": "text_completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "text": text,
                "logprobs": {
                    "tokens": [f"token_id:{t}" for t in ids],
                    "token_logprobs": logprobs,
                    "text_offset": [0] * len(ids),
                    "top_logprobs": None,
                },
            }
        ],
    }


def process_cases(rng: random.Random, tokenizer: Any, n_chat: int, n_text: int) -> list[dict]:
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    out = []
    for i in range(n_chat + n_text):
        is_chat = i < n_chat
        prompts, completions, states, rewards = [], [], [], []
        for _ in range(rng.randint(1, 3)):
            turns = rng.randint(1, 3)
            responses = []
            if is_chat:
                prompt = ([{"role": "system", "content": "Be brief."}] if rng.random() < 0.5 else []) + [
                    {"role": "user", "content": f"Say {rand_words(rng, 2)}"}
                ]
                completion = []
                for t in range(turns):
                    content = rand_words(rng, rng.randint(1, 6))
                    ids = tokenizer.encode(content, add_special_tokens=False) + [eos]
                    lps = [round(-rng.random(), 4) for _ in ids]
                    responses.append(_chat_response(ids, content, lps))
                    completion.append({"role": "assistant", "content": content})
                    if t < turns - 1 or rng.random() < 0.2:
                        for _ in range(rng.randint(1, 2)):
                            completion.append({"role": "user", "content": f"feedback {rand_words(rng, 2)}"})
                state = {"responses": responses}
            else:
                prompt = f"Question: {rand_words(rng, 3)}\nAnswer:"
                completion, starts = "", []
                for t in range(turns):
                    if t > 0 or rng.random() < 0.2:
                        completion += f"\nObservation: {rand_words(rng, 2)}\n"
                    text = " " + rand_words(rng, rng.randint(1, 5))
                    ids = tokenizer.encode(text, add_special_tokens=False)
                    lps = [round(-rng.random(), 4) for _ in ids]
                    starts.append(len(completion))
                    responses.append(_text_response(ids, text, lps))
                    completion += text
                if rng.random() < 0.2:
                    completion += "\nObservation: done\n"
                state = {"responses": responses, "responses_start_idx": starts}
            prompts.append(prompt)
            completions.append(completion)
            states.append(state)
            rewards.append(round(rng.random(), 3))
        out.append(
            {
                "message_type": "chat" if is_chat else "completion",
                "prompts": prompts,
                "completions": completions,
                "states": states,
                "rewards": rewards,
                "max_seq_len": rng.choice([-1, -1, 12, 25, 40, 60, 90, 400]),
                "mask_env_responses": rng.random() < 0.5,
                "mask_truncated_completions": rng.random() < 0.5,
                "zero_truncated_completions": rng.random() < 0.5,
            }
        )
    return out


# -- EnvGroup ---------------------------------------------------------------------------------


def group_cases(rng: random.Random, n: int) -> list[dict]:
    out = []
    for _ in range(n):
        members = []
        for m in range(rng.randint(1, 3)):
            k = rng.randint(1, 3)
            member = {
                "questions": [f"m{m} {rand_words(rng, 2)}" for _ in range(k)],
                "answers": ["42"] * k,
                "funcs": rng.sample(
                    ["exact", "length_score", "numeric_string", "uses_state"], rng.randint(1, 2)
                ),
                "system_prompt": rng.choice([None, f"member {m}"]),
            }
            member["weights"] = [1.0] * len(member["funcs"])
            if rng.random() < 0.5:
                member["eval_questions"] = [f"e{m}"]
                member["eval_answers"] = ["7"]
            members.append(member)
        names = [f"task{m}" for m in range(len(members))] if rng.random() < 0.5 else None
        known = names or [f"env_{m}" for m in range(len(members))]
        rollouts = []
        for _ in range(3):
            r = rollout(rng)
            r["task"] = rng.choice(known + ["nobody"])
            rollouts.append(r)
        out.append({"members": members, "env_names": names, "rollouts": rollouts, "route": known})
    return out


def build_all(tokenizer: Any) -> dict[str, list[dict]]:
    """Every case of the tier, keyed by the oracle driver's op names."""
    rng = random.Random(SEED)
    return {
        "xml": xml_cases(rng, 420),
        "think": think_cases(rng, 250),
        "base": base_cases(rng, 120),
        "extract": extract_cases(rng, 250),
        "rubric": rubric_cases(rng, 120),
        "rubric_group": rubric_group_cases(rng, 40),
        "math": math_cases(rng, 80),
        "judge": judge_cases(rng, 30),
        "tool": tool_cases(rng, 80),
        "dataset": dataset_cases(rng, 40),
        "process": process_cases(rng, tokenizer, 90, 40),
        "group": group_cases(rng, 20),
        "encode": [
            {"text": "Hello <|im_end|> world\n\tok", "messages": [{"role": "user", "content": "hi"}]},
            {
                "text": "x = 3 \\boxed{4}",
                "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
            },
        ],
    }
