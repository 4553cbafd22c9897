"""Environment modules in the style of each release (0.1.6, 0.1.8, 0.1.10, 0.1.12), unchanged:
they load with ``vf.load_environment``, evaluate against the local scripted server, and (slow
tier) train 2 steps with ``GRPOTrainer`` against a real vf-vllm serving the tiny model.

The modules are ours, written from what those releases document (tests/fixtures/envs_01x/);
``FEATURES`` names the module that uses each feature of issue 25, and a test checks that it
does. Nothing is downloaded. The same modules are compared with the releases themselves in
tests/parity/test_parity_01x.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import re
import sys
from pathlib import Path

import pytest

import verifiers as vf
from tests.doubles.openai_server import fake_server
from tests.parity import script01x

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "envs_01x"

# module -> (release whose style it follows, load_environment args, lowest acceptable mean reward)
MODULES: dict[str, tuple[str, dict, float]] = {
    "guess_v016": ("0.1.6", {}, 0.3),
    "trivia_v018": ("0.1.8", {}, 1.0),
    "group_v0110": ("0.1.10", {}, 0.5),
    "judge_v0110": ("0.1.10", {}, 0.0),
    "session_tools_v0110": ("0.1.10", {}, 0.0),
    "gym_v0110": ("0.1.10", {}, 3.0),
    "sorting_v0112": ("0.1.12", {}, 0.5),
    "tools_v0112": ("0.1.12", {}, 1.0),
    "repeater_v018": ("0.1.12", {}, 0.0),
    "python_tools_v0112": ("0.1.12", {}, 0.0),
    "wordle_v0112": ("0.1.12", {}, 0.0),
}

# feature of issue 25 -> (module, a regular expression its source must match)
FEATURES: dict[str, tuple[str, str]] = {
    "is_completed override (0.1.4-0.1.6)": ("guess_v016", r"async def is_completed\(self, messages, state"),
    "env_response -> (messages, state)": ("guess_v016", r"\], state\n"),
    "XMLParser format reward": ("guess_v016", r"get_format_reward_func\(\)"),
    "setup_state": ("trivia_v018", r"async def setup_state"),
    "@vf.stop": ("trivia_v018", r"@vf\.stop"),
    "state['trajectory']": ("trivia_v018", r"state\[\"trajectory\"\]"),
    "@vf.cleanup / @vf.teardown": ("sorting_v0112", r"@vf\.cleanup[\s\S]*@vf\.teardown"),
    "message types": ("sorting_v0112", r"vf\.UserMessage\("),
    "messages read as objects": ("tools_v0112", r"last\.tool_calls"),
    "dataset builders": ("group_v0110", r"eval_dataset=build_eval"),
    "group reward function": ("group_v0110", r"def shortest_in_group\(completions, states\)"),
    "monitor metric (add_metric)": ("group_v0110", r"rubric\.add_metric"),
    "vf.ensure_keys": ("judge_v0110", r"vf\.ensure_keys"),
    "JudgeRubric": ("judge_v0110", r"vf\.JudgeRubric"),
    "StatefulToolEnv hidden arguments": ("session_tools_v0110", r"args_to_skip="),
    "ToolEnv": ("tools_v0112", r"vf\.ToolEnv\("),
    "vf.PythonEnv": ("python_tools_v0112", r"vf\.PythonEnv\("),
    "vf.GymEnv": ("gym_v0110", r"vf\.GymEnv\("),
    "verifiers.envs.integrations": ("wordle_v0112", r"from verifiers\.envs\.integrations import"),
}


@pytest.fixture
def fixtures_path(monkeypatch):
    """The fixture modules importable by name, fresh for each test."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    monkeypatch.setenv("JUDGE_API_KEY", "EMPTY")
    for name in MODULES:
        sys.modules.pop(name, None)
    yield
    for name in MODULES:
        sys.modules.pop(name, None)


def _text(m) -> str:
    return m.get("content") or ""


def reply(request: dict):
    """The scripted model for every module here (script01x's for the ones the parity tier uses)."""
    msgs = request.get("messages") or []
    first_user = next((_text(m) for m in msgs if m["role"] == "user"), "")
    said = sum(1 for m in msgs if m["role"] == "assistant")
    if first_user.startswith("Guess my digit"):
        return f"<think>try {3 + said}</think>\n<guess>{3 + said}</guess>"
    if first_user.startswith("Count down from"):
        numbers = re.findall(r"\d+", _text(msgs[-1]))
        return numbers[-1] if numbers else "0"
    if first_user.startswith("Round "):
        return ["alpha", "beta", "gamma"][said % 3]
    if first_user.startswith("What is 6 * 7 + 1?"):
        return "The answer is \\boxed{43}."
    return script01x.reply(request)


def load(name: str, server=None) -> vf.Environment:
    args = dict(MODULES[name][1])
    if name == "judge_v0110" and server is not None:
        args["judge_base_url"] = server.url
    if name == "python_tools_v0112" and not hasattr(vf, "PythonEnv"):
        pytest.skip("vf.PythonEnv is not in this package yet (issue 25 item 5)")
    if name == "wordle_v0112":
        try:
            importlib.import_module("textarena")
        except ImportError:
            with pytest.raises(Exception) as err:
                vf.load_environment(name, **args)
            assert "textarena" in str(err.value) and "\n" not in str(err.value).strip()
            pytest.skip(f"wordle_v0112 needs textarena (refused in one line: {str(err.value)[:120]})")
    return vf.load_environment(name, **args)


# -- pure -------------------------------------------------------------------------------------


def test_every_feature_is_used_by_a_module():
    releases = {release for release, _, _ in MODULES.values()}
    assert releases == {"0.1.6", "0.1.8", "0.1.10", "0.1.12"}
    for feature, (name, pattern) in FEATURES.items():
        source = (FIXTURES / f"{name}.py").read_text()
        assert re.search(pattern, source), f"{feature}: {name}.py does not match {pattern!r}"


# -- components: load and evaluate against the scripted server --------------------------------


@pytest.mark.parametrize("name", list(MODULES))
def test_module_loads_and_evaluates(name, fixtures_path):
    with fake_server(reply=reply) as server:
        env = load(name, server)
        results = env.evaluate(server.client(), "fake-model", num_examples=2, rollouts_per_example=2)
    rewards = list(results.reward)
    assert len(rewards) == 2 * min(2, len(env.get_eval_dataset())) and all(
        isinstance(r, float) for r in rewards
    )
    assert all(s.get("error") is None for s in results.state), [s.get("error") for s in results.state]
    assert sum(rewards) / len(rewards) >= MODULES[name][2], (name, rewards)
    if MODULES[name][0] != "0.1.6":  # 0.1.8+ state: one trajectory step per model call
        for state in results.state:
            assert len(state["trajectory"]) == sum(1 for m in state["completion"] if m["role"] == "assistant")
            assert state["stop_condition"]
    env_teardown = getattr(env, "teardown_sync", None)
    if env_teardown:
        env_teardown()


def _guess_results():
    env = load("guess_v016")
    with fake_server(reply=reply) as server:
        return env.evaluate(server.client(), "fake-model", num_examples=2, rollouts_per_example=1)


def test_guess_0_1_6_scores_with_its_own_metrics(fixtures_path):
    results = _guess_results()
    # answers "3" and "4": guesses 3, 4, 5; the right guess is answered "correct" by env_response
    assert results.metrics["solved"] == [1.0, 1.0]
    assert results.metrics["few_guesses"] == [1.0, 0.5]  # 1 / guesses judged by env_response
    assert results.metrics["format_reward_func"] == [1.0, 1.0]  # XMLParser's format reward
    assert results.reward == pytest.approx([1.0 + 0.2 + 0.1, 1.0 + 0.1 + 0.1])
    assert "num_turns" not in results.metrics  # a 0.1.4/0.1.6-form module keeps its own metrics
    contents = [m["content"] for m in results.completion[0]]
    assert contents[1] == "Guess 1: correct"


def test_guess_0_1_6_ends_when_env_response_finishes_the_game(fixtures_path):
    results = _guess_results()
    turns = [sum(1 for m in c if m["role"] == "assistant") for c in results.completion]
    assert turns == [1, 2]  # 0.1.6: no model turn after "correct"


def test_trivia_0_1_8_rolls_out_from_a_rollout_input(fixtures_path):
    env = load("trivia_v018")
    row = env.get_eval_dataset().to_list()[0]
    rin = vf.RolloutInput(
        prompt=row["prompt"], answer=row["answer"], task=row["task"], info=row["info"], example_id=0
    )

    async def go(client):
        state = await env.init_state(rin, client, "fake-model")
        assert state["prompt"] == row["prompt"] and state["example_id"] == 0
        return await env.rollout(rin, client, "fake-model", {"temperature": 0.0})

    with fake_server(reply=reply) as server:
        state = asyncio.run(go(server.client()))
    assert [step["completion"][-1]["content"] for step in state["trajectory"]] == ["alpha", "beta", "gamma"]
    assert state["stop_condition"] == "all_asked" and state["asked"] == 3
    assert all(step["tokens"]["completion_ids"] for step in state["trajectory"])


# -- slow: 2 training steps per release style against a real vf-vllm -------------------------

TRAINED = ("guess_v016", "trivia_v018", "group_v0110", "gym_v0110", "sorting_v0112")


def _group_train_split():
    from datasets import Dataset

    return Dataset.from_list([{"question": f"t{i}", "answer": "x"} for i in range(4)])


# group_v0110 ships only an eval split; its load_environment passes extra arguments on.
TRAIN_ARGS = {"group_v0110": {"dataset": _group_train_split}}


@pytest.mark.slow
@pytest.mark.server
def test_release_style_modules_train_two_steps_against_vf_vllm(tiny_model_dir, tmp_path, fixtures_path):
    pytest.importorskip("torch")
    from tests.doubles.vllm_server import serve

    flags = ("--max-num-seqs", "16", "--seed", "0")
    (tmp_path / "vllm").mkdir()
    with (
        serve(tiny_model_dir, tmp_path / "vllm", *flags) as server,
        contextlib.closing(server.client()) as client,
    ):
        for name in TRAINED:
            env = vf.load_environment(name, **TRAIN_ARGS.get(name, {}))
            model, tokenizer = vf.get_model_and_tokenizer(str(tiny_model_dir))
            args = vf.GRPOConfig(
                output_dir=str(tmp_path / name),
                use_cpu=True,
                report_to="none",
                max_steps=2,
                per_device_train_batch_size=4,
                gradient_accumulation_steps=1,
                num_generations=2,
                max_tokens=8,
                max_seq_len=256,
                max_prompt_length=128,
                learning_rate=1e-3,
                beta=0.0,
                logging_steps=1,
                save_strategy="no",
                num_batches_ahead=0,
                mask_truncated_completions=False,  # the random model never stops before max_tokens
                importance_sampling_mask_low=None,
                importance_sampling_mask_high=None,
                seed=0,
            )
            trainer = vf.GRPOTrainer(
                model=model, processing_class=tokenizer, env=env, args=args, client=client
            )
            trainer.train()
            steps = [h for h in trainer.state.log_history if "loss" in h and "step" in h]
            assert len(steps) == 2, (name, trainer.state.log_history)
            if hasattr(env, "teardown_sync"):
                env.teardown_sync()
