"""The vf-rl / vf-train command line: several @ files, --no-flag, VF_RL__ environment variables, --help."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.doubles.configs import RUN_CONFIG_BASE as BASE  # noqa: E402 (the same minimal config)
from verifiers.cli.run_config import load as tc  # noqa: E402
from verifiers.errors import ConfigError  # noqa: E402
from verifiers.training.rl.config import RLConfig  # noqa: E402


@pytest.fixture
def files(tmp_path):
    base = tmp_path / "base.toml"
    base.write_text(BASE)
    extra = tmp_path / "extra.toml"
    extra.write_text(
        '[trainer.args]\nmax_steps = 7\nlearning_rate = 3e-5\n[inference.args]\ndtype = "float32"\n'
    )
    return base, extra


def test_several_files_merge_in_order_key_by_key(files):
    base, extra = files
    cfg = tc.load_config([base, extra], environ={})
    args = cfg.trainer.args
    assert (args["max_steps"], args["learning_rate"]) == (7, 3e-5)  # the later file wins
    assert args["batch_size"] == tc.tomllib.loads(BASE)["trainer"]["args"]["batch_size"]  # kept from base
    assert cfg.inference.args == {"enforce_eager": True, "dtype": "float32"}  # tables merge
    assert cfg.source == base and cfg.sources == (base, extra)
    cli = tc.parse_command_line(
        ["@", str(base), f"@{extra}", "--trainer.args.max_steps", "9"], "vf-rl", {}, ""
    )
    assert cli.configs == [str(base), str(extra)] and cli.config == str(base)
    assert cli.config_args() == ["@", str(base), "@", str(extra)]
    assert tc.load_config(cli.configs, cli.overrides, environ={}).trainer.args["max_steps"] == 9


def test_no_flag_sets_a_boolean_false(files):
    base, _ = files
    cli = tc.parse_command_line(
        ["@", str(base), "--no-trainer.args.use_lora", "--dry-run"], "vf-rl", {"--dry-run": ""}, ""
    )
    assert cli.overrides == [("trainer.args.use_lora", "false")] and cli.flags == {"--dry-run"}
    assert tc.load_config(cli.configs, cli.overrides, environ={}).rl_config().use_lora is False
    # on a key that is not a boolean it is the usual one-line type error
    with pytest.raises(ConfigError) as err:
        tc.load_config([base], [("trainer.args.max_steps", "false")], environ={})
    assert str(err.value).startswith("key 'trainer.args.max_steps' must be an integer, got false (a boolean)")


def test_environment_variables_sit_between_files_and_command_line(files):
    base, extra = files
    environ = {"VF_RL__TRAINER__ARGS__LEARNING_RATE": "1e-4", "VF_RL__MODEL": "other", "PATH": "/bin"}
    assert tc.env_overrides(environ) == [("model", "other"), ("trainer.args.learning_rate", "1e-4")]
    cfg = tc.load_config([base, extra], environ=environ)
    assert cfg.trainer.args["learning_rate"] == 1e-4 and cfg.model == "other"  # env beats the files
    cfg = tc.load_config([base, extra], [("trainer.args.learning_rate", "2e-4")], environ=environ)
    assert cfg.trainer.args["learning_rate"] == 2e-4  # the command line beats the environment
    with pytest.raises(ConfigError) as err:
        tc.load_config([base], environ={"VF_RL__TRAINER__ARGS__LEARNIN_RATE": "1e-4"})
    assert str(err.value) == "unknown key 'trainer.args.learnin_rate'; did you mean 'learning_rate'?"


def test_help_lists_every_key_with_its_default(capsys):
    with pytest.raises(SystemExit):
        tc.parse_command_line(["-h"], "vf-rl", {}, "Start things.")
    out = capsys.readouterr().out
    for f in dataclasses.fields(RLConfig):
        if f.name != "grpo_args":
            name = (
                f"trainer.args.wandb.{f.name[6:]}"
                if f.name.startswith("wandb_")
                else f"trainer.args.{f.name}"
            )
            assert f"  {name} [" in out, name
    assert "  trainer.args.learning_rate [1e-05]" in out  # RLConfig's LoRA preset
    assert "  trainer.args.epsilon [0.2]" in out  # a GRPOConfig field passed through
    assert '  inference.host ["127.0.0.1"]' in out and "  model [(required)]" in out
    assert (
        "  inference.max_restarts [3]\n      Times vf-rl restarts a server that dies during training" in out
    )
    assert "VF_RL__TRAINER__ARGS__LEARNING_RATE=1e-4" in out and "--no-" in out
