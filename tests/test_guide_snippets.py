"""Every code block and command of the user guides runs as written (issue 23, deliverables 3 and 4).

The guides users follow (the training guide of 0.1.x, the vf-rl and prime-rl pages, the
RLTrainer tutorial) show Python blocks, TOML files and shell commands. Each block is
copied here as the guides print it and run: Python blocks are ``exec``'d, TOML files are
validated by vf-rl's own schema, commands are run through their entry points. A block
that needs a hosted service (the model hub, W&B, a GPU-only prime-rl checkout) is run up
to where that service is needed, and must fail there in one line that says so.

Tiers: blocks and commands (fast, no model); the trainer against ``tests/doubles/openai_server.py``
with the tiny model (a few seconds each): how many batches a run generates, a generation
batch smaller than an optimizer step, a rollout cut at ``max_completion_length``, and a
prompt that cannot fit refused when the trainer is built.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")

import verifiers as vf  # noqa: E402
from verifiers.cli import eval as vf_eval  # noqa: E402
from verifiers.cli import install as vf_install  # noqa: E402
from verifiers.cli import setup as vf_setup  # noqa: E402
from verifiers.cli.run_config import load as tc  # noqa: E402
from verifiers.errors import ConfigError  # noqa: E402
from verifiers.training.config.batch_layout import generation_plan, resolve_batch_layout  # noqa: E402
from verifiers.training.generation.producer import cap_completions, sampling_args_from_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text, text
    return text


# ---------------------------------------------------------------------------------------------
# The training guide's Python blocks (GRPOTrainer), each exactly as printed


BATCH_BLOCK = """
args = vf.grpo_defaults(run_name="experiment")

# Core batch settings
args.per_device_train_batch_size = 8    # Prompts per GPU per step
args.num_generations = 16               # Completions per prompt (group size)
args.gradient_accumulation_steps = 4    # Steps before optimizer update
"""

GENERATION_BLOCK = """
# Sampling configuration
args.max_tokens = 1024           # Max tokens per (turn-level) response
args.temperature = 1.0          # Higher = more diverse completions
args.top_p = 1.0               # Nucleus sampling threshold
args.top_k = None              # Top-k filtering (None = disabled)

# Length limits
args.max_prompt_length = 1024      # Truncate prompts (left-truncated)
args.max_completion_length = 2048  # Truncate completions
args.max_seq_len = 4096           # Model's context window
"""

SCHEDULE_BLOCK = """
# Optimization settings
args.learning_rate = 1e-6              # Conservative default
args.lr_scheduler_type = "constant_with_warmup"
args.warmup_steps = 10                 # Gradual warmup
args.max_steps = 500                   # Total training steps
args.num_iterations = 1                # PPO-style updates per batch

# Gradient control
args.max_grad_norm = 0.01              # Aggressive clipping for stability
"""

GRPO_BLOCK = """
# KL regularization
args.beta = 0.001                      # KL penalty coefficient
args.sync_ref_model = True             # Update reference model
args.ref_model_sync_steps = 100        # How often to sync
args.ref_model_mixup_alpha = 0.5       # Mix ratio for updates

# Loss configuration
args.loss_type = "dr_grpo"             # Recommended: no length bias
args.epsilon = 0.2                     # Clipping bound (lower)
args.delta = None                      # Optional upper clipping bound
"""

ASYNC_BLOCK = """
# Overlapped training and inference
args.num_batches_ahead = 1      # Batches to generate ahead
args.async_generation_timeout = 300.0  # Timeout in seconds
args.max_concurrent = 1024      # Max concurrent env requests
"""

EVAL_BLOCK = """
# Add evaluation dataset
args.eval_strategy = "steps"
args.eval_steps = 100
args.per_device_eval_batch_size = 16

# The environment can provide an eval dataset
env = vf.load_environment("math-python", eval_split="test")
"""

SAMPLING_BLOCK = """
# Fine-grained generation control
args.repetition_penalty = 1.1   # Reduce repetition
args.top_k = 50                # Limit vocabulary
args.min_p = 0.05              # Min probability threshold
"""

RESOURCE_BLOCK = """
# Memory-constrained settings
args.gradient_checkpointing = True
args.ds3_gather_for_generation = False  # For very large models
args.generation_batch_size = 16  # Control generation batch size
"""

MONITORING_BLOCK = """
# Logging configuration
args.logging_steps = 1
args.log_completions = True
args.report_to = "wandb"  # or "none" to disable
args.num_completions_to_print = 5  # Sample size to log
"""

GUIDE_BLOCKS = {
    "generation": GENERATION_BLOCK,
    "schedule": SCHEDULE_BLOCK,
    "grpo": GRPO_BLOCK,
    "async": ASYNC_BLOCK,
    "eval": EVAL_BLOCK,
    "sampling": SAMPLING_BLOCK,
    "resources": RESOURCE_BLOCK,
    "monitoring": MONITORING_BLOCK,
}


def run_blocks(*blocks: str) -> dict:
    scope = {"vf": vf}
    for block in blocks:
        exec(textwrap.dedent(block), scope)
    scope["args"] = scope["args"].resolve()  # what GRPOTrainer trains with
    return scope


@pytest.mark.parametrize("name", sorted(GUIDE_BLOCKS))
def test_each_guide_block_on_top_of_the_batch_block(name):
    run_blocks(BATCH_BLOCK, GUIDE_BLOCKS[name])


def test_every_guide_block_together():
    args = run_blocks(BATCH_BLOCK, *GUIDE_BLOCKS.values())["args"]
    # Two limits, not one under two names: per turn, and the whole rollout's completion.
    assert (args.max_tokens, args.max_completion_length, args.max_seq_len) == (1024, 2048, 4096)
    sampling = sampling_args_from_config(args)
    assert sampling["max_tokens"] == 1024 and sampling["max_completion_length"] == 2048
    assert (sampling["top_k"], sampling["min_p"], sampling["repetition_penalty"]) == (50, 0.05, 1.1)
    # 8 per device × 4 accumulation = 32 per optimizer step, generated 16 at a time.
    assert (args.generation_batch_size, args.steps_per_generation) == (16, 2)
    assert generation_plan(16, 2, 4) == generation_plan(
        args.generation_batch_size, args.steps_per_generation, args.gradient_accumulation_steps
    )


def test_a_rollout_cap_below_the_per_turn_limit_bounds_every_turn():
    args = run_blocks(BATCH_BLOCK, "args.max_tokens = 1024\nargs.max_completion_length = 256\n")["args"]
    assert sampling_args_from_config(args)["max_tokens"] == 256


# ---------------------------------------------------------------------------------------------
# generation_batch_size: a generation batch may be smaller or larger than an optimizer step


def test_generation_batch_layouts():
    # The guide's sizes on one process: 8 per micro-step, 4 micro-steps per optimizer step.
    sizes = dict(
        per_device_train_batch_size=8, num_processes=1, gradient_accumulation_steps=4, num_generations=16
    )
    assert resolve_batch_layout(**sizes, generation_batch_size=16) == (16, 2)
    plan = generation_plan(16, 2, 4)
    assert (plan.rounds, plan.micro_steps, plan.samples) == (2, 4, 32)  # a step in 2 rounds of 16
    assert resolve_batch_layout(**sizes, generation_batch_size=32) == (32, 4)
    assert generation_plan(32, 4, 4) == generation_plan(32, 4, 4).__class__(1, 4, 32)
    assert resolve_batch_layout(**sizes, generation_batch_size=64) == (64, 8)  # two steps per batch
    assert generation_plan(64, 8, 4).micro_steps == 8
    assert resolve_batch_layout(**sizes, steps_per_generation=2) == (16, 2)
    with pytest.raises(ConfigError) as err:  # 3 micro-steps neither divide nor multiply 4
        resolve_batch_layout(**sizes, generation_batch_size=24)
    assert "generation_batch_size=24 is neither a multiple nor a whole fraction" in one_line(err.value)
    assert "use one of 8, 16, 32" in err.value.hint
    with pytest.raises(ConfigError, match="does not hold whole groups of num_generations=16"):
        resolve_batch_layout(**sizes, generation_batch_size=8)


def test_producer_generates_a_step_in_rounds_of_the_generation_batch():
    import asyncio

    from tests.doubles.generation import DATASET, FakeEnv
    from verifiers.training.generation.producer import PromptStream, RolloutProducer

    env = FakeEnv()
    producer = RolloutProducer(
        env, None, "m", DATASET, PromptStream(len(DATASET), shuffle=False),
        num_prompts=4, chunk_prompts=2, num_generations=2,
    )  # fmt: skip
    batch = asyncio.run(producer.produce(0, 0))
    assert [c["n"] for c in env.calls] == [4, 4]  # 2 prompts × 2 completions per round
    assert batch.outputs.prompt == [p for p in ("p00", "p01", "p02", "p03") for _ in range(2)]


# ---------------------------------------------------------------------------------------------
# max_completion_length: a cap on the whole completion of a rollout


def _processed(lengths, truncated=None):
    return vf.ProcessedOutputs(
        prompt_ids=[[1, 2]] * len(lengths),
        prompt_mask=[[1, 1]] * len(lengths),
        completion_ids=[list(range(n)) for n in lengths],
        completion_mask=[[1] * n for n in lengths],
        completion_logprobs=[[-0.5] * n for n in lengths],
        rewards=[1.0] * len(lengths),
        rollout_index=list(range(len(lengths))),
        is_truncated=list(truncated or [False] * len(lengths)),
        metrics={"truncated": 0.0},
    )


def test_cap_completions_cuts_and_marks_truncated():
    out = cap_completions(
        _processed([3, 8]), 5, mask_truncated_completions=False, zero_truncated_completions=True
    )
    assert [len(c) for c in out.completion_ids] == [3, 5] and out.is_truncated == [False, True]
    assert out.rewards == [1.0, 0.0] and out.completion_mask[1] == [1] * 5 and out.metrics["truncated"] == 1.0
    out = cap_completions(
        _processed([8]), 5, mask_truncated_completions=True, zero_truncated_completions=False
    )
    assert (
        out.completion_mask == [[0] * 5] and out.completion_logprobs == [[0.0] * 5] and out.rewards == [1.0]
    )
    same = _processed([8])
    assert (
        cap_completions(same, None, mask_truncated_completions=True, zero_truncated_completions=True) is same
    )
    assert len(same.completion_ids[0]) == 8


class ChattyEnv(vf.MultiTurnEnv):
    """Never done by itself: the environment answers every model turn."""

    async def is_completed(self, messages, state, **kwargs):
        return False

    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": "go on"}], state


def test_multiturn_rollout_stops_at_max_completion_length():
    import asyncio

    from tests.doubles.openai_server import FakeServer
    from verifiers.envs.multiturn import _completion_tokens

    rows = {"question": ["start"], "answer": [""]}
    env = ChattyEnv(max_turns=50, dataset=datasets.Dataset.from_dict(rows), rubric=vf.Rubric(funcs=[]))
    with FakeServer(reply=lambda body: "ab") as server:  # 9 tokens a turn (one per byte, end mark included)
        prompt = [{"role": "user", "content": "start"}]
        sampling = {"max_tokens": 16, "max_completion_length": 100}
        _, state = asyncio.run(env.rollout(server.client(), "m", prompt, sampling_args=sampling))
        bodies = [b for p, b in server.requests if p.endswith("/chat/completions")]
    assert state["is_truncated"] and 1 < state["turn"] < 50
    used_before_last = _completion_tokens(state["turn_tokens"][:-1])
    assert used_before_last < 100 <= _completion_tokens(state["turn_tokens"])
    assert all("max_completion_length" not in json.dumps(b) for b in bodies)  # never sent to the server
    limits = [b.get("max_completion_tokens", b.get("max_tokens")) for b in bodies]
    turns = state["turn_tokens"]
    # Each turn asks for the per-turn limit, or what is left of the rollout's budget if less.
    assert limits == [16] + [min(16, 100 - _completion_tokens(turns[:k])) for k in range(1, len(turns))]
    assert limits[-1] < 16


# ---------------------------------------------------------------------------------------------
# Environments, install, setup, endpoints, import paths, docs


def test_math_python_loads_with_the_guides_arguments():
    env = vf.load_environment("math-python", eval_split="test")
    assert len(env.get_eval_dataset()) == 50 and len(env.get_dataset()) == 1000
    with pytest.raises(ConfigError, match="eval_split must be one of"):
        vf.load_environment("math-python", eval_split="validation")


def test_vf_install_from_repo_takes_the_bundled_environment(monkeypatch, tmp_path, capsys):
    """`uv run vf-install vf-math-python --from-repo`: the 0.1.x name of the bundled math-python."""
    installed = []
    monkeypatch.chdir(tmp_path)  # no ./environments here: --from-repo reads the checkout's
    monkeypatch.setattr(
        vf_install, "install_environment", lambda folder, no_deps=False: installed.append(folder)
    )
    assert vf_install.main(["vf-math-python", "--from-repo"]) == 0
    assert installed == [ROOT / "environments" / "math_python"]
    assert vf.load_environment("vf-math-python", num_train_examples=4).get_dataset().num_rows == 4
    # Without a checkout's environments/ (a wheel install): one line, nothing downloaded.
    monkeypatch.setattr(vf_install, "BUNDLED_DIR", tmp_path / "none")
    assert vf_install.main(["vf-math-python", "--from-repo"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(err) == 1 and "nothing is downloaded" in err[0]


def test_vf_setup_writes_the_tutorials_workspace(monkeypatch, tmp_path, capsys):
    """`prime lab setup --vf-rl` / `uv run vf-setup`: the tutorial's tree, every file usable."""
    monkeypatch.chdir(tmp_path)
    assert vf_setup.main([]) == 0
    assert vf_setup.main(["--vf-rl"]) == 0  # the tutorial's flag: the same workspace, kept as is
    for name in ("alphabet-sort", "gsm8k", "math-python", "reverse-text", "wiki-search", "wordle"):
        assert (tmp_path / "configs" / "vf-rl" / f"{name}.toml").is_file()  # the tutorial's list
    assert (tmp_path / "environments" / "AGENTS.md").read_text().startswith("# Environments")
    from verifiers.cli.common import load_endpoints

    monkeypatch.delenv("PRIME_API_KEY", raising=False)
    endpoints = load_endpoints(tmp_path / "configs" / "endpoints.py")
    assert endpoints["default"]["url"] == "https://api.primeintellect.ai/v1"
    for path in (tmp_path / "configs" / "vf-rl").glob("*.toml"):
        tc.load_config(path)


def test_vf_setup_prime_rl_has_the_guides_sections(monkeypatch, tmp_path, capsys):
    """`vf-setup --prime-rl`: the guide's prime-rl config for wiki-search, section by section."""
    monkeypatch.chdir(tmp_path)
    assert vf_setup.main(["--prime-rl"]) == 0
    assert "prime-rl itself is not installed by vf-setup (it needs a download)" in capsys.readouterr().out
    cfg = tc.tomllib.loads((tmp_path / "configs" / "prime-rl" / "wiki-search.toml").read_text())
    assert (cfg["inference_gpu_ids"], cfg["trainer_gpu_ids"]) == ([0], [1])
    assert cfg["inference"]["model"]["enable_auto_tool_choice"] is True
    assert cfg["inference"]["model"]["tool_call_parser"] == "hermes"
    orch = cfg["orchestrator"]
    assert orch["buffer"] == {"type": "online-difficulty", "oversampling_factor": 2.0}
    assert {"mask_truncated_completions", "zero_truncated_completions", "seq_len"} <= set(orch)
    assert orch["sampling"]["max_tokens"] == 512 and orch["env"][0]["id"] == "primeintellect/wiki-search"
    assert set(cfg["trainer"]["model"]["experimental"]["lora"]) == {
        "rank",
        "alpha",
        "dropout",
        "target_modules",
    }
    assert {"lr", "weight_decay"} <= set(cfg["trainer"]["optim"])


PRIME_RL_GUIDE_TOML = """
inference_gpu_ids = [0]
trainer_gpu_ids = [1]

max_steps = 500

[model]
name = "Qwen/Qwen3-4B-Instruct-2507"

[wandb]
project = "wiki-search"
name = "wiki-search-4b"

[trainer.optim]
lr = 1e-5
weight_decay = 0.0

[trainer.model.experimental.lora]
rank = 8
alpha = 32
dropout = 0.0
target_modules = [
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj"
]

[orchestrator]
batch_size = 512
rollouts_per_example = 16
seq_len = 4096
mask_truncated_completions = false
zero_truncated_completions = true

[orchestrator.sampling]
max_tokens = 512

[orchestrator.buffer]
type = "online-difficulty"
oversampling_factor = 2.0

[[orchestrator.env]]
id = "primeintellect/wiki-search"

[inference.model]
enable_auto_tool_choice = true
tool_call_parser = "hermes"
"""


def _key_paths(table: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, value in table.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict):
            out |= _key_paths(value, path + ".")
        elif isinstance(value, list) and value and isinstance(value[0], dict):
            for item in value:
                out |= _key_paths(item, path + "[].")
        else:
            out.add(path)
    return out


def test_vf_setup_prime_rl_writes_every_key_of_the_guides_config(tmp_path):
    """Every key of the guide's prime-rl config is in ours (W&B only when the vf-rl config names a project)."""
    guide = _key_paths(tc.tomllib.loads(PRIME_RL_GUIDE_TOML))
    example = vf_setup.example_configs()["wiki-search"].replace(
        'run_name = "wiki-search"',
        'run_name = "wiki-search"\nreport_to = "wandb"\nwandb_project = "wiki-search"\n'
        'wandb_name = "wiki-search-4b"',
    )
    ours = _key_paths(tc.tomllib.loads(vf_setup.prime_rl_toml(example)))
    assert guide <= ours, sorted(guide - ours)


def test_the_0_1_x_guides_init_and_lora_lines(tmp_path, monkeypatch):
    """`uv run vf-init vf-custom-environment` and `peft_config=vf.lora_defaults(r=8, alpha=16)`."""
    from verifiers.cli import init as vf_init

    monkeypatch.chdir(tmp_path)
    assert vf_init.main(["vf-custom-environment"]) == 0
    assert (tmp_path / "environments" / "vf_custom_environment" / "pyproject.toml").is_file()
    config = vf.lora_defaults(r=8, alpha=16)
    assert (config.r, config.lora_alpha) == (8, 16)


def test_an_unset_key_breaks_only_the_endpoint_that_uses_it(monkeypatch, tmp_path, capsys):
    """The tutorial's endpoints.py (api_key=os.getenv(...)) with the variable unset."""
    from tests.doubles.openai_server import fake_server
    from verifiers.cli.common import resolve_endpoint

    monkeypatch.delenv("PRIME_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    with fake_server(reply=lambda body: "ok") as server:
        (tmp_path / "configs" / "endpoints.py").write_text(
            "import os\n\nENDPOINTS = {\n"
            '    "default": {"base_url": "https://api.primeintellect.ai/v1", "api_key": os.getenv("PRIME_API_KEY")},\n'
            f'    "local": {{"model": "m", "base_url": "{server.url}"}},\n'
            "}\n"
        )
        assert resolve_endpoint("local", None, None, None).base_url == server.url
        with pytest.raises(ConfigError) as err:
            resolve_endpoint("default", None, None, None)
        assert "endpoint 'default'" in one_line(err.value) and "api_key=None" in str(err.value)
        rc = vf_eval.main(["reverse-text", "-m", "local", "-n", "1", "-r", "1"])
        assert rc == 0, capsys.readouterr().err
    rc = vf_eval.main(["reverse-text", "-m", "default", "-n", "1", "-r", "1"])
    err_lines = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert rc == 2 and len(err_lines) == 1 and "api_key=None" in err_lines[0]


def test_the_guides_import_path():
    from verifiers.rl.trainer import RLConfig, RLTrainer
    from verifiers.rl.trainer.orchestrator import BatchGenerator, RolloutProducer
    from verifiers.rl.trainer.trainer import GRPOTrainer

    assert RLTrainer is vf.RLTrainer and RLConfig is vf.RLConfig and GRPOTrainer is vf.GRPOTrainer
    assert BatchGenerator.__module__ == "verifiers.training.generation.generator"
    assert RolloutProducer.__module__ == "verifiers.training.generation.producer"
    # The guide's files in verifiers/rl/trainer/ are old paths now, served by verifiers.compat;
    # docs/architecture.md says where their code lives.
    from verifiers.compat import OLD_PATHS

    assert {"verifiers.rl.trainer.trainer", "verifiers.rl.trainer.orchestrator"} <= OLD_PATHS
    assert "verifiers.rl.trainer" in (ROOT / "docs" / "architecture.md").read_text()


def test_rlconfig_defaults_and_stop_as_the_tutorial_says():
    rl = vf.RLConfig()
    assert rl.max_tokens == 512  # "max_tokens = 256  # Max tokens per completion (default: 512)"
    assert vf.RLConfig(max_seq_len=512).max_tokens is None  # the default would not fit: no per-turn limit
    grpo = vf.RLConfig(stop=["</answer>"]).to_grpo_config()
    assert sampling_args_from_config(grpo)["stop"] == ["</answer>"]
    assert sampling_args_from_config(vf.GRPOConfig(output_dir="/tmp/x", report_to="none", stop="\n\n"))[
        "stop"
    ] == ["\n\n"]
    with pytest.raises(ConfigError, match="stop=.* must be a list of non-empty strings"):
        vf.GRPOConfig(output_dir="/tmp/x", report_to="none", stop=[""])


def test_docs_the_guides_link_exist_and_name_real_things():
    import re

    for page in ("components.md", "reference.md"):
        text = (ROOT / "docs" / page).read_text()
        for link in re.findall(r"\]\(([^)#:]+\.md)", text):  # relative links resolve
            assert (ROOT / "docs" / link).is_file(), f"{page} links {link}"
        for name in set(re.findall(r"`vf\.(\w+)", text)):  # every vf.X it names exists
            assert hasattr(vf, name), f"{page} names vf.{name}"
    # (tests/test_docs.py runs their Python blocks and checks the commands they name)


# ---------------------------------------------------------------------------------------------
# The guides' TOML files, validated by vf-rl's schema


VF_RL_GUIDE_TOML = """
model = "Qwen/Qwen3-4B-Instruct-2507"

[env]
id = "primeintellect/wiki-search"

[env.args]
max_turns = 10

[inference]
gpus = 1

[inference.args]
enable_auto_tool_choice = true
tool_call_parser = "hermes"

[trainer]
gpus = 1

[trainer.args]
run_name = "wiki-search"
micro_batch_size = 4
rollouts_per_example = 16
batch_size = 1024
max_steps = 500
max_tokens = 512
max_seq_len = 4096
"""

TUTORIAL_TOML = """
model = "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT"

[env]
id = "primeintellect/reverse-text"

[inference]
gpus = 1

[inference.args]
enforce_eager = true

[trainer]
gpus = 1

[trainer.args]
run_name = "reverse-text"
micro_batch_size = 16
rollouts_per_example = 16
batch_size = 128
max_steps = 100
max_tokens = 128
max_seq_len = 512
"""

# The tutorial's [trainer.args] snippets, each added to its reverse-text config.
TUTORIAL_SNIPPETS = [
    "micro_batch_size = 8      # Reduce from 16\nbatch_size = 64           # Reduce from 128\n"
    "rollouts_per_example = 8  # Reduce from 16",
    "temperature = 0.8        # Lower = more deterministic (default: 1.0)\n"
    "top_p = 0.9             # Nucleus sampling threshold (default: 1.0)\n"
    "max_tokens = 256        # Max tokens per completion (default: 512)",
    "use_lora = false\nlearning_rate = 1e-6    # Use lower LR for full finetuning",
    'learning_rate = 1e-5\nlr_scheduler_type = "cosine"  # Options: constant, linear, cosine\n'
    "warmup_steps = 10             # Gradual LR increase at start",
    "micro_batch_size = 4  # Reduce from 16",
    "max_seq_len = 1024  # Reduce from 2048",
    "gradient_checkpointing = true",
    "use_lora = true",
    "learning_rate = 5e-6  # Reduce from 1e-5",
    "rollouts_per_example = 32  # Increase from 16",
    "batch_size = 256  # Increase from 128",
    "rollouts_per_example = 8  # Reduce from 16",
    "batch_size = 64  # Reduce from 128",
    "max_tokens = 128  # Reduce from 512",
    "vllm_server_port = 8001",
    "vllm_server_timeout = 600.0  # Increase from 300.0",
    "learning_rate = 2e-5  # Increase from 1e-5",
    "temperature = 1.2  # Increase from 1.0",
]


def _config(tmp_path, text: str):
    path = tmp_path / "cfg.toml"
    path.write_text(text)
    return tc.load_config(path)


def test_the_guides_vf_rl_config_validates(tmp_path):
    config = _config(tmp_path, VF_RL_GUIDE_TOML)
    rl = config.rl_config()
    grpo = rl.to_grpo_config()
    assert (grpo.per_device_train_batch_size, grpo.gradient_accumulation_steps, grpo.num_generations) == (
        4,
        256,
        16,
    )
    assert config.inference.args["tool_call_parser"] == "hermes" and config.envs[0].args == {"max_turns": 10}


@pytest.mark.parametrize("snippet", TUTORIAL_SNIPPETS, ids=range(len(TUTORIAL_SNIPPETS)))
def test_each_tutorial_snippet_validates(tmp_path, snippet):
    base = TUTORIAL_TOML.replace("max_seq_len = 512\n", "")
    keys = {line.split("=")[0].strip() for line in snippet.splitlines()}
    kept = "\n".join(line for line in base.splitlines() if line.split("=")[0].strip() not in keys)
    config = _config(tmp_path, kept + "\n" + snippet + "\n")
    config.rl_config().to_grpo_config()


def test_the_tutorials_wandb_block_validates(tmp_path):
    text = (
        TUTORIAL_TOML
        + 'report_to = "wandb"\n\n[trainer.args.wandb]\nproject = "reverse-text-tutorial"\nname = "my-first-run"\n'
    )
    rl = _config(tmp_path, text).rl_config()
    assert rl.wandb_environment() == {"WANDB_PROJECT": "reverse-text-tutorial", "WANDB_NAME": "my-first-run"}


def test_the_hub_model_of_the_quick_start_fails_in_one_line_offline(monkeypatch):
    """`vf.get_model_and_tokenizer("Qwen/Qwen2.5-1.5B-Instruct")` needs the model hub (a hosted service)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(Exception) as err:
        vf.get_model_and_tokenizer("Qwen/Qwen2.5-1.5B-Instruct-not-cached-here")
    assert "\n" not in str(err.value).strip() and "Qwen2.5-1.5B-Instruct-not-cached-here" in str(err.value)


# ---------------------------------------------------------------------------------------------
# The trainer against the fake server: nothing wasted or late


@pytest.fixture
def counted(monkeypatch):
    """Counts the batches the producer generates (every batch the trainer could have trained)."""
    from verifiers.training.generation import producer as P

    made: list[int] = []
    real = P.RolloutProducer.produce

    async def produce(self, index, policy_version):
        made.append(index)
        return await real(self, index, policy_version)

    monkeypatch.setattr(P.RolloutProducer, "produce", produce)
    return made


@pytest.mark.parametrize("ahead", [0, 1])
def test_no_batch_is_generated_past_the_last_step(tiny_model_dir, tmp_path, counted, ahead):
    from tests.doubles.openai_server import FakeServer
    from tests.doubles.trainer import RecordingClient, grpo_args, make_trainer, reply_of

    with FakeServer(reply=reply_of) as server:
        args = grpo_args(tmp_path, max_steps=2, num_batches_ahead=ahead, cpu_phases="overlap")
        trainer = make_trainer(tiny_model_dir, RecordingClient(server), args)
        trainer.train()
    assert trainer.state.global_step == 2
    assert sorted(counted) == [0, 1]  # 2 steps, 2 batches generated and scored: none past the end


def test_a_step_generated_in_rounds_trains(tiny_model_dir, tmp_path, counted):
    """generation_batch_size half an optimizer step (the guide's Resource Optimization block), and
    the rollout cap below the per-turn limit: each step is generated in two rounds, from one policy."""
    from tests.doubles.openai_server import FakeServer
    from tests.doubles.trainer import RecordingClient, grpo_args, make_trainer, reply_of

    with FakeServer(reply=reply_of) as server:
        args = grpo_args(tmp_path, max_steps=2, generation_batch_size=4, max_completion_length=6)
        assert (args.generation_batch_size, args.steps_per_generation, args.gradient_accumulation_steps) == (
            4,
            1,
            2,
        )
        trainer = make_trainer(tiny_model_dir, RecordingClient(server), args)
        trainer.train()
        chats = [b for p, b in server.requests if p.endswith("/chat/completions")]
    assert trainer.state.global_step == 2 and sorted(counted) == [0, 1]  # one trained batch per step
    assert len(chats) == 2 * 8  # 2 steps × 2 prompts × 4 completions, in rounds of one prompt
    assert {b.get("max_completion_tokens", b.get("max_tokens")) for b in chats} == {6}
    assert all("max_completion_length" not in b for b in chats)


def test_a_prompt_that_cannot_fit_is_refused_when_the_trainer_is_built(tiny_model_dir, tmp_path):
    from tests.doubles.trainer import grpo_args

    def search(query: str) -> str:
        """Search the wiki for a query and return the best matching passages, ranked by relevance.

        Args:
            query: what to look for; a few words work best, e.g. the name of a person or a place.
        """
        return query

    rows = {"question": ["who?"], "answer": [""]}
    env = vf.ToolEnv(tools=[search], dataset=datasets.Dataset.from_dict(rows), rubric=vf.Rubric(funcs=[]))
    model, tokenizer = vf.get_model_and_tokenizer(str(tiny_model_dir))
    args = grpo_args(tmp_path, max_prompt_length=16)
    with pytest.raises(ConfigError) as err:
        vf.GRPOTrainer(model=model, processing_class=tokenizer, env=env, args=args, client=object())
    line = one_line(err.value)
    assert "max_prompt_length=16 cannot fit any prompt" in line and "tool schema(s) take" in line
    assert "raise max_prompt_length" in err.value.hint
