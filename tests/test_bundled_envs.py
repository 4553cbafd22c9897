"""The bundled environments under environments/: each loads by id and evaluates offline.

Each one runs against ``tests/doubles/openai_server.py`` with a scripted model: the right
answer in the right format scores high, a wrong one low, and the
environment-specific machinery (multi-turn feedback, tool calls through the
sandbox, search) does what its README says. The packages must be installed
(``pip install --no-deps -e environments/<name>``, as ``scripts/install.sh`` does).
"""

from __future__ import annotations

import json
import re

import pytest

import verifiers as vf
from tests.doubles.openai_server import fake_server
from verifiers.envs.model_client import forget_token_support
from verifiers.errors import ConfigError
from verifiers.utils.logging import reset_warn_once

ENV_IDS = [
    "arithmetic",
    "alphabet-sort",
    "calculator",
    "gsm8k",
    "math-python",
    "number-guess",
    "wordle",
    "wiki-search",
    "tool-test",
]
TOOL_ENV_IDS = ["calculator", "math-python", "wiki-search", "tool-test"]


@pytest.fixture(autouse=True)
def _fresh_process_state(monkeypatch):
    reset_warn_once()
    forget_token_support()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never reach for the hub


def _question_at(request: dict, env=None) -> int:
    """Where the rollout's own question is: after the system prompt and ``env.few_shot``."""
    messages = request["messages"]
    return (1 if messages and messages[0]["role"] == "system" else 0) + len(getattr(env, "few_shot", []))


def turn(request: dict, env=None) -> int:
    """How many assistant turns the rollout already has (0 for the first call; worked examples don't count)."""
    return sum(1 for m in request["messages"][_question_at(request, env) :] if m["role"] == "assistant")


def first_user(request: dict, env=None) -> str:
    """The rollout's question (the user message after the system prompt and any worked examples)."""
    message = request["messages"][_question_at(request, env)]
    assert message["role"] == "user", message
    return message["content"]


def call(name: str, arguments: dict, id_: str = "call_0") -> dict:
    return {"name": name, "arguments": arguments, "id": id_}


async def evaluate(env, reply, n: int = 2, **kw):
    with fake_server(reply) as server:
        return await env.a_evaluate(server.client(), "fake-model", num_examples=n, **kw)


def by_question(env) -> dict[str, dict]:
    """Eval rows keyed by the question text the model sees."""
    return {row["prompt"][-1]["content"]: row for row in env.eval_dataset}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_loads_by_id(env_id):
    env = vf.load_environment(env_id)
    assert isinstance(env, vf.Environment)
    assert len(env.dataset) > 0 and len(env.eval_dataset) > 0
    prompt = env.eval_dataset[0]["prompt"]
    assert prompt[0]["role"] == "system" and prompt[-1]["role"] == "user"
    assert env.rubric.get_reward_func_names()


# -- arithmetic ------------------------------------------------------------------

QUESTION = re.compile(r"What is (\d+) ([-+*]) (\d+)\?")


def test_arithmetic_rows_are_seeded_and_their_answers_right():
    import arithmetic

    rows = arithmetic.make_rows(300, 0, 2, 12, "+-*")
    assert rows == arithmetic.make_rows(300, 0, 2, 12, "+-*")
    assert rows != arithmetic.make_rows(300, 1, 2, 12, "+-*")
    seen = set()
    for row in rows:
        a, op, b = QUESTION.fullmatch(row["question"]).groups()
        a, b = int(a), int(b)
        assert 2 <= a <= 12 and 2 <= b <= 12
        assert int(row["answer"]) == {"+": a + b, "-": a - b, "*": a * b}[op]
        assert int(row["answer"]) >= 0  # differences are written larger-first
        seen.add(op)
    assert seen == {"+", "-", "*"}
    only_minus = arithmetic.make_rows(50, 0, 1, 9, "-")
    assert {QUESTION.fullmatch(r["question"]).group(2) for r in only_minus} == {"-"}


def test_arithmetic_datasets_follow_the_seed():
    env = vf.load_environment("arithmetic", num_train_examples=20, num_eval_examples=10, seed=3)
    again = vf.load_environment("arithmetic", num_train_examples=20, num_eval_examples=10, seed=3)
    other = vf.load_environment("arithmetic", num_train_examples=20, num_eval_examples=10, seed=4)
    train, test = list(env.dataset["question"]), list(env.eval_dataset["question"])
    assert (len(train), len(test)) == (20, 10)
    assert train == list(again.dataset["question"]) and test == list(again.eval_dataset["question"])
    assert train != list(other.dataset["question"]) and train[:10] != test  # eval: its own stream
    system = env.eval_dataset[0]["prompt"][0]
    assert system == {"role": "system", "content": "Answer with just the final number."}


@pytest.mark.parametrize(
    "text, value",
    [
        ("2 + 3 = 5.", 5),
        ("1,234", 1234),
        ("-3", -3),
        ("The answer is 15, not 14", 14),
        ("no number here", None),
        ("", None),
        (None, None),
    ],
)
def test_arithmetic_last_integer(text, value):
    import arithmetic

    assert arithmetic.last_integer(text) == value


@pytest.mark.parametrize(
    "reply, reward",
    [
        ("15", 1.0),
        ("8 + 7 = 15.", 1.0),
        ("To add 8 and 7, we count on from 8: 9, 10, 11, 12, 13, 14, 15", 1.0),
        ("16", 0.0),
        ("15 is close, but the answer is 16", 0.0),  # the last number counts
        ("To add 8 and 7, we need to find", 0.0),  # cut off before the number
        ("fifteen", 0.0),
    ],
)
async def test_arithmetic_rubric_scores_the_last_number(reply, reward):
    env = vf.load_environment("arithmetic", num_eval_examples=1)
    prompt = [{"role": "user", "content": "What is 8 + 7?"}]
    score = await env.rubric.score_rollout(prompt, [{"role": "assistant", "content": reply}], "15", {})
    assert score.reward == reward and score.metrics == {"correct_answer": reward}


async def test_arithmetic_evaluates_against_a_scripted_model():
    env = vf.load_environment("arithmetic", num_eval_examples=4)
    rows = by_question(env)
    right = await evaluate(env, lambda r: f"That is {rows[first_user(r)]['answer']}.", n=4)
    assert right.reward == [1.0] * 4
    wrong = await evaluate(env, lambda r: str(int(rows[first_user(r)]["answer"]) + 1), n=4)
    assert wrong.reward == [0.0] * 4


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"min_value": -1}, "need 0 <= min_value <= max_value, got -1 and 9"),
        ({"min_value": 5, "max_value": 3}, "got 5 and 3"),
        ({"operations": ""}, "operations must be a non-empty string"),
        ({"operations": "+/"}, "got '\\+/'"),
    ],
)
def test_arithmetic_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        vf.load_environment("arithmetic", **kwargs)


# -- LCS rewards (reverse-text, alphabet-sort) -------------------------------------


def test_lcs_rewards_use_the_true_longest_common_subsequence():
    import alphabet_sort
    import reverse_text

    # "aaaa" vs "abaa": the LCS is "aaa" (3), so 2 * 3 / (4 + 4) = 0.75
    # (difflib.SequenceMatcher's greedy blocks gave 0.5).
    assert reverse_text.lcs_ratio("aaaa", "abaa") == pytest.approx(0.75)
    assert reverse_text.lcs_ratio("abc", "abc") == 1.0 and reverse_text.lcs_ratio("abc", "") == 0.0
    # Over names: [C, A, B] vs [A, B, C] share [A, B]: 2 * 2 / 6 = 2/3.
    assert alphabet_sort.list_similarity(["C", "A", "B"], ["A", "B", "C"]) == pytest.approx(2 / 3)
    assert alphabet_sort.list_similarity([], []) == 1.0


# -- alphabet-sort ---------------------------------------------------------------


def names_so_far(request: dict) -> list[str]:
    names = []
    for m in request["messages"]:
        if m["role"] == "user":
            for line in m["content"].splitlines():
                if line.startswith("Names: "):
                    names += line[len("Names: ") :].split(", ")
    return names


def sorted_reply(request: dict) -> str:
    return "<alphabetical_sorted>\n" + "\n".join(sorted(names_so_far(request))) + "\n</alphabetical_sorted>"


async def test_alphabet_sort_scores_the_sorted_list():
    env = vf.load_environment("alphabet-sort", num_eval_examples=3)
    right = await evaluate(env, sorted_reply, n=3)
    assert right.reward == pytest.approx([1.2] * 3)
    backwards = "<alphabetical_sorted>\n{}\n</alphabetical_sorted>"
    wrong = await evaluate(
        env, lambda r: backwards.format("\n".join(sorted(names_so_far(r), reverse=True))), n=3
    )
    untagged = await evaluate(env, lambda r: ", ".join(sorted(names_so_far(r))), n=3)
    # Untagged: no answer, and 0.1.4's format reward gives any message 0.2 (x weight 0.2).
    assert all(w < 1.0 for w in wrong.reward) and untagged.reward == pytest.approx([0.04] * 3)


async def test_alphabet_sort_multi_turn_adds_names():
    env = vf.load_environment("alphabet-sort", num_turns=3, num_eval_examples=2)
    result = await evaluate(env, sorted_reply)
    completion = result.completion[0]
    assert [m["role"] for m in completion] == ["assistant", "user", "assistant", "user", "assistant"]
    assert completion[1]["content"].startswith("Now add these names")
    assert result.reward == pytest.approx([1.2, 1.2])
    # Sorting only the newest names loses credit on the later turns.
    partial = await evaluate(
        env,
        lambda r: (
            "<alphabetical_sorted>\n"
            + "\n".join(sorted(r["messages"][-1]["content"].split(": ")[-1].split(", ")))
            + "\n</alphabetical_sorted>"
        ),
    )
    assert all(0.3 < reward < 1.1 for reward in partial.reward)


# -- gsm8k -----------------------------------------------------------------------


async def test_gsm8k_local_sample_rewards_the_boxed_answer():
    env = vf.load_environment("gsm8k", use_local_sample=True, num_eval_examples=-1)
    assert len(env.dataset) == 40 and len(env.eval_dataset) == 20
    rows = by_question(env)
    right = await evaluate(env, lambda r: f"Working... so \\boxed{{{rows[first_user(r)]['answer']}}}", n=5)
    assert right.reward == pytest.approx([1.2] * 5)
    wrong = await evaluate(env, lambda r: "\\boxed{-1}", n=5)
    assert wrong.reward == pytest.approx([0.2] * 5)


def test_gsm8k_picks_the_local_sample_offline_and_explains_a_hub_failure(monkeypatch):
    assert len(vf.load_environment("gsm8k").dataset) == 40  # HF_HUB_OFFLINE=1: the local sample
    with pytest.raises(ConfigError, match="use_local_sample=True"):
        vf.load_environment("gsm8k", use_local_sample=False)


# -- math-python -------------------------------------------------------------------


async def test_math_python_runs_tool_calls_in_the_sandbox():
    env = vf.load_environment("math-python", num_eval_examples=2)
    rows = by_question(env)

    def reply(request):
        if turn(request, env) == 0:
            return {"tool_calls": [call("python", {"code": "print(2 ** 10)"})]}
        if turn(request, env) == 1:  # an escape attempt: it must come back as a tool error
            return {"tool_calls": [call("python", {"code": "import socket\nsocket.socket()"}, "call_1")]}
        return f"The answer is \\boxed{{{rows[first_user(request, env)]['answer']}}}."

    result = await evaluate(env, reply)
    completion = result.completion[0]
    assert [m["role"] for m in completion] == ["assistant", "tool", "assistant", "tool", "assistant"]
    assert completion[1]["content"] == "1024"
    assert "Error: blocked by the sandbox: network access is blocked" in completion[3]["content"]
    assert result.state[0]["error"] is None
    assert result.reward == pytest.approx([1.0, 1.0])
    assert result.metrics["python_calls"] == [2.0, 2.0]


async def test_math_python_tool_reports_escape_attempts_as_errors(tmp_path):
    tool = vf.load_environment("math-python", num_eval_examples=1, timeout_s=2.0).tool_map["python"]
    target = tmp_path / "escape.txt"
    attempts = {
        "import os\nos.fork()": "process creation is blocked",
        f"open({str(target)!r}, 'w')": "outside the sandbox directory",
        "import os\nos.kill(os.getppid(), 0)": "signals to other processes are blocked",  # 0: a harmless probe
        "import urllib.request\nurllib.request.urlopen('http://1.1.1.1/')": "network access is blocked",
        "while True:\n    pass": "timed out",
    }
    for code, expected in attempts.items():
        text = await tool(code=code)
        assert "Error: " in text and expected in text, (code, text)
    assert not target.exists()
    assert await tool(code="print(sum(range(5)))") == "10"


# -- wordle ----------------------------------------------------------------------


def test_wordle_feedback_counts_repeated_letters():
    import wordle

    assert wordle.feedback("crane", "crane") == "GGGGG"
    assert wordle.feedback("abbey", "babes") == "YYGGX"
    assert wordle.feedback("apple", "lolly") == "XXXGX"
    assert wordle.feedback("robot", "otter") == "YYXXY"
    assert wordle.letter_score("GGYXX") == pytest.approx(0.5)


async def test_wordle_game_gives_feedback_and_partial_credit():
    import wordle

    env = vf.load_environment("wordle", num_eval_examples=1)
    secret = env.eval_dataset[0]["answer"]
    opener = "crane" if secret != "crane" else "toast"
    won = await evaluate(env, lambda r: f"<guess>{opener if turn(r) == 0 else secret}</guess>", n=1)
    completion = won.completion[0]
    marks = " ".join(wordle.feedback(secret, opener))
    assert completion[1] == {"role": "user", "content": f"{opener.upper()}\n{marks}\nGuesses left: 5."}
    assert len(completion) == 3 and won.state[0]["solved"]
    assert won.reward[0] == pytest.approx(1.0 + 0.5 * 5 / 6 + 0.2 + 0.2)

    lost = await evaluate(env, lambda r: f"<guess>{opener}</guess>", n=1)
    assert lost.state[0]["turn"] == 6 and not lost.state[0]["solved"]
    assert lost.metrics["correct_answer"] == [0.0]
    assert lost.metrics["letter_feedback"] == [
        pytest.approx(wordle.letter_score(wordle.feedback(secret, opener)))
    ]

    invalid = await evaluate(env, lambda r: "Maybe a fruit?", n=1)
    assert "not a valid guess" in invalid.completion[0][1]["content"]
    assert invalid.reward == pytest.approx([0.04])  # 0.1.4's format reward: 0.2 for any message, x 0.2


# -- wiki-search -----------------------------------------------------------------


def test_wiki_search_finds_the_right_page():
    env = vf.load_environment("wiki-search")
    index = env.wiki_index
    assert index.search_pages("Cape Lumen lighthouse")[0]["page_id"] == "cape_lumen_lighthouse"
    assert index.search_pages("who invented the steam powered loom")[0]["page_id"] in (
        "venn_loom",
        "tobiah_venn",
    )
    assert "no page matches" in index.search_pages("xyzzy")[0]["note"]
    assert index.view_sections("mount_orvane")[2] == {
        "section_id": "mount_orvane:climbing",
        "name": "Climbing",
    }
    assert "Rook Meridan" in index.read_section("mount_orvane:climbing")
    import wiki_search

    assert wiki_search.normalize_answer("About 2,318 metres.") == "2318"
    assert wiki_search.normalize_answer("The Grey Elder") == "grey elder"


def wiki_reply(env, rows: dict, answer_of=lambda row: row["answer"]):
    def reply(request):
        row = rows[first_user(request, env)]
        page = row["info"]["page_id"]
        step = turn(request, env)
        if step == 0:
            return {"tool_calls": [call("search_pages", {"query": row["question"]})]}
        if step == 1:
            return {"tool_calls": [call("view_sections", {"page_id": page}, "call_1")]}
        if step == 2:
            sections = json.loads(request["messages"][-1]["content"])
            calls = [
                call("read_section", {"section_id": s["section_id"]}, f"call_2_{i}")
                for i, s in enumerate(sections)
            ]
            return {"tool_calls": calls}
        return f"<answer>{answer_of(row)}</answer>"

    return reply


async def test_wiki_search_episode_with_tools():
    env = vf.load_environment("wiki-search", num_eval_examples=4)
    rows = by_question(env)
    result = await evaluate(env, wiki_reply(env, rows), n=4)
    for completion, info in zip(result.completion, result.info, strict=True):
        hits = json.loads(completion[1]["content"])
        assert info["page_id"] in [h["page_id"] for h in hits]
    # 0.1.4's format reward is the mean over assistant messages: three tool-call turns
    # (0.2 each) and the tagged answer (1.0) give 0.4, weighted 0.2.
    assert result.reward == pytest.approx([1.08] * 4)
    assert result.metrics["search_pages_calls"] == [1.0] * 4
    wrong = await evaluate(env, wiki_reply(env, rows, lambda row: "Atlantis"), n=4)
    assert wrong.reward == pytest.approx([0.08] * 4)


async def test_wiki_search_optional_judge(monkeypatch):
    monkeypatch.setenv("VF_TEST_JUDGE_KEY", "test-key")
    with fake_server(lambda r: "yes") as judge:
        env = vf.load_environment(
            "wiki-search",
            num_eval_examples=2,
            use_judge=True,
            judge_base_url=judge.url,
            judge_api_key_var="VF_TEST_JUDGE_KEY",
        )
        result = await evaluate(env, wiki_reply(env, by_question(env), lambda row: "something else"))
        assert judge.requests and "something else" in judge.requests[0][1]["messages"][0]["content"]
    assert result.metrics["judge_correct"] == [1.0, 1.0] and result.metrics["exact_match"] == [0.0, 0.0]
    assert result.reward == pytest.approx([1.08, 1.08])  # format 0.4 x 0.2, as above


# -- tool-test -------------------------------------------------------------------

ARGS = {
    "add": {"a": 2, "b": 3},
    "multiply": {"a": 2, "b": 4},
    "reverse_text": {"text": "abc"},
    "to_uppercase": {"text": "abc"},
    "word_count": {"text": "a b c"},
    "get_weather": {"city": "Oslo"},
    "lookup_capital": {"country": "Peru"},
    "current_time": {"timezone": "UTC"},
}


def tool_reply(env, pick=lambda names: names):
    def reply(request):
        if turn(request, env) > 0:
            return "DONE"
        names = pick(re.findall(r"call `(\w+)`", first_user(request, env)))
        return {"tool_calls": [call(name, ARGS[name], f"call_{i}") for i, name in enumerate(names)]}

    return reply


async def test_tool_test_rewards_exactly_the_named_tools():
    env = vf.load_environment("tool-test", num_eval_examples=6, min_tools=2, max_tools=3)
    right = await evaluate(env, tool_reply(env), n=6)
    assert right.reward == [1.0] * 6
    completion = right.completion[0]
    assert completion[1]["role"] == "tool" and not completion[1]["content"].startswith("Error")
    assert right.metrics["total_tool_calls"] == [float(len(i["tools"])) for i in right.info]
    missing = await evaluate(env, tool_reply(env, lambda names: names[:-1]), n=6)
    extra = await evaluate(
        env, tool_reply(env, lambda names: names + [n for n in ARGS if n not in names][:1]), n=6
    )
    assert missing.reward == [0.0] * 6 and extra.reward == [0.0] * 6
    assert all(0 < overlap < 1 for overlap in missing.metrics["tool_set_overlap"])


# -- worked tool-call examples (few_shot) -------------------------------------------


@pytest.mark.parametrize("env_id", TOOL_ENV_IDS)
def test_tool_envs_show_worked_calls_whose_results_are_the_tools_own(env_id):
    """Each worked example's tool messages hold what the env's own tool returns for those arguments."""
    import asyncio

    from verifiers.utils.tool_utils import format_tool_result

    env = vf.load_environment(env_id)
    shots = env.few_shot
    assert shots and shots[0]["role"] == "user" and shots[-1]["role"] == "assistant"
    calls = {c["id"]: c["function"] for m in shots for c in m.get("tool_calls") or []}
    results = [m for m in shots if m["role"] == "tool"]
    assert calls and len(results) == len(calls)
    for message in results:
        fn = calls[message["tool_call_id"]]
        returned = env.tool_map[fn["name"]](**json.loads(fn["arguments"]))
        if asyncio.iscoroutine(returned):
            returned = asyncio.run(returned)
        assert message["content"] == format_tool_result(returned), fn
    # The prompt is [system, worked examples..., question]; 0 examples leaves the question alone.
    prompt = env.eval_dataset[0]["prompt"]
    assert (
        len(prompt) == 2 + len(shots)
        and prompt[-1]["content"] == env.eval_dataset[0]["prompt"][-1]["content"]
    )
    bare = vf.load_environment(env_id, num_examples=0)
    assert bare.few_shot == [] and len(bare.eval_dataset[0]["prompt"]) == 2


@pytest.mark.parametrize("env_id", TOOL_ENV_IDS)
def test_worked_examples_render_as_hermes_calls_for_smollm2(env_id, smol_tokenizer):
    """Through verifiers' tool template, SmolLM2 sees each worked call as a <tool_call> block."""
    from verifiers.envs.dataset_format import clean_prompt
    from verifiers.tokenization.assembly import render_chat_ids

    env = vf.load_environment(env_id)
    ids = render_chat_ids(smol_tokenizer, clean_prompt(env.eval_dataset[0]["prompt"]), True, env.oai_tools)
    text = smol_tokenizer.decode(ids)
    turns = text.split("<|im_end|>", 1)[1]  # after the system message, which describes the format
    calls = [c for m in env.few_shot for c in m.get("tool_calls") or []]
    assert turns.count("<tool_call>") == len(calls) and turns.count("<tool_response>") == len(calls)
    assert text.endswith("<|im_start|>assistant\n")


# -- calculator --------------------------------------------------------------------

PRODUCT = re.compile(r"What is (\d+) \* (\d+)\?")


def test_calculator_rows_are_seeded_products_of_the_asked_sizes():
    import calculator

    rows = calculator.make_rows(200, 0, (4, 3))
    assert rows == calculator.make_rows(200, 0, (4, 3)) and rows != calculator.make_rows(200, 1, (4, 3))
    for row in rows:
        a, b = map(int, PRODUCT.fullmatch(row["question"]).groups())
        assert 1000 <= a <= 9999 and 100 <= b <= 999 and int(row["answer"]) == a * b


async def test_calculator_rewards_the_tool_result_copied_into_the_answer():
    env = vf.load_environment("calculator", num_eval_examples=3)

    def reply(request):
        a, b = PRODUCT.fullmatch(first_user(request, env)).groups()
        if turn(request, env) == 0:
            return {"tool_calls": [call("calculator", {"expression": f"{a} * {b}"})]}
        return request["messages"][-1]["content"]  # the tool's result, as the answer

    result = await evaluate(env, reply, n=3)
    completion = result.completion[0]
    assert [m["role"] for m in completion] == ["assistant", "tool", "assistant"]
    assert result.reward == [1.0] * 3 and result.metrics["calculator_calls"] == [1.0] * 3
    guessed = await evaluate(env, lambda r: "About 5000000.", n=3)  # no tool: a guess
    assert guessed.reward == [0.0] * 3 and guessed.metrics["calculator_calls"] == [0.0] * 3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"digits": [4]}, "digits must be two integers"),
        ({"digits": [0, 3]}, "digits must be two integers"),
        ({"num_examples": 4}, "num_examples must be 0 to 3"),
        ({"max_turns": 0}, "max_turns must be at least 1"),
    ],
)
def test_calculator_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        vf.load_environment("calculator", **kwargs)


# -- number-guess ------------------------------------------------------------------


def test_number_guess_worked_games_bisect_to_their_secret():
    import number_guess

    messages = number_guess.example_games(2, 10)
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    feedback = [m["content"] for m in messages if m["role"] == "user"]
    assert replies == ["5", "8", "5", "2", "3"]  # secrets 8, then 3
    assert feedback == [
        "Your first guess?",
        "Higher: it is from 6 to 10.",
        number_guess.NEXT_GAME,
        "Lower: it is from 1 to 4.",
        "Higher: it is from 3 to 4.",
    ]


@pytest.mark.parametrize(
    "secret, guess, low, high, reply",
    [
        (8, 5, 1, 10, ("Higher: it is from 6 to 10.", 6, 10)),
        (3, 5, 1, 10, ("Lower: it is from 1 to 4.", 1, 4)),
        (4, 3, 1, 4, ("Higher: it is 4.", 4, 4)),
        (7, 2, 6, 10, ("Higher: it is from 6 to 10.", 6, 10)),  # a guess below the open range narrows nothing
    ],
)
def test_number_guess_replies_name_the_range_left(secret, guess, low, high, reply):
    import number_guess

    assert number_guess.answer_guess(secret, guess, low, high) == reply


async def test_number_guess_answers_each_guess_and_pays_more_for_fewer_guesses():
    env = vf.load_environment("number-guess", num_eval_examples=4, max_turns=5)
    rows = by_question(env)
    secrets = [int(row["answer"]) for row in env.eval_dataset.select(range(4))]

    def bisect(request):  # the worked games' strategy, on the real feedback
        low, high = 1, 10
        own = request["messages"][_question_at(request, env) :]
        for guess_msg, answer_msg in zip(own[1::2], own[2::2], strict=False):
            guess = int(guess_msg["content"])
            low, high = (guess + 1, high) if answer_msg["content"].startswith("Higher") else (low, guess - 1)
        return str((low + high) // 2)

    result = await evaluate(env, bisect, n=4)
    for secret, state, reward in zip(secrets, result.state, result.reward, strict=True):
        guesses = state["guesses"]
        assert guesses[-1] == secret and len(guesses) <= 4  # bisection finds 1..10 in 4 guesses
        assert reward == pytest.approx(1 - (len(guesses) - 1) / 5)
    completion = result.completion[0]
    assert all(
        re.fullmatch(r"(Higher|Lower): it is .+\.", m["content"]) for m in completion if m["role"] == "user"
    )
    assert result.metrics["won"] == [1.0] * 4 and result.metrics["valid_guesses"] == [1.0] * 4
    assert result.metrics["in_range_guesses"] == [1.0] * 4  # bisection never leaves the open range
    assert rows  # eval rows are keyed by the shared first question
    lost = await evaluate(env, lambda r: "eleven", n=2)  # no number: every turn gets the rules again
    assert lost.reward == [0.0, 0.0] and lost.metrics["num_guesses"] == [5.0, 5.0]
    assert lost.completion[0][1]["content"] == "Reply with just one whole number from 1 to 10."
    assert secrets[0] != 1
    stuck = await evaluate(env, lambda r: "1", n=1)  # the same wrong guess: in range once, then not
    assert stuck.metrics["in_range_guesses"] == [pytest.approx(1 / 5)] and stuck.reward == [0.0]


@pytest.mark.parametrize(
    "text, guess", [("7", 7), ("Is it 7?", 7), ("between 1 and 10, so 4", 4), ("seven", None), (None, None)]
)
def test_number_guess_reads_the_last_integer(text, guess):
    import number_guess

    assert number_guess.read_guess(text) == guess


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_number": 1}, "max_number must be at least 2"),
        ({"max_turns": 0}, "max_turns must be at least 1"),
        ({"num_examples": 6}, "num_examples must be 0 to 5"),
    ],
)
def test_number_guess_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        vf.load_environment("number-guess", **kwargs)
