"""The scripts under examples/: they compile, answer --help without heavy imports, and are wired right.

- Fast: ``--help`` in a subprocess (torch must not be imported to parse arguments);
  each GRPO example's ``main()`` run in-process with the trainer and model loader
  replaced by recorders, so the environment, the GRPOConfig and the LoRA config it
  builds are checked against its docstring's server command (``--max-model-len``,
  ``--max-lora-rank``, tool-call flags) and its prompts against ``max_prompt_length``;
  ``examples/sft.py``'s data handling as plain functions.
  Each ``vf-rl`` command in the docstrings passes ``vf-rl --dry-run`` (in-process).
- Slow (``-m slow``): ``examples/sft.py`` trains 2 steps on the tiny model from rollouts
  saved the way ``vf-eval -s`` saves them; each GRPO example trains 1 step against
  ``tests/doubles/openai_server.py``.

No vLLM server is started here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import py_compile
import re
import runpy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
GRPO_DIR = EXAMPLES / "grpo"
ENV_DIRS = sorted(p.name for p in (ROOT / "environments").iterdir() if (p / "pyproject.toml").is_file())
ALL_SCRIPTS = sorted(p for p in EXAMPLES.rglob("*.py") if p.name != "__init__.py")
GRPO_SCRIPTS = {d: GRPO_DIR / f"train_{d}.py" for d in ENV_DIRS}


def env_id(env_dir: str) -> str:
    return env_dir.replace("_", "-")


def offline_env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def docstring(path: Path) -> str:
    import ast

    return ast.get_docstring(ast.parse(path.read_text())) or ""


def server_flags(doc: str) -> dict[str, str]:
    """The flags of the ``vf-vllm`` command in a docstring: ``{"--max-model-len": "1024", "--enforce-eager": ""}``."""
    m = re.search(r"^\s*vf-vllm (.*?)(?<!\\)$", doc.replace("\\\n", " "), re.M)
    assert m, "the docstring has no vf-vllm command"
    words = shlex.split(m.group(1))
    flags: dict[str, str] = {}
    for i, w in enumerate(words):
        if w.startswith("--"):
            nxt = words[i + 1] if i + 1 < len(words) else ""
            flags[w] = "" if nxt.startswith("--") else nxt
    return flags


def vf_rl_commands(doc: str) -> list[list[str]]:
    return [shlex.split(m) for m in re.findall(r"^\s*(vf-rl @ .*)$", doc.replace("\\\n", " "), re.M)]


# ---------------------------------------------------------------------------
# every script


def test_every_bundled_environment_has_a_grpo_example():
    assert ENV_DIRS, "no environments found"
    missing = [str(p.relative_to(ROOT)) for p in GRPO_SCRIPTS.values() if not p.is_file()]
    assert not missing
    assert (EXAMPLES / "sft.py").is_file()


@pytest.mark.parametrize("path", ALL_SCRIPTS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_compiles(path, tmp_path):
    py_compile.compile(str(path), cfile=str(tmp_path / "x.pyc"), doraise=True)


@pytest.mark.parametrize("path", ALL_SCRIPTS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_help_is_fast_and_light(path):
    """--help exits 0 with the usage and never imports torch (arguments are parsed first)."""
    probe = (
        "import runpy, sys\n"
        f"sys.argv = [{str(path)!r}, '--help']\n"
        "try:\n"
        f"    runpy.run_path({str(path)!r}, run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "print('HEAVY:', sorted(m for m in ('torch', 'transformers', 'trl', 'peft') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=offline_env(), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "HEAVY: []" in out.stdout, out.stdout[-500:]
    assert "--model" in out.stdout
    if path.parent == GRPO_DIR:
        assert "--port" in out.stdout and "--max-steps" in out.stdout
        assert "vf-vllm --model" in out.stdout  # the docstring (how to start the server) is the description


# ---------------------------------------------------------------------------
# GRPO examples, with the trainer replaced by a recorder


class Recorder:
    """Stands in for vf.GRPOTrainer: keeps its arguments, trains nothing."""

    last: Recorder | None = None

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.trained = False
        self.saved_to = None
        Recorder.last = self

    def train(self):
        self.trained = True

    def save_model(self, path):
        self.saved_to = path


@pytest.fixture
def run_example(monkeypatch, tmp_path):
    """Run a GRPO example's main() in-process with a fake trainer and model loader; return the Recorder."""
    import verifiers as vf

    monkeypatch.chdir(tmp_path)  # outputs/ lands here
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(vf, "GRPOTrainer", Recorder)
    monkeypatch.setattr(
        vf, "get_model_and_tokenizer", lambda name, **kw: (f"model:{name}", f"tokenizer:{name}")
    )
    monkeypatch.setattr(vf, "setup_logging", lambda *a, **kw: None)

    def run(path: Path, *argv: str) -> Recorder:
        Recorder.last = None
        monkeypatch.setattr(sys, "argv", [str(path), *argv])
        runpy.run_path(str(path), run_name="__main__")
        assert Recorder.last is not None, "the script built no GRPOTrainer"
        return Recorder.last

    return run


@pytest.mark.parametrize("env_dir", ENV_DIRS)
def test_grpo_example_wiring(env_dir, run_example, smol_tokenizer):
    import verifiers as vf

    path = GRPO_SCRIPTS[env_dir]
    rec = run_example(path, "--model", "some/model", "--port", "8123", "--max-steps", "3")
    kw = rec.kwargs
    args, env, peft = kw["args"], kw["env"], kw["peft_config"]
    assert isinstance(args, vf.GRPOConfig)
    assert isinstance(env, vf.Environment) and len(env.get_dataset()) > 0
    assert kw["model"] == "model:some/model" and kw["processing_class"] == "tokenizer:some/model"
    assert rec.trained and rec.saved_to == args.output_dir
    assert args.run_name == env_id(env_dir) and args.output_dir == f"outputs/{env_id(env_dir)}"
    assert args.max_steps == 3
    assert (args.vllm_server_host, args.vllm_server_port) == ("127.0.0.1", 8123)
    assert peft is not None and peft.r == 8
    if env_dir == "reverse_text":  # trains on the environment's own rubric (it credits untagged reversals)
        assert env.rubric.get_reward_func_names() == ["lcs_reward", "format_reward_func"]
    # CPU-friendly: one step is a handful of prompts, no reference model, nothing reported remotely
    assert args.per_device_train_batch_size * args.gradient_accumulation_steps <= 64
    assert args.beta == 0.0 and args.report_to in ("none", [], ["none"])

    doc = docstring(path)
    flags = server_flags(doc)
    assert int(flags["--max-lora-rank"]) >= peft.r, "the server must accept the adapter's rank"
    assert int(flags["--max-model-len"]) >= args.max_seq_len, "the server must fit a whole rollout"
    assert "--enable-lora" in flags
    assert "--no-enable-chunked-prefill" in flags  # vLLM-CPU crashes on split prompts of seeded requests
    for cmd in vf_rl_commands(doc):
        if "--inference.gpus" in cmd:  # a CPU variant
            assert "--inference.args.no_enable_chunked_prefill" in cmd
    if env.oai_tools:
        assert flags.get("--enable-auto-tool-choice") == "" and flags.get("--tool-call-parser") == "hermes"
        assert "chat template" in doc and "SmolLM2" in doc  # says what a small model can and cannot do
    else:
        assert "--tool-call-parser" not in flags
    assert f"vf-install {env_id(env_dir)}" in doc
    commands = vf_rl_commands(doc)
    # the environment's config, or its CPU recipe where the main one is a GPU recipe (reverse-text)
    recipes = {f"configs/vf-rl/{env_id(env_dir)}.toml", f"configs/vf-rl/{env_id(env_dir)}-cpu.toml"}
    assert commands and all(c[2] in recipes for c in commands)
    assert (ROOT / commands[0][2]).is_file()

    # the first prompts fit max_prompt_length with SmolLM2's chat template (tools included when it shows them)
    for row in env.get_dataset().select(range(4)):
        ids = smol_tokenizer.apply_chat_template(
            row["prompt"], tools=env.oai_tools, add_generation_prompt=True
        )
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        assert len(ids) <= args.max_prompt_length


def test_grpo_defaults_flags(run_example):
    """With no flags: the local SmolLM2 and port 8000."""
    rec = run_example(GRPO_SCRIPTS["reverse_text"])
    assert rec.kwargs["model"] == "model:smollm2"
    assert rec.kwargs["args"].vllm_server_port == 8000
    assert rec.kwargs["args"].max_steps > 0


# ---------------------------------------------------------------------------
# examples/sft.py: data handling


@pytest.fixture(scope="module")
def sft():
    spec = importlib.util.spec_from_file_location("vf_example_sft", EXAMPLES / "sft.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rollout(reward=1.0, error=None, turns=1):
    completion = []
    for t in range(turns):
        completion.append({"role": "assistant", "content": f"answer {t}"})
        if t < turns - 1:
            completion.append({"role": "user", "content": f"feedback {t}"})
    return {
        "prompt": [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}],
        "completion": completion,
        "answer": "a",
        "reward": reward,
        "error": error,
    }


def test_sft_rollout_filtering(sft):
    assert len(sft.to_examples(rollout(), None)) == 1
    assert sft.to_examples(rollout(reward=0.2), 0.5) == []
    assert len(sft.to_examples(rollout(reward=0.5), 0.5)) == 1
    assert sft.to_examples(rollout(error="ServerError: boom"), None) == []


def test_sft_multi_turn_rollout_becomes_one_example_per_assistant_turn(sft):
    examples = sft.to_examples(rollout(turns=3), None)
    assert [ex["completion"] for ex in examples] == [
        [{"role": "assistant", "content": f"answer {t}"}] for t in range(3)
    ]
    # the conversation before each turn is the prompt: environment messages are context, never targets
    assert [len(ex["prompt"]) for ex in examples] == [2, 4, 6]
    assert examples[2]["prompt"][-1] == {"role": "user", "content": "feedback 1"}


def test_sft_tool_calls_are_kept_and_none_content_is_emptied(sft):
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 1}'}}
    row = rollout()
    row["completion"] = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "2"},
        {"role": "assistant", "content": "3"},
    ]
    first, second = sft.to_examples(row, None)
    assert first["completion"] == [{"role": "assistant", "content": "", "tool_calls": [call]}]
    assert second["prompt"][-1] == {"role": "tool", "content": "2", "tool_call_id": "c1"}


def test_sft_dataset_columns(sft):
    assert sft.to_examples({"prompt": "2+2=", "completion": "4"}, None) == [
        {"prompt": "2+2=", "completion": "4"}
    ]
    assert sft.to_examples({"text": "hello"}, None) == [{"text": "hello"}]
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert sft.to_examples({"messages": msgs}, None) == [{"messages": msgs}]
    (qa,) = sft.to_examples({"question": "2+2?", "answer": 4}, None)
    assert qa == {
        "prompt": [{"role": "user", "content": "2+2?"}],
        "completion": [{"role": "assistant", "content": "4"}],
    }
    with pytest.raises(SystemExit, match="cannot read rows with columns"):
        sft.to_examples({"foo": 1}, None)


def test_sft_load_rows(sft, tmp_path):
    rows = [rollout(), {**rollout(), "info": {"extra": [1, 2]}}]  # differing info: read line by line
    run = tmp_path / "evals" / "reverse-text--some-model" / "ab12cd34"
    run.mkdir(parents=True)
    (run / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert sft.load_rows(str(run), "train") == rows
    assert sft.load_rows(str(run / "results.jsonl"), "train") == rows
    assert sft.data_name(str(run)) == "reverse-text--some-model-ab12cd34"
    assert sft.data_name(str(run / "results.jsonl")) == "reverse-text--some-model-ab12cd34"

    from datasets import Dataset

    qa = [{"question": "q1", "answer": "a1"}, {"question": "q2", "answer": "a2"}]
    (tmp_path / "qa.json").write_text(json.dumps(qa))
    assert sft.load_rows(str(tmp_path / "qa.json"), "train") == qa
    Dataset.from_list(qa).save_to_disk(str(tmp_path / "saved"))
    assert sft.load_rows(str(tmp_path / "saved"), "train") == qa
    assert sft.data_name(str(tmp_path / "qa.json")) == "qa"
    with pytest.raises(SystemExit, match="expected a .jsonl"):
        (tmp_path / "data.txt").write_text("x")
        sft.load_rows(str(tmp_path / "data.txt"), "train")


# ---------------------------------------------------------------------------
# slow: real training runs (no vLLM)


def tool_test_reply(request: dict):
    """Call each tool named in the task (first turn), then say DONE."""
    if any(m["role"] == "assistant" for m in request["messages"]):
        return "DONE"
    task = next(m["content"] for m in request["messages"] if m["role"] == "user")
    names = re.findall(r"call `(\w+)`", task)
    return {
        "content": "",
        "tool_calls": [{"name": n, "arguments": {}, "id": f"c{i}"} for i, n in enumerate(names)],
    }


@pytest.mark.slow
def test_sft_trains_on_saved_tool_rollouts(tiny_model_dir, tmp_path):
    """2 steps on rollouts saved as `vf-eval -s` saves them (multi-turn, with tool calls); the output serves."""
    import asyncio

    import verifiers as vf
    from tests.doubles.openai_server import fake_server
    from verifiers.cli.eval import save_results

    # num_examples=0: the fake replies read the first user message as the task (no worked examples)
    env = vf.load_environment("tool-test", num_eval_examples=4, max_tools=2, num_examples=0)
    with fake_server(tool_test_reply) as server:
        results = asyncio.run(env.a_evaluate(server.client(), "fake-model", num_examples=4))
    run = save_results(results, {}, "tool-test", "fake-model", root=tmp_path / "evals")
    rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert any(m.get("tool_calls") for r in rows for m in r["completion"])
    turns = sum(m["role"] == "assistant" for r in rows for m in r["completion"] if not r.get("error"))

    out = tmp_path / "sft-out"
    cmd = [
        sys.executable, str(EXAMPLES / "sft.py"), str(run), "--model", str(tiny_model_dir),
        "--tools-from", "tool-test", "--lora", "--max-steps", "2", "--batch-size", "2",
        "--output-dir", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env=offline_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert f"{len(rows)} rows -> {turns} training examples" in proc.stdout
    assert {"config.json", "model.safetensors", "tokenizer_config.json"} <= {p.name for p in out.iterdir()}
    assert not (out / "adapter_config.json").exists(), "the LoRA adapter should be merged into a full model"
    assert json.loads((out / "config.json").read_text())["use_cache"] is True  # for generation elsewhere
    model, tokenizer = vf.get_model_and_tokenizer(str(out))
    assert model.num_parameters() > 0 and tokenizer.chat_template


class FakeVLLMClient:
    """The fake OpenAI server plus no-op weight-sync routes: enough for GRPOTrainer to run."""

    def __init__(self, server):
        self._oai = server.client(max_retries=3)
        self.model_name = server.model
        self.syncs = 0

    def __getattr__(self, name):
        return getattr(self._oai, name)

    def health(self, timeout=None):
        return {"model": self.model_name, "status": "ready"}

    def update_lora(self, tensors, name="vf-lora", config=None):
        self.syncs += 1
        return name

    def update_weights(self, named_tensors, **kw):
        list(named_tensors)
        self.syncs += 1

    def reset_prefix_cache(self):
        return True


@pytest.mark.slow
@pytest.mark.parametrize("env_dir", ENV_DIRS)
def test_grpo_example_trains_one_step(env_dir, tiny_model_dir, tmp_path, monkeypatch):
    """The unmodified example trains 1 step on the tiny model against the fake server and saves its adapter."""
    import verifiers as vf
    from tests.doubles.openai_server import FakeServer

    server = FakeServer().start()
    client = FakeVLLMClient(server)
    real = vf.GRPOTrainer

    made = []

    def trainer(**kw):
        kw["args"].max_concurrent = 8  # the fake server's listen backlog is small: few connections at once
        made.append(real(client=client, **kw))
        return made[-1]

    monkeypatch.setattr(vf, "GRPOTrainer", trainer)
    monkeypatch.setattr(vf, "setup_logging", lambda *a, **kw: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["x", "--model", str(tiny_model_dir), "--max-steps", "1"])
    try:
        runpy.run_path(str(GRPO_SCRIPTS[env_dir]), run_name="__main__")
    finally:
        server.stop()
    (t,) = made
    assert t.state.global_step == 1
    assert any("reward" in h and "loss" in h for h in t.state.log_history), t.state.log_history
    out = tmp_path / "outputs" / env_id(env_dir)
    assert (out / "adapter_config.json").is_file()
    assert client.syncs >= 2  # the initial push and one after the step
    assert any(path == "/v1/chat/completions" for path, _ in server.requests)


@pytest.mark.parametrize("env_dir", ENV_DIRS)
def test_vf_rl_commands_in_docstrings_validate(env_dir, monkeypatch, capsys):
    """Each `vf-rl @ ...` command a GRPO example shows passes vf-rl's own checks (--dry-run).

    In this process, through vf-rl's entry point (``main(argv)``), from the checkout as a user
    types it: a subprocess per command cost ~9 s of imports each (test_rl_cli runs the real process)."""
    from verifiers.cli.rl import plan

    monkeypatch.chdir(ROOT)
    for cmd in vf_rl_commands(docstring(GRPO_SCRIPTS[env_dir])):
        status = plan.main([*cmd[1:], "--dry-run"])
        out, err = capsys.readouterr()
        assert status == 0, f"{shlex.join(cmd)}\n{out[-1500:]}{err[-1500:]}"
        assert "\ninference: " in out and "\ntrainer: " in out, out
