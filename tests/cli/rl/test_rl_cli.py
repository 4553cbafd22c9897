"""vf-rl (dry run, bad input), without a real server (supervision: test_rl_launcher.py; vf-train and
vf-setup: tests/cli/test_train.py, tests/cli/test_setup.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.doubles.cli_errors import one_error  # noqa: E402
from tests.doubles.configs import RL_CONFIG as CONFIG  # noqa: E402
from verifiers.cli import train as train_cli  # noqa: E402
from verifiers.cli.rl import plan as rl_cli  # noqa: E402
from verifiers.cli.run_config import load as tc  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


pytestmark = pytest.mark.usefixtures("one_process")  # tests/cli/conftest.py


# -- vf-rl --dry-run --------------------------------------------------------------------------


def test_dry_run_prints_the_commands(config_file, capsys):
    assert rl_cli.main(["@", str(config_file), "--dry-run", "--trainer.args.max_steps", "5"]) == 0
    out = capsys.readouterr().out.splitlines()
    py = sys.executable
    assert out[0] == f"config {config_file}: run 'rt', logs in outputs/rt/logs/"
    assert out[1] == (
        f"inference: CUDA_VISIBLE_DEVICES= {py} -m verifiers.cli.vllm --model smollm2 --host 127.0.0.1 "
        "--port 8000 --enforce-eager --kv-cache-tokens 32768"
    )  # a CPU server gets merged weights, so no --enable-lora; its KV cache: 16 rollouts × 2048 tokens
    assert out[2] == "wait: http://127.0.0.1:8000/health, then /v1/models (up to 300 s)"
    assert out[3] == (
        f"trainer: CUDA_VISIBLE_DEVICES= {py} -m verifiers.cli.train @ {config_file} --trainer.args.max_steps 5"
    )
    assert out[4] == (
        "supervise: restart the server up to 3 time(s) if it dies, answers nothing for 60 s, or makes no "
        "engine progress for 120 s with requests waiting during training"
    )
    assert out[5] == (
        "supervise: restart the trainer up to 3 time(s) from its newest good checkpoint if it dies, a rank "
        "stops beating for 30 s, or makes no training progress for 1860 s"
    )


def test_dry_run_shows_the_restart_setting(config_file, capsys):
    argv = [
        "@",
        str(config_file),
        "--dry-run",
        "--inference.max_restarts",
        "0",
        "--inference.hang_timeout_s",
        "0",
    ]
    assert rl_cli.main([*argv, "--trainer.max_restarts", "0", "--trainer.hang_timeout_s", "0"]) == 0
    server, trainer = capsys.readouterr().out.splitlines()[-2:]
    assert server == (
        "supervise: stop the run if the server dies or makes no engine progress for 120 s with requests "
        "waiting during training (inference.max_restarts = 0)"
    )
    assert trainer == (
        "supervise: stop the run if the trainer dies or a rank stops beating for 30 s (trainer.max_restarts = 0)"
    )
    rc = rl_cli.main(["@", str(config_file), "--dry-run", "--inference.max_restarts", "-2"])
    assert one_error(capsys, rc) == (
        "error: inference.max_restarts = -2 must be >= 0 "
        "(0 ends the run when the server dies; 3 restarts it up to 3 times)"
    )


def test_dry_run_lora_rank_and_opt_outs(config_file, capsys):
    gpu = ["--inference.gpus", "1"]  # a GPU server: the adapter alone travels
    rl_cli.main(["@", str(config_file), "--dry-run", *gpu, "--trainer.args.lora_rank", "12"])
    assert "--enable-lora --max-lora-rank 16" in capsys.readouterr().out  # the next rank vLLM accepts
    rl_cli.main(["@", str(config_file), "--dry-run", *gpu, "--trainer.args.use_lora", "false"])
    assert "--enable-lora" not in capsys.readouterr().out
    rl_cli.main(["@", str(config_file), "--dry-run", *gpu, "--inference.args.enable_lora", "false"])
    line = capsys.readouterr().out.splitlines()[1]
    # false is passed on, not dropped
    assert line.endswith("--no-enable-lora") and "--max-lora-rank" not in line
    rl_cli.main(["@", str(config_file), "--dry-run", "--inference.args.enable_lora", "true"])
    assert "--enable-lora" in capsys.readouterr().out.splitlines()[1]  # asked for on CPU: kept


def test_dry_run_kv_cache_is_sized_for_the_run_on_cpu_only(config_file, capsys):
    def server_line(*extra: str) -> str:
        assert rl_cli.main(["@", str(config_file), "--dry-run", *extra]) == 0
        return capsys.readouterr().out.splitlines()[1]

    assert server_line("--trainer.args.max_seq_len", "512").endswith("--kv-cache-tokens 8192")  # 16 × 512
    assert server_line("--trainer.args.max_concurrent", "4").endswith("--kv-cache-tokens 8192")  # 4 × 2048
    assert server_line("--inference.args.max_num_seqs", "2").endswith(
        "--max-num-seqs 2 --kv-cache-tokens 4096"
    )
    for own in (
        ["--inference.args.kv_cache_memory_bytes", "1000000"],
        ["--inference.args.gpu_memory_utilization", "0.3"],
    ):
        assert "--kv-cache-tokens" not in server_line(*own)  # the user's size stands
    assert "--kv-cache-tokens" not in server_line("--inference.gpus", "1")  # a GPU: vLLM's own sizing


def test_dry_run_resume_and_hub_style_env_id(config_file, capsys, tmp_path, monkeypatch):
    from verifiers.training.lifecycle import checkpoint as ckpt

    monkeypatch.syspath_prepend(str(ROOT / "environments" / "reverse_text"))
    out = tmp_path / "out"
    (out / "checkpoint-3").mkdir(parents=True)
    ckpt.mark_complete(out / "checkpoint-3", 3)
    argv = ["@", str(config_file), "--dry-run", "--trainer.args.output_dir", str(out)]
    argv += ["--env.id", "primeintellect/reverse-text", "--trainer.args.resume_from_checkpoint", "true"]
    assert rl_cli.main(argv) == 0, capsys.readouterr().err
    text = capsys.readouterr().out
    assert f"resume: from the last complete checkpoint in {out}" in text
    assert "install " not in text  # the installed/importable reverse-text, not a download
    empty = tmp_path / "empty"
    argv = ["@", str(config_file), "--dry-run", "--trainer.args.output_dir", str(empty)]
    line = one_error(capsys, rl_cli.main([*argv, "--trainer.args.resume_from_checkpoint", "true"]))
    assert line == (
        f"error: trainer.args.resume_from_checkpoint = true, but output_dir {empty}: it holds no checkpoint "
        "(train without it first, or set it to a checkpoint folder)"
    )


def test_dry_run_multi_gpu_uses_accelerate(config_file, capsys, tmp_path):
    argv = ["@", str(config_file), "--dry-run", "--inference.gpus", "2", "--trainer.gpus", "2"]
    assert rl_cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "inference: CUDA_VISIBLE_DEVICES=0,1 " in out and "--data-parallel-size 2" in out
    assert (
        f"trainer: CUDA_VISIBLE_DEVICES=2,3 {sys.executable} -m accelerate.commands.launch --num_processes 2 "
        f"--log_dir /dev/null --multi_gpu -m verifiers.cli.train @ {config_file}"
    ) in out
    zero3 = tmp_path / "zero3.yaml"
    zero3.write_text("distributed_type: DEEPSPEED\n")
    rl_cli.main([*argv, "--trainer.accelerate_config", str(zero3)])
    assert f"--log_dir /dev/null --config_file {zero3} -m verifiers.cli.train" in capsys.readouterr().out


def test_dry_run_lists_environments_to_install(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "environments" / "vf_test_not_installed"
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG.replace('id = "reverse-text"', 'id = "vf-test-not-installed"'))
    monkeypatch.chdir(tmp_path)
    assert rl_cli.main(["@", str(cfg), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (
        f"install vf-test-not-installed: {sys.executable} -m pip install -e environments/vf_test_not_installed"
        in out
    )


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "vf-rl").glob("*.toml")), ids=lambda p: p.stem)
def test_every_example_config_dry_runs(path, capsys, monkeypatch):
    # importable from their folders, so their args are checked against load_environment
    monkeypatch.syspath_prepend(str(ROOT / "environments" / path.stem.replace("-", "_")))
    monkeypatch.chdir(ROOT)  # where ./environments is, for those that are not importable
    assert rl_cli.main(["@", str(path), "--dry-run"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, expected",
    [
        (
            ["--trainer.args.max_step", "5"],
            "error: unknown key 'trainer.args.max_step'; did you mean 'max_steps'?",
        ),
        (["--trainer.args.batch_size", "18"], "error: batch_size=18 is not divisible by micro_batch_size"),
        (["--trainer.args.max_steps", '"x"'], "error: key 'trainer.args.max_steps' must be an integer"),
        (["--trainer.args.temperature", "0"], "error: temperature=0 must be > 0"),
        (["stray"], "error: unexpected argument 'stray'"),
        (
            ["--env.args.bogus", "1"],
            "error: environment 'reverse-text' got unknown argument(s): bogus; accepted: ",
        ),
    ],
)
def test_bad_input_is_one_error_line(config_file, capsys, extra, expected):
    line = one_error(capsys, rl_cli.main(["@", str(config_file), "--dry-run", *extra]))
    # (RLConfig's own rules come prefixed with the table they were found in)
    assert line.startswith(expected) or line.startswith(
        expected.replace("error: ", "error: trainer.args: ")
    ), line


def test_missing_or_broken_config_file(tmp_path, capsys):
    assert "not found" in one_error(capsys, rl_cli.main(["@", str(tmp_path / "nope.toml")]))
    bad = tmp_path / "bad.toml"
    bad.write_text("[trainer\n")
    assert "is not valid TOML" in one_error(capsys, rl_cli.main(["@", str(bad)]))
    assert "no config file given" in one_error(capsys, rl_cli.main([]))


def test_gpus_on_a_cpu_machine_is_refused_before_starting(config_file, capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    line = one_error(capsys, rl_cli.main(["@", str(config_file), "--trainer.gpus", "1"]))
    assert (
        "asks for 1 GPU(s)" in line and "but 0 CUDA device(s) are visible; it never falls back to CPU" in line
    )


def test_cli_entry_points_exist():
    text = (ROOT / "setup.py").read_text()
    for script in (
        "vf-rl=verifiers.cli.rl:main",
        "vf-train=verifiers.cli.train:main",
        "vf-setup=verifiers.cli.setup:main",
    ):
        assert script in text


def test_setup_declares_the_rl_extra_and_tomli_for_python_310(monkeypatch):
    """``pip install "verifiers[rl]"`` (the guides' spelling) gets the training stack and DeepSpeed; 3.10 gets tomli.
    deepspeed, wandb and trl are extras of their own too: the package imports none of them unless asked."""
    import runpy

    import setuptools

    captured = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kw: captured.update(kw))
    monkeypatch.chdir(ROOT)
    runpy.run_path(str(ROOT / "setup.py"))
    extras = captured["extras_require"]
    # the GPU install, and wandb: the tutorial's config turns on report_to = "wandb" (upstream's [rl] had it)
    assert extras["rl"] == extras["train"] + extras["deepspeed"] + extras["vllm"] + extras["wandb"]
    assert any(r.startswith("deepspeed") for r in extras["rl"])
    for name in ("trl", "wandb", "deepspeed"):
        assert not any(r.startswith(name) for r in extras["train"]), name
        assert any(r.startswith(name) for r in extras[name]), name
    assert 'tomli>=1.1; python_version < "3.11"' in captured["install_requires"]


TUTORIAL_WANDB = """
[trainer.args.wandb]
project = "reverse-text-tutorial"
name = "my-first-run"
"""


def test_tutorial_wandb_block_runs_once_the_rl_extra_brought_wandb(tmp_path, capsys, monkeypatch):
    """The tutorial's report_to = "wandb" with its [trainer.args.wandb] table: planned when wandb is
    importable (the [rl] extra installs it), one line naming the fix when it is not."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        CONFIG.replace("[trainer.args]\n", '[trainer.args]\nreport_to = "wandb"\n') + TUTORIAL_WANDB
    )
    fake = tmp_path / "site"
    (fake / "wandb").mkdir(parents=True)
    (fake / "wandb" / "__init__.py").write_text("")
    import importlib.util

    if importlib.util.find_spec("wandb") is None:  # without the extra: one line, the fix named
        line = one_error(capsys, rl_cli.main(["@", str(cfg), "--dry-run"]))
        assert (
            line == "error: report_to='wandb' includes 'wandb' but wandb is not installed (pip install wandb)"
        )
        monkeypatch.syspath_prepend(str(fake))  # what pip install "verifiers[rl]" puts there
    assert rl_cli.main(["@", str(cfg), "--dry-run"]) == 0, capsys.readouterr().err


def test_vf_rl_subprocess_error_has_no_traceback(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(CONFIG + "max_step = 2\n")
    proc = subprocess.run(
        [sys.executable, "-m", "verifiers.cli.rl.plan", "@", str(cfg), "--dry-run"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip().splitlines()[-1]
        == "error: unknown key 'trainer.args.max_step'; did you mean 'max_steps'?"
    )


# -- the prime-rl page's multi-environment example, planned and loaded ---------------------------


# The prime-rl page's multi-environment example: its three [[env]] entries (ids, args, weights),
# with this package's model / inference / trainer keys around them.
MULTI_ENV = """
model = "smollm2"

[[env]]
id = "primeintellect/math-python"
args = { max_turns = 10 }
weight = 0.5

[[env]]
id = "primeintellect/gsm8k"
args = { max_turns = 5 }
weight = 0.3

[[env]]
id = "primeintellect/wiki-search"
args = { max_turns = 8 }
weight = 0.2

[inference]
gpus = 0

[trainer]
gpus = 0

[trainer.args]
run_name = "multi"
rollouts_per_example = 4
micro_batch_size = 4
batch_size = 16
max_steps = 2
"""


def test_prime_rl_page_multi_environment_example_runs_with_the_bundled_environments(tmp_path, capsys):
    """Every entry's args are accepted (gsm8k, single-turn, takes max_turns as a bound >= 1) and
    the three load as one weighted EnvGroup."""
    import verifiers as vf

    cfg = tmp_path / "multi.toml"
    cfg.write_text(MULTI_ENV)
    assert rl_cli.main(["@", str(cfg), "--dry-run"]) == 0, capsys.readouterr().err
    config = tc.parse_config(tc.tomllib.loads(MULTI_ENV), source=cfg)
    group = train_cli.load_envs(config.envs)
    assert isinstance(group, vf.EnvGroup)
    assert group.task_shares() == {"math-python": 0.5, "gsm8k": 0.3, "wiki-search": 0.2}
    assert [env.max_turns for env in group.envs] == [10, 1, 8]  # gsm8k: its one turn, within 5
    with pytest.raises(vf.ConfigError, match=r"^gsm8k: max_turns=0 must be an integer >= 1"):
        vf.load_environment("primeintellect/gsm8k", max_turns=0)


def test_multi_process_trainer_gets_time_to_checkpoint_after_a_signal(config_file, monkeypatch):
    # torchrun SIGKILLs its workers 30 s after passing a signal on unless told otherwise.
    monkeypatch.delenv("TORCH_ELASTIC_SHUTDOWN_TIMEOUT", raising=False)
    argv = ["@", str(config_file), "--inference.gpus", "2", "--trainer.gpus", "2"]
    cli = rl_cli.parse_command_line(argv, "vf-rl", rl_cli.FLAGS, rl_cli.DESCRIPTION)
    plan = rl_cli.build_plan(rl_cli.load_config(cli.configs, cli.overrides), cli, gpu_ids=None)
    assert plan.trainer.env["TORCH_ELASTIC_SHUTDOWN_TIMEOUT"] == str(rl_cli.ELASTIC_SHUTDOWN_TIMEOUT_S)
    argv = ["@", str(config_file)]
    cli = rl_cli.parse_command_line(argv, "vf-rl", rl_cli.FLAGS, rl_cli.DESCRIPTION)
    plan = rl_cli.build_plan(rl_cli.load_config(cli.configs, cli.overrides), cli, gpu_ids=None)
    assert "TORCH_ELASTIC_SHUTDOWN_TIMEOUT" not in plan.trainer.env
