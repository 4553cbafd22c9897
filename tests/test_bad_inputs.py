"""Bad input, table-driven: one clear line naming the problem and the fix, and nothing left behind.

Every row of ``CASES`` is one bad input to one entry point:

* ``api`` rows call Python (``GRPOConfig``, ``RLConfig``, environments, datasets,
  ``load_environment``) and expect a typed :class:`~verifiers.errors.VerifiersError`
  whose message is one line.
* ``cli`` rows call a console script's ``main(argv)`` in-process, in an empty
  working folder: exit status 2, exactly one ``error:`` line on stderr, no traceback.

Each row names a ``problem`` and a ``fix`` (regular expressions) that the line must
contain, and after each row the working folder (and any ``output_dir``) holds
exactly what it held before: no results folder, no half-written package.

``SERVER_CASES`` send bad requests to a real ``vf-vllm`` (tiny model, bound off
loopback with an admin token; marked ``server``): each answers a 4xx with a one-line
JSON error, and the server is left serving, unpaused, with no update in progress.
``test_real_process`` runs a few of the CLIs as real processes to prove the exit
status and the absence of a traceback outside pytest.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.doubles.openai_server import fake_server, unused_url
from verifiers.errors import (
    ConfigError,
    DatasetFormatError,
    EnvironmentArgsError,
    EnvironmentNotFoundError,
    VerifiersError,
)

ROOT = Path(__file__).resolve().parents[1]
REVERSE_TEXT_DIR = ROOT / "environments" / "reverse_text"
MODS = "mods"  # folder (in the case's working folder) for throwaway environment modules

TOML = """\
model = "smollm2"

[env]
id = "reverse-text"

[inference]
gpus = 0

[trainer]
gpus = 0

[trainer.args]
run_name = "rt"
rollouts_per_example = 4
micro_batch_size = 4
batch_size = 16
max_steps = 3
"""


# -- the table ------------------------------------------------------------------------------


@dataclass
class Case:
    """One bad input. ``call`` is ``(cli, argv)`` for a CLI, or ``fn(workdir)`` for the Python API."""

    id: str
    area: str  # config | toml | dataset | env-args | cli
    call: Any
    problem: str  # regex the line must contain
    fix: str  # regex the line must contain
    error: type[VerifiersError] = ConfigError  # api rows: the typed error expected
    setup: Callable[[Path], None] | None = None  # writes files into the working folder first
    patch: Callable[[pytest.MonkeyPatch], None] | None = None
    marks: Sequence[Any] = field(default_factory=tuple)


def cli(name: str, *argv: str | Callable[[], str]) -> tuple[str, tuple]:
    return (name, argv)


def write(rel: str, text: str) -> Callable[[Path], None]:
    def setup(workdir: Path) -> None:
        path = workdir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))

    return setup


def env_module(name: str, body: str) -> Callable[[Path], None]:
    """An importable environment module ``name`` in the working folder's ``mods/``."""
    return write(f"{MODS}/{name}.py", "import verifiers as vf\n" + textwrap.dedent(body))


def toml(replace: dict[str, str] | None = None, append: str = "") -> Callable[[Path], None]:
    text = TOML
    for old, new in (replace or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    return write("cfg.toml", text + append)


def grpo(workdir: Path, **kw: Any):
    from verifiers.training.config.fields import GRPOConfig

    return GRPOConfig(output_dir=str(workdir / "out"), report_to="none", use_cpu=True, **kw)


def rl(**kw: Any):
    from verifiers.training.rl.config import RLConfig

    return RLConfig(output_dir="out", **kw)


def single_turn(**kw: Any):
    import verifiers as vf

    return vf.SingleTurnEnv(**kw)


def dataset(**columns: list) -> Any:
    from datasets import Dataset

    return Dataset.from_dict(columns)


def failing_readme_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """The disk fills up while vf-init writes its last file."""
    real = Path.write_text

    def write_text(self, *args, **kwargs):
        if self.name == "README.md" and "environments" in self.parts:
            raise OSError(28, "No space left on device", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)


def all_rollouts_fail_url() -> str:
    server = fake_server(reply=lambda req: {"status": 404, "error": "The model `nope` does not exist."})
    srv = server.__enter__()
    _OPEN_SERVERS.append(server)
    return srv.url


_OPEN_SERVERS: list[Any] = []
BAD_EXT = "collections.OrderedDict"  # a worker extension class that does not subclass vf's

CASES: list[Case] = [
    # -- configs: GRPOConfig / RLConfig fields --------------------------------------------------
    Case("grpo-num-generations-1", "config", lambda w: grpo(w, num_generations=1, per_device_train_batch_size=2),
         r"num_generations=1 must be >= 2", r"group needs 2\+ completions"),
    Case("grpo-temperature-0", "config", lambda w: grpo(w, temperature=0.0),
         r"temperature=0.0 must be > 0", r"sampled, differing completions"),
    Case("grpo-batch-not-whole-groups", "config",
         lambda w: grpo(w, per_device_train_batch_size=3, num_generations=2),
         r"= 3, is not divisible by num_generations=2", r"product is a multiple of 2"),
    Case("grpo-unknown-loss-type", "config", lambda w: grpo(w, loss_type="ppo"),
         r"unknown loss_type='ppo'", r"use one of: .*dr_grpo"),
    Case("grpo-prompt-longer-than-seq", "config", lambda w: grpo(w, max_prompt_length=4096, max_seq_len=2048),
         r"max_prompt_length=4096 must be < max_seq_len=2048", r"raise max_seq_len"),
    Case("grpo-port-out-of-range", "config", lambda w: grpo(w, vllm_server_port=70000),
         r"vllm_server_port=70000 is not a TCP port", r"1\.\.65535"),
    Case("grpo-lr-scheduler-unknown", "config", lambda w: grpo(w, lr_scheduler_type="cosine_wobble"),
         r"lr_scheduler_type.*cosine_wobble", r"constant_with_warmup"),
    Case("rl-batch-not-micro-multiple", "config",
         lambda w: rl(batch_size=10, micro_batch_size=4, rollouts_per_example=2),
         r"batch_size=10 is not divisible by micro_batch_size", r"use e\.g\. batch_size = 8 or 12"),
    Case("rl-grpo-args-typo", "config", lambda w: rl(grpo_args={"epsilom": 0.1}),
         r"unknown key 'epsilom' in grpo_args", r"did you mean 'epsilon'"),
    Case("rl-grpo-args-renamed", "config", lambda w: rl(grpo_args={"num_generations": 4}),
         r"grpo_args sets 'num_generations'", r"set RLConfig\.rollouts_per_example instead"),
    Case("rl-max-tokens-over-seq", "config", lambda w: rl(max_tokens=4096, max_seq_len=2048),
         r"max_tokens=4096 must be >= 1 and < max_seq_len=2048", r"must fit max_seq_len"),
    # -- TOML (vf-rl configs, validated by vf-rl --dry-run) -------------------------------------
    Case("toml-syntax", "toml", cli("rl", "@", "cfg.toml", "--dry-run"),
         r"cfg\.toml is not valid TOML", r"line 1", setup=write("cfg.toml", "[trainer\n")),
    Case("toml-unknown-key", "toml", cli("rl", "@", "cfg.toml", "--dry-run"),
         r"unknown key 'trainer\.args\.max_step'", r"did you mean 'max_steps'",
         setup=toml({"max_steps = 3": "max_step = 3"})),
    Case("toml-wrong-type", "toml", cli("rl", "@", "cfg.toml", "--dry-run"),
         r"key 'trainer\.args\.max_steps' must be an integer", r'got "3" \(a string\)',
         setup=toml({"max_steps = 3": 'max_steps = "3"'})),
    Case("toml-no-model", "toml", cli("rl", "@", "cfg.toml", "--dry-run"),
         r"the config sets no model", r'add model = "smollm2"',
         setup=toml({'model = "smollm2"\n': ""})),
    Case("toml-no-env", "toml", cli("rl", "@", "cfg.toml", "--dry-run"),
         r"no \[env\] table", r'add \[env\] with id =',
         setup=toml({'[env]\nid = "reverse-text"\n': ""})),
    Case("toml-env-weight-zero", "toml", cli("rl", "@", "cfg.toml", "--dry-run"),
         r"env\.0\.weight = 0 must be > 0", r"drop the environment",
         setup=toml({'[env]\nid = "reverse-text"\n': '[[env]]\nid = "reverse-text"\nweight = 0\n'})),
    Case("toml-port-disagrees", "toml", cli("rl", "@", "cfg.toml", "--dry-run"),
         r"inference\.port = 8000 and trainer\.args\.vllm_server_port = 9000 disagree",
         r"set the server's port once", setup=toml({"gpus = 0\n\n[trainer]": "gpus = 0\nport = 8000\n\n[trainer]"},
                                                    append="vllm_server_port = 9000\n")),
    Case("toml-renamed-grpo-field", "toml", cli("rl", "@", "cfg.toml", "--dry-run"),
         r"'trainer\.args\.num_generations' is set through 'rollouts_per_example'",
         r"set trainer\.args\.rollouts_per_example instead", setup=toml(append="num_generations = 4\n")),
    Case("toml-lr-scheduler-unknown", "toml", cli("rl", "@", "cfg.toml", "--dry-run"),
         r"lr_scheduler_type.*cosine_wobble", r"constant_with_warmup",
         setup=toml(append='lr_scheduler_type = "cosine_wobble"\n')),
    Case("toml-false-for-a-value-flag", "toml",
         cli("rl", "@", "cfg.toml", "--dry-run", "--inference.args.max_model_len", "false"),
         r"inference\.args\.max_model_len = false: vf-vllm's --max-model-len takes a value",
         r"give it a value, or remove max_model_len", setup=toml()),
    Case("toml-resume-without-checkpoint", "toml",
         cli("rl", "@", "cfg.toml", "--dry-run", "--trainer.args.resume_from_checkpoint", "true"),
         r"trainer\.args\.resume_from_checkpoint = true, but output_dir outputs/rt: it holds no checkpoint",
         r"train without it first", setup=toml()),
    Case("toml-gpus-negative", "toml", cli("rl", "@", "cfg.toml", "--dry-run", "--inference.gpus", "-1"),
         r"inference\.gpus = -1 must be >= 0", r"0 runs on CPU", setup=toml()),
    Case("toml-override-typo", "toml", cli("rl", "@", "cfg.toml", "--dry-run", "--trainer.args.lora_rnk", "4"),
         r"unknown key 'trainer\.args\.lora_rnk'", r"did you mean 'lora_rank'", setup=toml()),
    # -- datasets --------------------------------------------------------------------------------
    Case("dataset-no-prompt-or-question", "dataset", lambda w: single_turn(dataset=dataset(text=["a"])),
         r"has neither a 'prompt' nor a 'question' column \(columns: text\)", r"add a 'question' column",
         error=DatasetFormatError),
    Case("dataset-info-not-json", "dataset",
         lambda w: single_turn(dataset=dataset(question=["q"], info=["{oops"])),
         r"dataset row 0: 'info' is a string but not valid JSON", r"store a dict", error=DatasetFormatError),
    Case("dataset-completion-needs-strings", "dataset",
         lambda w: single_turn(dataset=dataset(prompt=[[{"role": "user", "content": "q"}]]),
                               message_type="completion"),
         r"message_type='completion' needs string prompts", r"use message_type='chat'",
         error=DatasetFormatError),
    Case("dataset-not-a-dataset", "dataset", lambda w: single_turn(dataset=42),
         r"dataset must be a datasets\.Dataset, got int", r"Dataset\.from_list"),
    Case("dataset-generate-inputs-columns", "dataset",
         lambda w: single_turn(dataset=dataset(question=["q"])).generate({"text": ["a"]}, None, "m"),
         r"inputs have neither a 'prompt' nor a 'question' column", r"env\.get_dataset\(\)",
         error=DatasetFormatError),
    Case("dataset-bad-columns-via-vf-eval", "dataset", cli("eval", "vfbad_cols", "-b", unused_url, "-s"),
         r"has neither a 'prompt' nor a 'question' column", r"add a 'question' column",
         setup=env_module("vfbad_cols", """
             from datasets import Dataset
             def load_environment():
                 return vf.SingleTurnEnv(dataset=Dataset.from_dict({"text": ["a", "b"]}))
             """)),
    # -- environment args ------------------------------------------------------------------------
    Case("envargs-unknown-name", "env-args", cli("eval", "reverse-text", "-b", unused_url, "-a", '{"num_examples": 5}'),
         r"got unknown argument\(s\): num_examples; accepted: num_train_examples", r"fix the names"),
    Case("envargs-missing-required", "env-args", cli("eval", "vfbad_required", "-b", unused_url),
         r"requires argument\(s\): difficulty", r"""-a '\{"difficulty": \.\.\.\}'""",
         setup=env_module("vfbad_required", """
             def load_environment(difficulty: str):
                 raise AssertionError("never called")
             """)),
    Case("envargs-wrong-type", "env-args",
         cli("eval", "reverse-text", "-b", unused_url, "-s", "-a", '{"num_eval_examples": "five"}'),
         r"num_eval_examples", r"integer"),
    Case("envargs-wrong-type-vf-rl", "env-args",
         cli("rl", "@", "cfg.toml", "--dry-run", "--env.args.num_eval_examples", '"five"'),
         r"num_eval_examples", r"integer", setup=toml()),
    Case("envargs-bad-value", "env-args", cli("eval", "arithmetic", "-b", unused_url, "-a", '{"operations": "+/"}'),
         r"operations must be a non-empty string of \+ - \*, got '\+/'", r'e\.g\. operations="\+-"'),
    Case("env-not-installed", "env-args", cli("eval", "no-such-env", "-b", unused_url),
         r"environment 'no-such-env' not found: no module named 'no_such_env'", r"vf-install no-such-env"),
    Case("env-invalid-id", "env-args", lambda w: __import__("verifiers").load_environment("1 bad id"),
         r"'1 bad id' is not a valid environment id", r"use letters, digits", error=EnvironmentNotFoundError),
    Case("env-missing-dependency", "env-args", cli("eval", "vfbad_dep", "-b", unused_url),
         r"needs 'vf_no_such_dependency', which is not installed", r"install the environment's dependencies",
         setup=write(f"{MODS}/vfbad_dep.py", "import vf_no_such_dependency\n")),
    Case("env-returns-non-environment", "env-args",
         lambda w: __import__("verifiers").load_environment("vfbad_returns"),
         r"returned int, not a vf\.Environment", r"return an Environment",
         setup=env_module("vfbad_returns", "def load_environment():\n    return 42\n")),
    Case("env-args-python-unknown", "env-args",
         lambda w: __import__("verifiers").load_environment("reverse-text", num_examples=3),
         r"unknown argument\(s\): num_examples", r"fix the names", error=EnvironmentArgsError),
    # -- CLI flags -------------------------------------------------------------------------------
    Case("vf-eval-n-zero", "cli", cli("eval", "reverse-text", "-n", "0"),
         r"-n/--num-examples must be positive or -1", r"or -1 \(all\), got 0"),
    Case("vf-eval-r-zero", "cli", cli("eval", "reverse-text", "-r", "0"),
         r"-r/--rollouts-per-example must be at least 1", r"got 0"),
    Case("vf-eval-env-args-json", "cli", cli("eval", "reverse-text", "-a", "{num: 5}"),
         r"-a/--env-args is not valid JSON", r"quote the whole object"),
    Case("vf-eval-sampling-not-object", "cli", cli("eval", "reverse-text", "-S", "[1, 2]"),
         r"-S/--sampling-args must be a JSON object, got list", r"wrap the values in an object"),
    Case("vf-eval-base-url-scheme", "cli", cli("eval", "reverse-text", "-b", "ftp://host/v1"),
         r"base URL 'ftp://host/v1' is not an http\(s\) URL", r"-b http://127\.0\.0\.1:8000/v1"),
    Case("vf-eval-unknown-flag", "cli", cli("eval", "reverse-text", "--num-exmples", "4"),
         r"unrecognized arguments: --num-exmples", r"see vf-eval --help"),
    Case("vf-eval-missing-api-key", "cli",
         cli("eval", "reverse-text", "-b", "https://api.example.invalid/v1", "-k", "VF_TEST_UNSET_KEY"),
         r"environment variable VF_TEST_UNSET_KEY is not set", r"export VF_TEST_UNSET_KEY="),
    Case("vf-eval-max-tokens-zero", "cli", cli("eval", "reverse-text", "-t", "0"),
         r"-t/--max-tokens must be at least 1", r"got 0"),
    Case("vf-eval-temperature-negative", "cli", cli("eval", "reverse-text", "-T", "-1"),
         r"-T/--temperature must be a finite number >= 0", r"got -1"),
    Case("vf-eval-max-total-tokens-one", "cli", cli("eval", "reverse-text", "--max-total-tokens", "1"),
         r"--max-total-tokens must be at least 2", r"got 1"),
    Case("vf-eval-max-tokens-over-total", "cli",
         cli("eval", "reverse-text", "--max-total-tokens", "64", "-t", "64"),
         r"-t/--max-tokens=64 must be < --max-total-tokens=64", r"-t is the per-turn limit"),
    Case("vf-eval-resume-not-a-run", "cli", cli("eval", "reverse-text", "-b", unused_url, "-R", "nowhere"),
         r"-R/--resume nowhere: not a saved run", r"-R alone for the newest unfinished run"),
    Case("vf-eval-endpoint-key-and-api-key", "cli", cli("eval", "reverse-text", "-e", "ep.json", "-m", "a"),
         r"endpoint 'a' in ep\.json sets both key and api_key", r"keep one",
         setup=write("ep.json", '{"a": {"base_url": "http://127.0.0.1:9/v1", "key": "K", "api_key": "v"}}')),
    Case("vf-eval-hub-id-not-installed", "cli", cli("eval", "primeintellect/no-such-env", "-b", unused_url),
         r"environment 'primeintellect/no-such-env' not found: .*nothing is downloaded", r"pip install no-such-env"),
    Case("vf-eval-endpoints-missing", "cli", cli("eval", "reverse-text", "-e", "nope.py"),
         r"endpoints file nope\.py not found", r"pass an existing file with -e"),
    Case("vf-eval-save-unreachable", "cli", cli("eval", "reverse-text", "-b", unused_url, "-s", "-n", "2"),
         r"cannot connect to http://127\.0\.0\.1:\d+/v1", r"start the server"),
    Case("vf-eval-save-all-rollouts-fail", "cli",
         cli("eval", "reverse-text", "-b", all_rollouts_fail_url, "-s", "-n", "2", "-r", "1"),
         r"all 2 rollouts failed; first error: .*does not exist", r"check the model name \(-m\)"),
    Case("vf-models-tiny-no-out", "cli", cli("models", "tiny"),
         r"the following arguments are required: --out", r"see vf-models tiny --help"),
    Case("vf-models-unknown-command", "cli", cli("models", "smollm3"),
         r"invalid choice: 'smollm3'", r"choose from 'smollm2', 'tiny'"),
    Case("vf-models-out-not-writable", "cli", cli("models", "tiny", "--out", "afile/tiny"),
         r"cannot write afile/tiny", r"choose a writable --out folder", setup=write("afile", "x")),
    Case("vf-models-negative-seed", "cli", cli("models", "tiny", "--out", "t", "--seed", "-1"),
         r"argument --seed: must be >= 0, got -1", r"see vf-models tiny --help"),
    Case("vf-init-bad-name", "cli", cli("init", "1env"),
         r"'1env' is not a valid environment name", r"starting with a letter"),
    Case("vf-init-shadowing-name", "cli", cli("init", "json"),
         r"would create a module 'json' that shadows an existing one", r"pick a more specific name"),
    Case("vf-init-exists", "cli", cli("init", "my-env"),
         r"environments/my_env already exists", r"pass --force", setup=write("environments/my_env/keep.txt", "")),
    Case("vf-init-path-is-a-file", "cli", cli("init", "my-env", "--path", "afile"),
         r"cannot write environment 'my-env' into afile/my_env", r"point --path at a writable folder",
         setup=write("afile", "x")),
    Case("vf-init-disk-full-leaves-no-half-package", "cli", cli("init", "my-env"),
         r"into environments/my_env: No space left on device", r"--path", patch=failing_readme_write),
    Case("vf-install-no-folder", "cli", cli("install", "my-env"),
         r"no environment folder environments/my_env", r"create it with vf-init my-env"),
    Case("vf-install-no-pyproject", "cli", cli("install", "my-env"),
         r"environments/my_env has no pyproject\.toml or setup\.py", r"recreate it with vf-init my-env --force",
         setup=write("environments/my_env/my_env.py", "")),
    Case("vf-install-hub-id-not-installed", "cli", cli("install", "primeintellect/no-such-env"),
         r"'primeintellect/no-such-env' is neither installed nor in environments/", r"pip install no-such-env"),
    Case("vf-rl-no-config", "cli", cli("rl"), r"no config file given", r"vf-rl @ path/to/config\.toml"),
    Case("vf-rl-stray-argument", "cli", cli("rl", "@", "cfg.toml", "max_steps=5"),
         r"unexpected argument 'max_steps=5'", r"--section\.key value", setup=toml()),
    Case("vf-rl-two-configs", "cli", cli("rl", "@", "cfg.toml", "@", "cfg.toml"),
         r"two config files given", r"pass one @ file", setup=toml()),
    Case("vf-train-missing-config", "cli", cli("train", "@", "missing.toml"),
         r"config file missing\.toml not found", r"pass an existing file"),
    Case("vf-setup-unknown-env", "cli", cli("setup", "--prime-rl", "no-such-env"),
         r"no bundled example for environment 'no-such-env'", r"use one of: .*reverse-text"),
    Case("vf-setup-dir-is-a-file", "cli", cli("setup", "--dir", "afile"),
         r"afile", r"--dir", setup=write("afile", "x")),
    Case("vf-vllm-headless", "cli", cli("vllm", "--model", "m", "--headless"),
         r"vf-vllm does not support --headless", r"use vLLM's own launcher"),
    Case("vf-vllm-api-server-count", "cli", cli("vllm", "--model", "m", "--api-server-count", "2"),
         r"vf-vllm runs one API server", r"drop --api-server-count"),
    Case("vf-vllm-worker-extension", "cli", cli("vllm", "--model", "m", "--worker-extension-cls", BAD_EXT),
         rf"--worker-extension-cls {BAD_EXT} does not subclass", r"subclass it"),
    Case("vf-vllm-unknown-flag", "cli", cli("vllm", "--model", "m", "--max-seqs", "8"),
         r"unrecognized arguments: --max-seqs", r"--help"),
    Case("vf-vllm-bad-int", "cli", cli("vllm", "--model", "m", "--max-num-seqs", "many"),
         r"--max-num-seqs: invalid int value: 'many'", r"--help"),
    Case("vf-vllm-kv-cache-tokens-zero", "cli", cli("vllm", "--model", "m", "--kv-cache-tokens", "0"),
         r"argument --kv-cache-tokens: must be >= 1, got 0", r"--help"),
    Case("vf-vllm-weight-update-timeout-zero", "cli", cli("vllm", "--model", "m", "--weight-update-timeout", "0"),
         r"argument --weight-update-timeout: must be a finite number > 0, got 0", r"--help"),
    Case("vf-vllm-two-kv-cache-sizes", "cli",
         cli("vllm", "--model", "m", "--kv-cache-tokens", "4096", "--kv-cache-memory-bytes", "1000000"),
         r"--kv-cache-tokens and --kv-cache-memory-bytes/--gpu-memory-utilization both size the KV cache",
         r"pass only one of them"),
]  # fmt: skip


# -- running a case ---------------------------------------------------------------------------


def snapshot(folder: Path) -> set[str]:
    """Every path under ``folder`` (bytecode caches aside)."""
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if "__pycache__" not in p.parts}


def one_line_error(err: str) -> str:
    """The contract on stderr: exactly one ``error:`` line and no traceback; return that line."""
    assert "Traceback" not in err, f"traceback on stderr:\n{err[-3000:]}"
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, f"expected one 'error:' line, got {len(lines)}:\n{err[-3000:]}"
    return lines[0]


def check_line(line: str, case: Case) -> None:
    assert "\n" not in line.strip(), line
    assert re.search(case.problem, line), f"{case.id}: the problem /{case.problem}/ is not named in: {line}"
    assert re.search(case.fix, line), f"{case.id}: the fix /{case.fix}/ is not named in: {line}"


def run_main(name: str, argv: list[str]) -> int:
    import importlib

    module = importlib.import_module(f"verifiers.cli.{name}")
    with pytest.MonkeyPatch.context() as mp:
        if name == "vllm":  # a case that parses must not start a server inside pytest

            async def no_server(*_: Any) -> None:
                raise AssertionError(f"vf-vllm {argv} was accepted and would start a server")

            mp.setattr("verifiers.inference.server.main.run_server", no_server)  # the server's main
        try:
            return module.main(argv)
        except SystemExit as exc:  # a parser that exits instead of returning (vLLM's)
            return exc.code if isinstance(exc.code, int) else 2


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """An empty working folder with reverse-text and the case's modules importable, and no API key."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(REVERSE_TEXT_DIR))
    monkeypatch.syspath_prepend(str(work / MODS))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("VF_TEST_UNSET_KEY", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("VLLM_WORKER_MULTIPROC_METHOD", "spawn")  # what vf-vllm's setup would set
    modules = set(sys.modules)
    yield work
    for name in set(sys.modules) - modules:
        if name.startswith("vfbad_") or name == "reverse_text":
            sys.modules.pop(name, None)
    while _OPEN_SERVERS:
        _OPEN_SERVERS.pop().__exit__(None, None, None)
    import logging

    logger = logging.getLogger("verifiers")  # vf-eval binds a handler to the (captured) stderr
    for handler in [h for h in logger.handlers if getattr(h, "_verifiers", False)]:
        logger.removeHandler(handler)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CASES])
def test_bad_input(case: Case, workdir: Path, capsys):
    if case.setup is not None:
        case.setup(workdir)
    before = snapshot(workdir)
    with pytest.MonkeyPatch.context() as patched:
        if case.patch is not None:
            case.patch(patched)
        run_case(case, workdir, capsys)
    assert snapshot(workdir) == before, f"left behind: {sorted(snapshot(workdir) ^ before)}"


def run_case(case: Case, workdir: Path, capsys) -> None:
    if isinstance(case.call, tuple):
        name, argv = case.call
        argv = [a() if callable(a) else a for a in argv]
        try:
            rc = run_main(name, argv)
        except Exception as exc:  # noqa: BLE001 - the finding is that it escaped
            pytest.fail(
                f"vf-{name} {argv}: raised {type(exc).__name__}: {exc} (want exit 2 and one error line)"
            )
        out, err = capsys.readouterr()
        line = one_line_error(err)
        assert rc == 2, f"vf-{name} exited {rc}, want 2: {line}"
        assert line.startswith("error:") or line.startswith(f"vf-{name}: error:"), line
        assert "Traceback" not in out
        check_line(line, case)
    else:
        with pytest.raises(VerifiersError) as info:
            case.call(workdir)
        assert isinstance(info.value, case.error), (
            f"want {case.error.__name__}, got {type(info.value).__name__}"
        )
        check_line(str(info.value), case)


def test_the_table_covers_every_area_and_cli():
    assert len(CASES) >= 30 and len({c.id for c in CASES}) == len(CASES)
    assert {c.area for c in CASES} >= {"config", "toml", "dataset", "env-args", "cli"}
    clis = {c.call[0] for c in CASES if isinstance(c.call, tuple)}
    assert clis >= {"eval", "models", "init", "install", "rl", "train", "setup", "vllm"}


# -- real processes ---------------------------------------------------------------------------

# (id, argv after "python -m", files to create, paths that must not exist afterwards, problem, fix)
PROCESS_CASES = [
    ("vf-eval-save-unreachable", ["verifiers.cli.eval", "reverse-text", "-b", "{unused}", "-s", "-n", "2"],
     {}, ["outputs"], r"cannot connect to", r"start the server"),
    ("vf-init-bad-name", ["verifiers.cli.init", "2fast"], {}, ["environments"],
     r"not a valid environment name", r"starting with a letter"),
    ("vf-rl-unknown-key", ["verifiers.cli.rl.plan", "@", "cfg.toml", "--dry-run"],
     {"cfg.toml": TOML.replace("max_steps = 3", "max_step = 3")}, ["outputs"],
     r"unknown key 'trainer\.args\.max_step'", r"did you mean 'max_steps'"),
    ("vf-vllm-model-not-found", ["verifiers.cli.vllm", "--model", "/no/such/model-dir", "--port", "{port}"],
     {}, [], r"/no/such/model-dir", r"--model"),
]  # fmt: skip


@pytest.fixture(scope="module")
def processes(tmp_path_factory):
    """Start every process case at once (they are mostly import time); results by id."""
    from tests.doubles.vllm_server import free_port

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(REVERSE_TEXT_DIR)]),
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("OPENAI_API_KEY", None)
    started = {}
    for case_id, argv, files, _, _, _ in PROCESS_CASES:
        cwd = tmp_path_factory.mktemp(case_id)
        for rel, text in files.items():
            (cwd / rel).write_text(text)
        argv = [a.format(unused=unused_url(), port=free_port("127.0.0.1")) for a in argv]
        proc = subprocess.Popen(
            [sys.executable, "-m", *argv], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, start_new_session=True,
        )  # fmt: skip
        started[case_id] = (proc, cwd)
    yield started
    for proc, _ in started.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.mark.parametrize("case", PROCESS_CASES, ids=[c[0] for c in PROCESS_CASES])
def test_real_process(case, processes):
    case_id, argv, _, absent, problem, fix = case
    proc, cwd = processes[case_id]
    try:
        out, err = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"{argv[0]} did not exit within 180 s")
    line = one_line_error(err)
    assert proc.returncode == 2, f"exit {proc.returncode}, want 2: {line}"
    assert "Traceback" not in out
    check_line(line, Case(case_id, "cli", None, problem, fix))
    for rel in absent:
        assert not (cwd / rel).exists(), f"{argv[0]} left {rel} behind"


# -- server requests (vf-vllm trainer routes) -------------------------------------------------

TOKEN = "bad-inputs-token"
META = [{"name": "model.norm.weight", "shape": [64], "dtype": "float32"}]


def begin(**changes: Any) -> dict:
    body = {"update_id": "bad-1", "version": 1, "transport": "http", "params": META, "timeout_s": 30}
    body.update(changes)
    return body


@dataclass
class Request:
    id: str
    method: str
    path: str
    status: int
    problem: str
    fix: str
    json: Any = None
    data: str | bytes | None = None
    token: str | None = TOKEN
    stage: str | None = None


SERVER_CASES = [
    Request("no-admin-token", "POST", "/vf/weights/begin", 401, r"missing or wrong X-VF-Admin-Token",
            r"send the server's admin token", json=begin(), token=None, stage="auth"),
    Request("wrong-admin-token", "POST", "/vf/pause", 401, r"missing or wrong X-VF-Admin-Token",
            r"send the server's admin token", token="not-the-token", stage="auth"),
    Request("wrong-tensor-shape", "POST", "/vf/weights/begin", 400, r"'model\.norm\.weight' has shape \[3\]",
            r"the served model expects \[64\]", json=begin(params=[{**META[0], "shape": [3]}]), stage="validate"),
    Request("unknown-parameter-name", "POST", "/vf/weights/begin", 400, r"unknown parameter 'model\.nope\.weight'",
            r"named_parameters|served checkpoint|did you mean",
            json=begin(params=[{**META[0], "name": "model.nope.weight"}]), stage="validate"),
    Request("malformed-json", "POST", "/vf/weights/begin", 400, r"body is not JSON", r"line 1 column",
            data='{"update_id": "bad-1", ', stage="request"),
    Request("json-not-an-object", "POST", "/vf/weights/begin", 400, r"body must be a JSON object",
            r"JSON object", data="[1, 2]", stage="request"),
    Request("unknown-transport", "POST", "/vf/weights/begin", 400, r"need update_id, transport in", r"transport in \(.*'shm'.*'http'",
            json=begin(transport="pigeon"), stage="request"),
    Request("nccl-on-cpu", "POST", "/vf/weights/begin", 400, r"no GPU weight transfer",
            r"use transport 'shm' or 'http'", json=begin(transport="nccl"), stage="validate"),
    Request("params-entry-not-object", "POST", "/vf/weights/begin", 400, r"params", r"name.*shape.*dtype",
            json=begin(params=[5])),
    Request("timeout-not-a-number", "POST", "/vf/weights/begin", 400, r"timeout_s", r"number|seconds",
            json=begin(timeout_s="soon")),
    Request("pause-mode-unknown", "POST", "/vf/pause?mode=forever", 400, r"mode must be one of",
            r"'keep', 'wait', 'abort'", stage="pause"),
    Request("commit-unknown-update", "POST", "/vf/weights/commit", 410, r"no update 'nope' in progress",
            r"begin again", json={"update_id": "nope", "version": 5}, stage="handshake"),
    Request("lora-not-enabled", "PUT", "/vf/lora/upload/policy", 400, r"LoRA is not enabled on this server",
            r"--enable-lora --max-lora-rank", data=b"not a blob", stage="lora"),
]  # fmt: skip


@pytest.fixture(scope="module")
def admin_server(tiny_model_dir, tmp_path_factory):
    """vf-vllm bound off loopback with an admin token (no LoRA)."""
    from tests.doubles.vllm_server import serve_off_loopback

    flags = ("--disable-uvicorn-access-log", "--max-num-seqs", "4")
    tmp = tmp_path_factory.mktemp("vf-vllm-bad-inputs")
    with serve_off_loopback(tiny_model_dir, tmp, *flags, admin_token=TOKEN, max_model_len=256) as srv:
        yield srv


@pytest.mark.server
@pytest.mark.parametrize("req", SERVER_CASES, ids=[r.id for r in SERVER_CASES])
def test_bad_server_request(req: Request, admin_server):
    import requests

    headers = {"X-VF-Admin-Token": req.token} if req.token else {}
    kwargs: dict[str, Any] = {"json": req.json} if req.json is not None else {"data": req.data}
    if req.data is not None and isinstance(req.data, str):
        headers["Content-Type"] = "application/json"
    r = requests.request(req.method, admin_server.url + req.path, headers=headers, timeout=60, **kwargs)
    assert r.status_code == req.status, f"{req.id}: HTTP {r.status_code}, want {req.status}: {r.text[:300]}"
    try:
        error = r.json()["error"]
    except (ValueError, KeyError, TypeError):
        pytest.fail(f"{req.id}: the answer is not a JSON error: {r.text[:300]!r}")
    message = error["message"] if isinstance(error, dict) else str(error)
    assert "\n" not in message.strip(), message
    check_line(message, Case(req.id, "server", None, req.problem, req.fix))
    if req.stage is not None:
        assert error.get("stage") == req.stage, error

    # Nothing half-done: serving goes on, unpaused, no update in progress, weights untouched.
    health = requests.get(admin_server.url + "/vf/health", timeout=30).json()
    assert not health["paused"] and not health["update_in_progress"] and health["weight_version"] == 0, health


@pytest.mark.server
def test_client_errors_are_typed_one_liners(admin_server):
    """The same bad requests through ``VLLMClient``: a ``WeightSyncError`` naming the stage and the fix."""
    import torch

    from verifiers.errors import WeightSyncError
    from verifiers.inference.client.vllm_client import VLLMClient

    for token, tensors, stage, problem, fix in (
        (None, {"model.norm.weight": torch.ones(64)}, "auth", r"X-VF-Admin-Token", r"pass admin_token="),
        (TOKEN, {"model.norm.weight": torch.ones(3)}, "validate", r"has shape \[3\]", r"expects \[64\]"),
    ):
        client = VLLMClient(admin_server.url, admin_token=token, max_retries=0)
        client.admin_token = token  # not VF_ADMIN_TOKEN from the environment
        try:
            with pytest.raises(WeightSyncError) as info:
                client.update_weights(tensors, transport_name="http")
        finally:
            client.close()
        assert info.value.stage == stage, info.value
        check_line(str(info.value), Case(stage, "server", None, problem, fix))
    health = VLLMClient(admin_server.url).health()
    assert not health["paused"] and not health["update_in_progress"] and health["weight_version"] == 0
