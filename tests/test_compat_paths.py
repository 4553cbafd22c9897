"""0.1.x module paths: every one imports, and an environment module written for 0.1.x runs unchanged.

The module below imports from each 0.1.x path that environment code reached
into (``verifiers.types``, ``verifiers.envs.*_env``, ``verifiers.utils.data_utils``,
``.tools``, ``.tool_utils``, ``.message_utils``, ...), awaits the base-class
hooks as 0.1.x subclasses did, uses an ``XMLParser`` with field alternatives,
and is loaded with ``vf.load_environment`` and evaluated against the fake
OpenAI server.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import verifiers as vf
from tests.doubles.openai_server import fake_server

ROOT = Path(__file__).resolve().parents[1]

# Every path of api.md's "Module paths that 0.1.x code imports", with the names code takes from it.
LIGHT_PATHS: dict[str, list[str]] = {
    "verifiers.types": [
        "ChatMessage",
        "ChatCompletion",
        "Completion",
        "Messages",
        "State",
        "Info",
        "SamplingArgs",
        "RewardFunc",
        "GenerateInputs",
        "GenerateOutputs",
        "ProcessedOutputs",
        "RolloutScore",
        "RolloutScores",
        "MessageType",
        "ModelResponse",
        "ChatCompletionMessageToolCall",
        "ChatCompletionToolParam",
    ],
    "verifiers.envs.environment": ["Environment"],
    "verifiers.envs.multiturn_env": ["MultiTurnEnv"],
    "verifiers.envs.singleturn_env": ["SingleTurnEnv"],
    "verifiers.envs.tool_env": ["ToolEnv"],
    "verifiers.envs.stateful_tool_env": ["StatefulToolEnv"],
    "verifiers.envs.env_group": ["EnvGroup", "EnvGroupRubric"],
    "verifiers.envs.textarena_env": ["TextArenaEnv"],
    # upstream 0.1.10+'s experimental environments (issue 25)
    "verifiers.envs.experimental": ["GymEnv", "MCPEnv", "CliAgentEnv", "HarborEnv"],
    "verifiers.envs.experimental.gym_env": ["GymEnv"],
    "verifiers.envs.experimental.mcp_env": ["MCPEnv"],
    "verifiers.envs.experimental.cli_agent_env": ["CliAgentEnv"],
    "verifiers.envs.experimental.harbor_env": ["HarborEnv"],
    "verifiers.envs.experimental.harbor_env.env": ["HarborEnv"],
    "verifiers.envs.integrations.openenv_env": ["OpenEnvEnv"],
    "verifiers.envs": [
        "Environment",
        "MultiTurnEnv",
        "SingleTurnEnv",
        "ToolEnv",
        "StatefulToolEnv",
        "EnvGroup",
    ],
    "verifiers.parsers.parser": ["Parser"],
    "verifiers.parsers.xml_parser": ["XMLParser"],
    "verifiers.parsers.think_parser": ["ThinkParser"],
    "verifiers.parsers": ["Parser", "XMLParser", "ThinkParser"],
    "verifiers.rubrics.rubric": ["Rubric"],
    "verifiers.rubrics.rubric_group": ["RubricGroup"],
    "verifiers.rubrics.judge_rubric": ["JudgeRubric"],
    "verifiers.rubrics.math_rubric": ["MathRubric"],
    "verifiers.rubrics.tool_rubric": ["ToolRubric"],
    "verifiers.rubrics": ["Rubric", "RubricGroup", "JudgeRubric", "MathRubric", "ToolRubric"],
    "verifiers.utils.data_utils": [
        "load_example_dataset",
        "extract_boxed_answer",
        "extract_hash_answer",
        "strip_non_numeric",
        "BOXED_SYSTEM_PROMPT",
        "THINK_BOXED_SYSTEM_PROMPT",
    ],
    "verifiers.utils.tools": ["python", "calculator"],
    "verifiers.utils.tool_utils": ["convert_func_to_oai_tool"],
    "verifiers.utils.message_utils": [
        "messages_to_printable",
        "message_to_printable",
        "cleanup_messages",
        "cleanup_message",
        "sanitize_tool_calls",
    ],
    "verifiers.utils.async_utils": ["maybe_await"],
    "verifiers.utils.logging_utils": ["setup_logging", "print_prompt_completions_sample"],
    # 0.1.x utils (issue 41)
    "verifiers.utils.env_utils": ["load_environment"],
    "verifiers.utils.config_utils": ["ensure_keys", "MissingKeyError"],
    "verifiers.utils.decorators": ["stop", "cleanup", "teardown"],
    "verifiers.inference.vllm_client": ["VLLMClient"],
    # 0.1.8+ utils, now environment code in verifiers/envs/ (issue 44)
    "verifiers.utils.response_utils": ["parse_response_message", "parse_response_tokens"],
    # 0.2's utils paths of environment code, now in verifiers/envs/ (issue 44)
    "verifiers.utils.env_loader": ["load_environment"],
    "verifiers.utils.sandbox": ["run_python", "arun_python", "SandboxResult"],
    "verifiers.utils.sandbox_child": ["main"],
    "verifiers.trainers": ["GRPOTrainer", "GRPOConfig", "grpo_defaults", "lora_defaults"],
}
# Importing these imports torch/transformers, as in 0.1.x.
TRAINING_PATHS: dict[str, list[str]] = {
    "verifiers.trainers.grpo_trainer": ["GRPOTrainer"],
    "verifiers.trainers.grpo_config": ["GRPOConfig", "grpo_defaults", "lora_defaults"],
    "verifiers.utils.model_utils": ["get_model", "get_tokenizer", "get_model_and_tokenizer"],
}
HEAVY = ("torch", "transformers", "vllm")


@pytest.mark.parametrize("module", sorted(set(LIGHT_PATHS) - {"verifiers.trainers"}))
def test_01x_module_path_imports_with_its_names(module):
    mod = importlib.import_module(module)
    for name in LIGHT_PATHS[module]:
        assert getattr(mod, name) is not None, f"{module}.{name}"


def test_01x_paths_are_the_same_objects_not_copies():
    from verifiers.envs.env_group import EnvGroupRubric
    from verifiers.envs.group import EnvGroupRubric as ours
    from verifiers.envs.tool_env import ToolEnv
    from verifiers.rubrics.rubric_group import RubricGroup
    from verifiers.utils.data_utils import load_example_dataset

    assert ToolEnv is vf.ToolEnv and RubricGroup is vf.RubricGroup and EnvGroupRubric is ours
    assert load_example_dataset is vf.load_example_dataset


def test_light_paths_import_no_torch_and_training_paths_still_work():
    """`import verifiers` and every light 0.1.x path leave torch out; the trainer paths import it on demand."""
    light = ", ".join(LIGHT_PATHS)
    code = textwrap.dedent(
        f"""
        import importlib, sys
        import verifiers, {light}
        print(",".join(m for m in {HEAVY!r} if m in sys.modules))
        for module, names in {TRAINING_PATHS!r}.items():
            mod = importlib.import_module(module)
            assert all(getattr(mod, n) for n in names), module
        import verifiers.trainers as t
        assert t.GRPOTrainer is verifiers.GRPOTrainer and t.GRPOConfig is verifiers.GRPOConfig
        print("ok")
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    heavy, ok = out.stdout.splitlines()[-2:]
    assert heavy == "" and ok == "ok"


# -- a 0.1.x environment module -------------------------------------------------------

OLD_MODULE = textwrap.dedent(
    '''
    import verifiers as vf
    from datasets import Dataset
    from verifiers.envs.env_group import EnvGroup, EnvGroupRubric
    from verifiers.envs.environment import Environment
    from verifiers.envs.multiturn_env import MultiTurnEnv
    from verifiers.envs.singleturn_env import SingleTurnEnv
    from verifiers.envs.stateful_tool_env import StatefulToolEnv
    from verifiers.envs.tool_env import ToolEnv
    from verifiers.parsers.parser import Parser
    from verifiers.parsers.think_parser import ThinkParser
    from verifiers.parsers.xml_parser import XMLParser
    from verifiers.rubrics.judge_rubric import JudgeRubric
    from verifiers.rubrics.rubric import Rubric
    from verifiers.rubrics.rubric_group import RubricGroup
    from verifiers.rubrics.tool_rubric import ToolRubric
    from verifiers.types import (
        ChatCompletion, ChatMessage, GenerateInputs, GenerateOutputs, Info, Messages,
        ProcessedOutputs, RewardFunc, SamplingArgs, State,
    )
    from verifiers.utils.async_utils import maybe_await
    from verifiers.utils.data_utils import (
        BOXED_SYSTEM_PROMPT, extract_boxed_answer, extract_hash_answer, load_example_dataset,
    )
    from verifiers.utils.logging_utils import print_prompt_completions_sample, setup_logging
    from verifiers.utils.message_utils import cleanup_messages, messages_to_printable, sanitize_tool_calls
    from verifiers.utils.tool_utils import convert_func_to_oai_tool
    from verifiers.utils.tools import calculator, python

    assert issubclass(MultiTurnEnv, Environment) and ChatCompletion.__name__ == "ChatCompletion"
    assert convert_func_to_oai_tool(python)["function"]["name"] == "python"
    assert extract_hash_answer("so #### 12") == "12"


    class GuessEnv(MultiTurnEnv):
        """The model guesses in <guess> (or <answer>, which ends the game); the env says higher/lower."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.xml = XMLParser(["think", ("guess", "answer")], answer_field="answer")

        async def setup_state(self, state: State, **kwargs) -> State:
            state = await super().setup_state(state, **kwargs)
            state["guesses"] = []
            return state

        async def is_completed(self, messages: Messages, state: State, **kwargs) -> bool:
            if await super().is_completed(messages, state, **kwargs):
                return True
            return self.xml.parse(messages[-1]["content"]).answer is not None

        async def env_response(self, messages: Messages, state: State, **kwargs):
            guess = self.xml.parse(messages[-1]["content"]).guess
            state["guesses"].append(guess)
            hint = "higher" if int(guess) < int(state["answer"]) else "lower"
            return [{"role": "user", "content": hint}], state


    class CountingToolEnv(ToolEnv):
        async def setup_state(self, state: State, **kwargs) -> State:
            state = await super().setup_state(state, **kwargs)
            state["tool_turns"] = 0
            return state

        async def is_completed(self, messages: Messages, state: State, **kwargs) -> bool:
            return await super().is_completed(messages, state, **kwargs)

        async def env_response(self, messages: Messages, state: State, **kwargs):
            tool_messages, state = await super().env_response(messages, state, **kwargs)
            state["tool_turns"] += 1
            return tool_messages, state


    class SessionToolEnv(StatefulToolEnv):
        """Sync overrides keep working next to the async base hooks."""

        def setup_state(self, state, **kwargs):
            state["session"] = "s-" + state["answer"]
            return state

        def update_tool_args(self, tool_args, messages, state, **kwargs):
            return {**tool_args, "session": state["session"]}


    def whoami(session: str) -> str:
        """Return the session id."""
        return session


    def load_environment(num_examples: int = 2):
        setup_logging("WARNING")
        numbers = Dataset.from_dict({"question": ["Guess my number."] * num_examples, "answer": ["7"] * num_examples})
        rows = load_example_dataset("reverse_text", n=num_examples)
        boxed = Parser(extract_fn=extract_boxed_answer)

        def exact(completion, answer) -> float:
            return 1.0 if boxed.parse_answer(completion) == answer else 0.0

        async def printable_turns(completion) -> float:
            # 0.1.x form of maybe_await: a function and its arguments.
            return float(len(await maybe_await(messages_to_printable, completion)))

        single = SingleTurnEnv(
            dataset=rows,
            system_prompt=BOXED_SYSTEM_PROMPT,
            parser=boxed,
            rubric=RubricGroup([Rubric(funcs=[exact]), Rubric(funcs=[printable_turns], weights=[0.0])]),
        )

        def guesses_used(state) -> float:
            return float(len(state["guesses"]))

        guess = GuessEnv(dataset=numbers, rubric=Rubric(funcs=[guesses_used], weights=[0.0]), max_turns=5)

        def tool_turns(state) -> float:
            return float(state["tool_turns"])

        tools = CountingToolEnv(
            dataset=numbers,
            tools=[python, calculator],
            rubric=RubricGroup([ToolRubric(tools=[python, calculator]), Rubric(funcs=[tool_turns], weights=[0.0])]),
            max_turns=4,
        )
        session = SessionToolEnv(dataset=numbers, rubric=Rubric(funcs=[lambda completion: 0.0]), max_turns=3)
        session.add_tool(whoami, args_to_skip=["session"])
        group = EnvGroup([single, guess, tools, session], env_names=["single", "guess", "tools", "session"])
        assert isinstance(group.rubric, EnvGroupRubric)
        return group
    '''
)


@pytest.fixture()
def old_module(tmp_path, monkeypatch):
    (tmp_path / "my_old_env.py").write_text(OLD_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my-old-env"
    sys.modules.pop("my_old_env", None)


def _user_text(messages, role="user"):
    return [m["content"] for m in messages if m["role"] == role]


def reply(request):
    """A cooperative model for each of the four tasks."""
    messages = request["messages"]
    system = _user_text(messages, "system")
    tools = [t["function"]["name"] for t in request.get("tools") or []]
    tool_results = _user_text(messages, "tool")
    if system and "boxed" in system[0]:  # single: reverse the text
        return "\\boxed{" + _user_text(messages)[-1][::-1] + "}"
    if "python" in tools:  # tools: one python call, one calculator call, then done
        if len(tool_results) == 0:
            return {"tool_calls": [{"name": "python", "arguments": {"code": "x = 6\nx + 1"}}]}
        if len(tool_results) == 1:
            return {"tool_calls": [{"name": "calculator", "arguments": {"expression": "3 * (2 + 1)"}}]}
        return "done: " + " ".join(tool_results)
    if "whoami" in tools:  # session: the model may not forge the hidden argument
        if not tool_results:
            return {"tool_calls": [{"name": "whoami", "arguments": {"session": "forged"}}]}
        return "I am " + tool_results[-1]
    hints = _user_text(messages)[1:]  # guess: 5, then 9 after "higher", then answer 7
    if not hints:
        return "<think>start</think>\n<guess>5</guess>"
    if len(hints) == 1:
        return "<guess>9</guess>"
    return "<think>between</think>\n<answer>7</answer>"


def test_01x_environment_module_loads_and_evaluates(old_module):
    env = vf.load_environment(old_module, num_examples=2)
    with fake_server(reply=reply) as server:
        results = env.evaluate(server.client(), "fake-model", num_examples=-1, rollouts_per_example=1)
    by_task: dict[str, list[int]] = {}
    for i, task in enumerate(results.task):
        by_task.setdefault(task, []).append(i)
    assert sorted(by_task) == ["guess", "session", "single", "tools"]
    assert all(s.get("error") is None for s in results.state), [s.get("error") for s in results.state]
    for i in by_task["single"]:
        assert results.metrics["exact"][i] == 1.0 and results.reward[i] == 1.0
        assert results.metrics["printable_turns"][i] == 1.0
    for i in by_task["guess"]:
        # <guess>5</guess>, <guess>9</guess>, then <answer>7</answer>: the alternative name ends it.
        assert results.state[i]["guesses"] == ["5", "9"] and results.metrics["guesses_used"][i] == 2.0
    for i in by_task["tools"]:
        tool_messages = [m["content"] for m in results.completion[i] if m["role"] == "tool"]
        assert tool_messages == ["7", "9"]  # python printed the cell's value; calculator evaluated
        assert results.metrics["tool_turns"][i] == 2.0
        assert results.metrics["python_calls"][i] == 1.0 and results.metrics["calculator_calls"][i] == 1.0
    for i in by_task["session"]:
        answer = results.state[i]["answer"]
        assert results.completion[i][-1]["content"] == f"I am s-{answer}"


# -- the helpers' behaviour ---------------------------------------------------------------


def test_maybe_await_takes_a_value_or_a_function_and_arguments():
    from verifiers.utils.async_utils import maybe_await

    async def double(x):
        return 2 * x

    async def run():
        return (
            await maybe_await(3),
            await maybe_await(double(4)),
            await maybe_await(double, 5),
            await maybe_await(lambda x, y=0: x + y, 1, y=2),
        )

    assert asyncio.run(run()) == (3, 8, 10, 3)
    with pytest.raises(TypeError, match="not callable"):
        asyncio.run(maybe_await(3, 4))


def test_python_tool_reports_errors_and_timeouts(monkeypatch):
    from verifiers.utils import tools

    assert tools.python("print('a')\nNone") == "a"
    assert "ZeroDivisionError" in tools.python("1 / 0")
    assert "SyntaxError" in tools.python("def f(:\n  pass")
    monkeypatch.setattr(tools, "PYTHON_TIMEOUT_S", 0.5)
    assert tools.python("while True:\n    pass") == "Error: Code execution timed out after 0.5 seconds"


def test_calculator_evaluates_arithmetic_only():
    from verifiers.utils.tools import calculator

    assert calculator("3 * (17 + 4)") == "63" and calculator("100 / 5") == "20.0"
    assert calculator("__import__('os')") == "Error: Invalid characters in expression"
    assert calculator("1 / 0").startswith("Error:") and calculator("9 ** 9 ** 9").startswith("Error:")


def test_removed_web_tools_fail_at_import_with_one_line():
    with pytest.raises(ImportError) as info:
        from verifiers.utils.tools import search  # noqa: F401
    message = str(info.value)
    assert "not part of verifiers 0.2" in message and "\n" not in message


def test_message_utils_print_clean_and_sanitize():
    from verifiers.utils.message_utils import cleanup_messages, messages_to_printable, sanitize_tool_calls

    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look", "image_url": "stray"},
                {"type": "image_url", "image_url": {"url": "data:"}, "text": "stray"},
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": [call], "extra": 1},
        {"role": "tool", "content": "ok", "tool_call_id": "c1"},
    ]
    printable = messages_to_printable(messages)
    assert printable[0] == {"role": "user", "content": "look\n\n[image]"}
    assert printable[1] == {"role": "assistant", "content": "", "tool_calls": [call]}
    clean = cleanup_messages(messages)
    assert clean[0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:"}},
    ]
    assert "extra" not in clean[1] and clean[2]["tool_call_id"] == "c1"
    sanitized = sanitize_tool_calls(messages)
    assert sanitized[1] == {"role": "assistant", "content": "", "tool_calls": [json.dumps(call)]}
    assert sanitized[0] is messages[0] and messages_to_printable("text") == "text"


def test_textarena_env_without_the_package_says_to_install_it(monkeypatch):
    from verifiers.envs import textarena_env

    monkeypatch.setattr(textarena_env, "textarena_installed", lambda: False)
    with pytest.raises(vf.ConfigError) as info:
        textarena_env.TextArenaEnv(game="Wordle-v0")
    message = str(info.value)
    assert "pip install textarena" in message and "\n" not in message
    monkeypatch.setattr(textarena_env, "textarena_installed", lambda: True)
    with pytest.raises(vf.ConfigError, match="wordle"):
        textarena_env.TextArenaEnv()


def test_generate_inputs_feed_a_generate_and_completion_is_refused():
    from verifiers.types import GenerateInputs

    env = vf.SingleTurnEnv(dataset=[{"question": "q", "answer": "a"}])
    inputs = GenerateInputs(prompt=[[{"role": "user", "content": "hi"}]], answer=["a"])
    with fake_server(reply=lambda req: "a") as server:
        out = env.generate(inputs, server.client(), "fake-model")
    assert out.completion == [[{"role": "assistant", "content": "a"}]] and out.answer == ["a"]
    with pytest.raises(vf.ConfigError, match="completion"):
        env.generate(GenerateInputs(prompt=[[]], completion=[[]]), None, "fake-model")


def test_load_example_dataset_without_split_uses_the_01x_default(monkeypatch):
    import datasets

    seen = []

    def fake_load(path, config=None, split=None):
        seen.append(split)
        return datasets.Dataset.from_list([{"problem": "1+1?", "answer": "2"}])

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    assert vf.load_example_dataset("math500")[0] == {"question": "1+1?", "answer": "2"}
    assert seen == ["test"]
    assert len(vf.load_example_dataset("reverse_text")) == 1000  # the train split


# -- the compat table ---------------------------------------------------------------------------


def test_every_old_path_is_served_by_the_hook_and_no_file_is_left_there():
    """One place: each old path resolves through verifiers.compat, and no module file shadows it."""
    import importlib.machinery
    import importlib.util

    from verifiers.compat import MOVED, OLD_PATHS, REEXPORTED
    from verifiers.compat.finder import OldPathFinder

    old_01x = {
        p for p in OLD_PATHS if p.startswith(("verifiers.envs", "verifiers.rubrics", "verifiers.utils"))
    }
    assert old_01x <= set(LIGHT_PATHS) | set(TRAINING_PATHS)  # each is imported with its names above
    finder = next(f for f in sys.meta_path if isinstance(f, OldPathFinder))
    for old in sorted(OLD_PATHS):
        assert finder.find_spec(old) is not None, old
        parent = importlib.import_module(old.rpartition(".")[0])
        assert importlib.machinery.PathFinder.find_spec(old, parent.__path__) is None, f"a file shadows {old}"
    for old, new in MOVED.items():
        assert importlib.util.find_spec(new) is not None, f"{old} -> {new}: no such module"
    for old, names in REEXPORTED.items():
        for name, source in names.items():
            assert importlib.util.find_spec(source) is not None, f"{old}.{name} -> {source}: no such module"


def test_moved_paths_are_the_module_itself_and_run_as_scripts():
    import verifiers.envs.tool
    import verifiers.envs.tool_env as old
    import verifiers.rollout.tokens
    import verifiers.tokenization.assembly

    assert old is verifiers.envs.tool and old.__name__ == "verifiers.envs.tool"
    assert verifiers.rollout.tokens is verifiers.tokenization.assembly
    # 0.2's docs: `python -m verifiers.rollout.chat_template MODEL -o FILE`
    out = subprocess.run(
        [sys.executable, "-m", "verifiers.rollout.chat_template", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert out.returncode == 0 and "usage:" in out.stdout, out.stderr[-2000:]


def test_old_packages_hold_their_old_submodules_and_nothing_else():
    from verifiers.rl import trainer  # the guides' package, an old path itself

    assert "RLTrainer" in trainer.__all__ and "BatchGenerator" in dir(trainer)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("verifiers.trainers.not_a_module")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("verifiers.rollout.not_a_module")
    import verifiers.trainers

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        verifiers.trainers.nope  # noqa: B018


def test_old_training_paths_without_torch_name_the_extra():
    """As in 0.1.x, importing a trainer path imports torch: without it, one MissingExtraError line."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["torch"] = None  # as if the 'train' extra were not installed
        import verifiers, verifiers.trainers, verifiers.rl  # the light ones import
        from verifiers.errors import MissingExtraError
        for path in ("verifiers.trainers.grpo_trainer", "verifiers.rl.trainer.orchestrator"):
            try:
                __import__(path)
            except MissingExtraError as e:
                print(e.extra, str(e).splitlines()[0])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("train ") for line in lines), out.stdout
    assert "needs the 'train' extra" in lines[0]
