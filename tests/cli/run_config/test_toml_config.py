"""The vf-rl TOML schema: parsing, overrides, nearest-key errors, types, batch rule, [[env]], vf-vllm flags."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.doubles.configs import RUN_CONFIG_BASE as BASE  # noqa: E402
from verifiers.cli.run_config import load as tc  # noqa: E402
from verifiers.errors import ConfigError  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "verifiers" / "configs" / "vf-rl").glob("*.toml"))


def parse(text: str = BASE, overrides: list[tuple[str, str]] = ()) -> tc.RunConfig:
    raw = tc.tomllib.loads(text)
    tc.apply_overrides(raw, overrides)
    return tc.parse_config(raw)


def error(text: str = BASE, overrides: list[tuple[str, str]] = ()) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, overrides)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_parses_the_documented_schema():
    cfg = parse()
    assert cfg.model == "smollm2"
    assert cfg.envs == [
        tc.EnvConfig(id="reverse-text", args={"num_train_examples": 8}, weight=1.0, name="reverse-text")
    ]
    assert (cfg.inference.gpus, cfg.inference.host, cfg.inference.port) == (0, "127.0.0.1", 8000)
    assert cfg.inference.args == {"enforce_eager": True}
    assert cfg.trainer.gpus == 0 and cfg.trainer.num_processes == 1
    # run_name defaults to the environment; the server address reaches the trainer
    assert cfg.run_name == "reverse-text" and cfg.output_dir == Path("outputs/reverse-text")
    rl = cfg.rl_config()
    assert (rl.batch_size, rl.micro_batch_size, rl.rollouts_per_example, rl.max_steps) == (16, 4, 4, 3)
    assert (rl.vllm_server_host, rl.vllm_server_port) == ("127.0.0.1", 8000)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_config_parses(path):
    cfg = tc.load_config(path)
    # reverse-text.toml / wiki-search.toml are the guides' GPU recipes (hub-style ids, as written);
    # reverse-text-cpu.toml and reverse-text-1gpu.toml are the CPU and one-GPU recipes of the same environment
    env = path.stem.removesuffix("-cpu").removesuffix("-1gpu")
    assert cfg.envs[0].id.removeprefix("primeintellect/") == env and cfg.run_name == env
    cfg.rl_config()


def test_examples_cover_the_bundled_environments():
    expected = {"arithmetic", "reverse-text", "alphabet-sort", "gsm8k", "math-python", "wiki-search"}
    expected |= {"wordle", "tool-test", "calculator", "number-guess"}
    assert {p.stem.removesuffix("-cpu").removesuffix("-1gpu") for p in EXAMPLES} == expected


def test_trainer_args_split_into_rlconfig_fields_grpo_fields_and_wandb():
    cfg = parse(
        BASE
        + 'epsilon = 0.3\nseed = 7\nlora_rank = 4\nreport_to = "wandb"\n'
        + '[trainer.args.wandb]\nproject = "p"\nname = "n"\n'
    )
    rl = cfg.rl_config()
    assert rl.lora_rank == 4
    assert rl.grpo_args == {"epsilon": 0.3, "seed": 7}
    assert (rl.wandb_project, rl.wandb_name) == ("p", "n")


def test_wandb_settings_without_wandb_reporting_are_refused():
    with pytest.raises(ConfigError) as err:
        parse(BASE + 'report_to = "none"\n[trainer.args.wandb]\nproject = "p"\n')
    assert "wandb_project='p' is set but report_to='none' does not include 'wandb'" in str(err.value)


# -- overrides --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("5", 5),
        ("1e-5", 1e-5),
        ("true", True),
        ('"5"', "5"),
        ('["q_proj", "v_proj"]', ["q_proj", "v_proj"]),
        ("smollm2", "smollm2"),
        ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
        ("{ a = 1 }", {"a": 1}),
    ],
)
def test_override_values_are_toml_literals_else_strings(text, value):
    assert tc.parse_value(text) == value


def test_overrides_set_nested_keys_and_create_tables():
    cfg = parse(
        overrides=[
            ("trainer.args.max_steps", "5"),
            ("model", "other-model"),
            ("inference.args.max_model_len", "2048"),
            ("trainer.args.report_to", "wandb"),
            ("trainer.args.wandb.project", "proj"),
            ("env.0.args.num_eval_examples", "2"),  # index 0 also reaches a single [env] table
        ]
    )
    assert cfg.rl_config().max_steps == 5 and cfg.model == "other-model"
    assert cfg.inference.args == {"enforce_eager": True, "max_model_len": 2048}
    assert cfg.rl_config().wandb_project == "proj"
    assert cfg.envs[0].args == {"num_train_examples": 8, "num_eval_examples": 2}


def test_override_of_an_unknown_key_suggests_the_nearest():
    assert error(overrides=[("trainer.args.max_step", "5")]) == (
        "unknown key 'trainer.args.max_step'; did you mean 'max_steps'?"
    )


def test_override_index_into_env_list():
    text = BASE.replace("[env]", "[[env]]") + '\n[[env]]\nid = "alphabet-sort"\n'
    cfg = parse(text, overrides=[("env.1.weight", "3")])
    assert [e.weight for e in cfg.envs] == [1.0, 3.0]
    assert "is a list of 2 tables" in error(text, overrides=[("env.id", "x")])
    assert "is a list of 2 tables" in error(text, overrides=[("env.5.id", "x")])


# -- unknown keys, at every level -------------------------------------------------------------


@pytest.mark.parametrize(
    "bad, expected",
    [
        ('modle = "x"\n' + BASE, "unknown key 'modle'; did you mean 'model'?"),
        (
            BASE.replace('id = "reverse-text"', 'idd = "reverse-text"\nid = "x"'),
            "unknown key 'env.idd'; did you mean 'id'?",
        ),
        (
            BASE.replace("gpus = 0\n\n[inference.args]", "gpu = 0\n\n[inference.args]"),
            "unknown key 'inference.gpu'; did you mean 'gpus'?",
        ),
        (
            BASE.replace("[trainer]\ngpus = 0", "[trainer]\ngpsu = 0"),
            "unknown key 'trainer.gpsu'; did you mean 'gpus'?",
        ),
        (
            BASE + "learning_rat = 1e-5\n",
            "unknown key 'trainer.args.learning_rat'; did you mean 'learning_rate'?",
        ),
        (
            BASE + "epsilon_hgh = 0.3\n",
            "unknown key 'trainer.args.epsilon_hgh'; did you mean 'epsilon_high'?",
        ),
        (
            BASE + '[trainer.args.wandb]\nprojct = "p"\n',
            "unknown key 'trainer.args.wandb.projct'; did you mean 'project'?",
        ),
    ],
)
def test_unknown_keys_name_the_nearest_valid_key(bad, expected):
    assert error(bad) == expected


def test_unknown_key_without_a_near_match_lists_valid_keys():
    assert "valid keys here: id, args, weight, name" in error(
        BASE.replace('id = "reverse-text"', 'id = "x"\nzzz = 1')
    )
    assert "neither an RLConfig nor a GRPOConfig field" in error(BASE + "qqqqqq = 1\n")


def test_renamed_grpo_fields_point_to_the_vf_rl_name():
    assert "set trainer.args.rollouts_per_example instead" in error(BASE + "num_generations = 4\n")
    assert "set trainer.args.micro_batch_size instead" in error(BASE + "per_device_train_batch_size = 4\n")


# -- types ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line, expected",
    [
        ('save_steps = "5"', "key 'trainer.args.save_steps' must be an integer, got \"5\" (a string)"),
        ("save_steps = 5.5", "key 'trainer.args.save_steps' must be an integer, got 5.5 (a number)"),
        (
            'learning_rate = "1e-5"',
            "key 'trainer.args.learning_rate' must be a number, got \"1e-5\" (a string)",
        ),
        ("use_lora = 1", "key 'trainer.args.use_lora' must be a boolean, got 1 (an integer)"),
        (
            "lora_target_modules = [1]",
            "key 'trainer.args.lora_target_modules' must be a list of strings",
        ),
        ("report_to = 3", "key 'trainer.args.report_to' must be a string or a list of strings, got 3"),
        ("epsilon = true", "key 'trainer.args.epsilon' must be a number, got true (a boolean)"),
    ],
)
def test_type_errors_name_key_value_and_expected_type(line, expected):
    assert error(BASE + line + "\n").startswith(expected)


def test_type_errors_outside_trainer_args():
    assert (
        error(BASE.replace('model = "smollm2"', "model = 3"))
        == "key 'model' must be a string, got 3 (an integer)"
    )
    assert error(overrides=[("inference.gpus", '"0"')]) == (
        "key 'inference.gpus' must be an integer, got \"0\" (a string)"
    )
    raw = tc.tomllib.loads(BASE)
    raw["trainer"]["args"] = 3
    with pytest.raises(ConfigError, match="'trainer.args' must be a table, got 3"):
        tc.parse_config(raw)


def test_missing_model_or_env():
    assert "sets no model" in error(BASE.replace('model = "smollm2"', ""))
    no_env = BASE.replace('[env]\nid = "reverse-text"\nargs = { num_train_examples = 8 }', "")
    assert "has no [env] table" in error(no_env)
    assert "env has no id" in error(BASE.replace('id = "reverse-text"', ""))


def test_negative_gpus_is_refused():
    assert "trainer.gpus = -1 must be >= 0" in error(
        BASE.replace("[trainer]\ngpus = 0", "[trainer]\ngpus = -1")
    )


def test_inference_max_restarts_defaults_to_3_and_refuses_negatives_and_non_integers():
    assert parse().inference.max_restarts == 3
    assert parse(overrides=[("inference.max_restarts", "0")]).inference.max_restarts == 0
    message = error(overrides=[("inference.max_restarts", "-1")])
    assert message.startswith("inference.max_restarts = -1 must be >= 0 (0 ends the run")
    assert error(overrides=[("inference.max_restarts", "1.5")]) == (
        "key 'inference.max_restarts' must be an integer, got 1.5 (a number)"
    )
    assert "did you mean 'max_restarts'" in error(overrides=[("inference.max_restart", "2")])


# -- the batch rule ---------------------------------------------------------------------------


def test_batch_rule_counts_trainer_gpus():
    two_gpus = BASE.replace("[trainer]\ngpus = 0", "[trainer]\ngpus = 2")
    assert parse(two_gpus.replace("batch_size = 16", "batch_size = 32")).trainer.num_processes == 2
    message = error(two_gpus.replace("batch_size = 16", "batch_size = 20"))
    assert message.startswith(
        "batch_size=20 is not divisible by micro_batch_size × max(trainer.gpus, 1) = 4 × 2 = 8"
    )
    assert "batch_size = 16 or 24" in message


def test_batch_rule_needs_whole_groups():
    message = error(
        BASE.replace("rollouts_per_example = 4", "rollouts_per_example = 6").replace(
            "batch_size = 16", "batch_size = 16"
        )
    )
    assert message.startswith("batch_size=16 is not divisible by rollouts_per_example=6")


def test_batch_rule_uses_rlconfig_defaults_for_missing_keys():
    # defaults: micro_batch_size 8, rollouts_per_example 8; batch_size 12 breaks the rule
    text = BASE.replace(
        "rollouts_per_example = 4\nmicro_batch_size = 4\nbatch_size = 16\n", "batch_size = 12\n"
    )
    assert error(text).startswith("batch_size=12 is not divisible by micro_batch_size")


def test_other_rlconfig_rules_are_prefixed_with_the_table():
    assert error(BASE + "max_prompt_len = 4096\n").startswith("trainer.args: max_prompt_len=4096 must be")


# -- [[env]] lists ----------------------------------------------------------------------------

MULTI = (
    BASE.replace('[env]\nid = "reverse-text"\nargs = { num_train_examples = 8 }', "")
    + """
[[env]]
id = "reverse-text"
weight = 2.0
args = { num_train_examples = 8 }

[[env]]
id = "alphabet-sort"
weight = 1

[[env]]
id = "reverse-text"
name = "reverse-text-long"
"""
)


def test_env_list_with_weights_and_names():
    cfg = parse(MULTI)
    assert [(e.id, e.name, e.weight) for e in cfg.envs] == [
        ("reverse-text", "reverse-text", 2.0),
        ("alphabet-sort", "alphabet-sort", 1.0),
        ("reverse-text", "reverse-text-long", 1.0),
    ]
    assert cfg.run_name == "reverse-text-alphabet-sort-reverse-text-long"


def test_env_list_rejects_duplicate_names_and_bad_weights():
    assert "both named 'reverse-text'" in error(MULTI.replace('name = "reverse-text-long"\n', ""))
    assert "env.1.weight = 0 must be > 0" in error(MULTI.replace("weight = 1\n", "weight = 0\n"))
    assert "key 'env.0.weight' must be a number" in error(MULTI.replace("weight = 2.0", 'weight = "2"'))


# -- server address and vf-vllm flags ---------------------------------------------------------


def test_port_may_be_set_in_one_place_or_agreeing_places():
    assert (
        parse(BASE.replace("[inference]\n", "[inference]\nport = 8123\n")).rl_config().vllm_server_port
        == 8123
    )
    assert (
        parse(BASE.replace("enforce_eager = true", "enforce_eager = true\nport = 8124")).inference.port
        == 8124
    )
    cfg = parse(BASE + "vllm_server_port = 8125\n", overrides=[("inference.port", "8125")])
    assert cfg.inference.port == 8125 and "port" not in cfg.inference.args
    message = error(BASE + "vllm_server_port = 9001\n", overrides=[("inference.port", "9000")])
    assert message.startswith("inference.port = 9000 and trainer.args.vllm_server_port = 9001 disagree")
    assert "not a TCP port" in error(overrides=[("inference.port", "70000")])


def test_model_in_inference_args_is_refused():
    assert "'inference.args.model' is not allowed" in error(overrides=[("inference.args.model", "x")])


def test_inference_flags():
    flags = tc.inference_flags(
        {
            "enforce_eager": True,
            "no_enable_prefix_caching": True,
            "tool_call_parser": "hermes",
            "max_model_len": 1024,
            "gpu_memory_utilization": 0.5,
            "lora_modules": ["a=/x", "b=/y"],
            "hf_overrides": {"rope_theta": 10000},
        }
    )
    assert flags == [
        "--enforce-eager",
        "--no-enable-prefix-caching",
        "--tool-call-parser", "hermes",
        "--max-model-len", "1024",
        "--gpu-memory-utilization", "0.5",
        "--lora-modules", "a=/x",
        "--lora-modules", "b=/y",
        "--hf-overrides", '{"rope_theta": 10000}',
    ]  # fmt: skip


def test_false_inference_flags_follow_vllms_parser():
    """``key = false`` is passed on (never dropped) where vLLM has an off form, refused where it has none."""
    pytest.importorskip("vllm")
    assert tc.inference_flags({"enforce_eager": False, "enable_prefix_caching": False}) == [
        "--no-enforce-eager",
        "--no-enable-prefix-caching",
    ]
    assert tc.inference_flags({"no_enable_chunked_prefill": False}) == ["--enable-chunked-prefill"]
    assert tc.inference_flags({"disable_log_stats": False}) == []  # a switch that is off unless given
    for args, expected in (
        (
            {"max_model_len": False},
            "inference.args.max_model_len = false: vf-vllm's --max-model-len takes a value",
        ),
        ({"enforce_eagr": False}, "inference.args.enforce_eagr = false: vf-vllm has no flag --enforce-eagr"),
        ({"disable_log_requests": False}, "inference.args.disable_log_requests = false: vLLM retired"),
    ):
        with pytest.raises(ConfigError) as info:
            tc.inference_flags(args)
        assert str(info.value).startswith(expected) and "\n" not in str(info.value), info.value
    with pytest.raises(ConfigError, match="did you mean enforce_eager"):
        tc.inference_flags({"enforce_eagr": False})


def test_resume_from_checkpoint_is_kept_for_train_and_checked_up_front(tmp_path):
    from verifiers.training.lifecycle import checkpoint as ckpt

    out = tmp_path / "out"
    with_out = BASE + f'output_dir = "{out}"\n'
    assert parse(with_out).trainer.resume_from_checkpoint is None
    message = error(with_out + "resume_from_checkpoint = true\n")
    assert message.startswith(f"trainer.args.resume_from_checkpoint = true, but output_dir {out}: it holds")
    (out / "checkpoint-2").mkdir(parents=True)
    message = error(with_out + "resume_from_checkpoint = true\n")
    assert "none of checkpoint-2 is complete" in message
    ckpt.mark_complete(out / "checkpoint-2", 2)
    config = parse(with_out + "resume_from_checkpoint = true\n")
    assert config.trainer.resume_from_checkpoint is True
    assert "resume_from_checkpoint" not in config.trainer.args  # an argument of train(), not of RLConfig
    assert config.rl_config().to_grpo_config().resume_from_checkpoint is None
    folder = str(out / "checkpoint-2")
    assert parse(with_out + f'resume_from_checkpoint = "{folder}"\n').trainer.resume_from_checkpoint == folder
    assert parse(with_out + "resume_from_checkpoint = false\n").trainer.resume_from_checkpoint is None
    assert 'resume_from_checkpoint = "nope": no such folder' in error(
        with_out + 'resume_from_checkpoint = "nope"\n'
    )
    assert "must be a boolean or a string, got 5" in error(with_out + "resume_from_checkpoint = 5\n")


def test_hub_style_env_id_names_the_task_and_run_by_the_plain_name():
    config = parse(BASE.replace('id = "reverse-text"', 'id = "primeintellect/reverse-text@0.1.0"'))
    assert config.envs[0].id == "primeintellect/reverse-text@0.1.0"
    assert config.envs[0].name == "reverse-text" and config.run_name == "reverse-text"


# -- files and the command line ---------------------------------------------------------------


def test_read_toml_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        tc.read_toml(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("model = \n")
    with pytest.raises(ConfigError, match=r"bad.toml is not valid TOML: .*line 1"):
        tc.read_toml(bad)


def test_command_line_forms():
    cli = tc.parse_command_line(
        [
            "@",
            "c.toml",
            "--dry-run",
            "--trainer.args.max_steps",
            "5",
            "--model=m",
            "--inference.args.enforce_eager",
        ],
        "vf-rl",
        {"--dry-run": "x"},
        "d",
    )
    assert cli.config == "c.toml" and cli.flags == {"--dry-run"}
    assert cli.overrides == [
        ("trainer.args.max_steps", "5"),
        ("model", "m"),
        ("inference.args.enforce_eager", "true"),
    ]
    assert cli.override_args() == [
        "--trainer.args.max_steps", "5", "--model", "m", "--inference.args.enforce_eager", "true",
    ]  # fmt: skip
    assert tc.parse_command_line(["@c.toml"], "vf-rl", {}, "d").config == "c.toml"


@pytest.mark.parametrize(
    "argv, expected",
    [
        ([], "no config file given"),
        (["c.toml"], "unexpected argument 'c.toml'"),
        (["@"], "'@' must be followed by a config file"),
        (["@", "a.toml", "@a.toml"], r"two config files given are the same file \(a.toml\)"),
        (["@", "a.toml", "--"], "unexpected argument '--'"),
    ],
)
def test_command_line_errors(argv, expected):
    with pytest.raises(ConfigError, match=expected):
        tc.parse_command_line(argv, "vf-rl", {}, "d")


def test_help_exits_zero(capsys):
    with pytest.raises(SystemExit) as info:
        tc.parse_command_line(["--help"], "vf-rl", {"--dry-run": "print only"}, "Start things.")
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: vf-rl @ CONFIG.toml" in out and "--dry-run" in out and "--trainer.args.max_steps 5" in out
