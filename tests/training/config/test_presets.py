"""Each default is defined once: every entry point's GRPOConfig equals the presets table's values.

Entry points: ``GRPOConfig(...)`` (the field defaults), ``grpo_defaults()``,
``grpo_defaults(preset="small")``, ``RLConfig().to_grpo_config()`` and a minimal ``vf-rl`` TOML
through the run_config loader. For every GRPOConfig field, each one's value must be the table's
(``config/presets.py``) or, where the table has no row, the field's own default: a default set
anywhere else (an inline dict, an RLConfig field, the TOML layer) fails here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from verifiers.errors import ConfigError  # noqa: E402
from verifiers.training.config import fields as config_mod  # noqa: E402
from verifiers.training.config import presets  # noqa: E402
from verifiers.training.config.fields import GRPOConfig, grpo_defaults  # noqa: E402
from verifiers.training.config.presets import AUTO, FIELD, PRESET_TABLE, PRESETS  # noqa: E402
from verifiers.training.rl.config import RLConfig  # noqa: E402

DOCS = Path(__file__).resolve().parents[3] / "docs"
NAMING = {"output_dir", "run_name", "logging_dir"}  # per run, not defaults


@pytest.fixture(autouse=True)
def one_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(config_mod, "_bf16_accelerator", lambda: False)
    # RLConfig's AUTO reads transformers' own probe; pin it to the same answer.
    import transformers.utils

    monkeypatch.setattr(transformers.utils, "is_torch_bf16_gpu_available", lambda: False)


def expected(preset: str | None) -> GRPOConfig:
    """The GRPOConfig the table says ``preset`` gives (None: the plain field defaults)."""
    kwargs = {}
    if preset is not None:
        kwargs = {
            name: (False if value is AUTO else value) for name, value in presets.preset_values(preset).items()
        }
    return GRPOConfig(output_dir="/tmp/vf-presets", **kwargs)


def differences(got: GRPOConfig, want: GRPOConfig) -> list[str]:
    g, w = got.to_dict(), want.to_dict()
    return [
        f"{name}: {g[name]!r}, the table says {w[name]!r}"
        for name in w
        if name not in NAMING and g[name] != w[name]
    ]


def entry_points(tmp_path, monkeypatch) -> dict[str, tuple[str | None, GRPOConfig]]:
    # wandb present, so the "default" preset keeps its "wandb" (the fallback is tested below)
    monkeypatch.setattr(config_mod, "_installed", lambda module: True)
    from verifiers.cli.run_config.load import load_config

    toml = tmp_path / "cfg.toml"
    toml.write_text('model = "smollm2"\n\n[env]\nid = "reverse-text"\n')
    run = load_config([toml], environ={})
    return {
        "GRPOConfig()": (None, GRPOConfig(output_dir=str(tmp_path))),
        "grpo_defaults()": ("default", grpo_defaults("t")),
        'grpo_defaults(preset="small")': ("small", grpo_defaults("t", preset="small")),
        "RLConfig().to_grpo_config()": ("rl", RLConfig(output_dir=str(tmp_path)).to_grpo_config()),
        "vf-rl TOML": ("rl", run.rl_config().to_grpo_config(world_size=run.trainer.num_processes)),
    }


def test_every_entry_point_gives_the_tables_values(tmp_path, monkeypatch):
    problems = []
    for where, (preset, got) in entry_points(tmp_path, monkeypatch).items():
        problems += [f"{where}: {line}" for line in differences(got, expected(preset))]
    assert not problems, "\n".join(problems)


def test_the_comparison_sees_a_default_set_outside_the_table(tmp_path, monkeypatch):
    # The check above can fail: a grpo_defaults that slipped in its own value is caught.
    monkeypatch.setattr(config_mod, "_installed", lambda module: True)
    got = grpo_defaults("t", warmup_steps=3)
    assert differences(got, expected("default")) == ["warmup_steps: 3, the table says 10"]


def test_rlconfig_field_defaults_are_the_tables():
    """RLConfig's own fields that stand for GRPOConfig fields read the "rl" column (or the field default)."""
    for f in dataclasses.fields(RLConfig):
        grpo = f.metadata.get("grpo")
        if grpo is not None:
            assert f.default == config_mod.preset_default("rl", grpo), f.name
    rl = RLConfig()
    assert rl.batch_size == 8 * 8  # micro_batch_size × the table's gradient_accumulation_steps
    assert rl.num_samples_to_print == presets.preset_value("rl", "num_completions_to_print")


def test_the_documented_differences_have_their_values():
    """The differences the issue lists, as the table states them."""
    cell = {row.field: row for row in PRESET_TABLE}
    assert (cell["beta"].default, cell["beta"].small, cell["beta"].rl) == (FIELD, 0.0, 0.0)
    assert GRPOConfig.__dataclass_fields__["beta"].default == 0.001
    assert (
        cell["loss_type"].rl == "cispo" and GRPOConfig.__dataclass_fields__["loss_type"].default == "dr_grpo"
    )
    assert (
        cell["learning_rate"].rl == 1e-5 and GRPOConfig.__dataclass_fields__["learning_rate"].default == 1e-6
    )
    assert (
        cell["max_seq_len"].default == 4096 and GRPOConfig.__dataclass_fields__["max_seq_len"].default == 2048
    )


def test_samples_a_step_per_entry_point(tmp_path, monkeypatch):
    samples = {
        where: got.per_device_train_batch_size * got.gradient_accumulation_steps
        for where, (_, got) in entry_points(tmp_path, monkeypatch).items()
    }
    assert samples == {
        "GRPOConfig()": 8,
        "grpo_defaults()": 32,
        'grpo_defaults(preset="small")': 32,
        "RLConfig().to_grpo_config()": 64,
        "vf-rl TOML": 64,
    }


def test_table_rows_are_fields_with_a_difference_and_a_reason():
    names = [row.field for row in PRESET_TABLE]
    assert len(names) == len(set(names)), "a field has two rows"
    for row in PRESET_TABLE:
        assert row.field in GRPOConfig.__dataclass_fields__, row.field
        assert any(row.value(p) is not FIELD for p in PRESETS), f"{row.field}: a row that sets nothing"
        assert row.why.strip(), f"{row.field}: no reason given"


def test_unknown_preset_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"grpo_defaults: unknown preset 'tiny'") as info:
        grpo_defaults("x", preset="tiny")
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="unknown preset 'rl'"):
        grpo_defaults("x", preset="rl")  # the RLConfig column is RLConfig's, not grpo_defaults'


# -- wandb: a preset's falls back, the user's is refused ---------------------------------------


def test_a_presets_wandb_falls_back_when_wandb_is_missing(monkeypatch):
    monkeypatch.setattr(config_mod, "_installed", lambda module: module == "tensorboard")
    assert grpo_defaults("t").report_to == ["tensorboard"]
    monkeypatch.setattr(config_mod, "_installed", lambda module: False)
    assert grpo_defaults("t").report_to == []


def test_an_explicit_wandb_is_refused_when_wandb_is_missing(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a)
    )
    with pytest.raises(
        ConfigError, match=r"report_to='wandb' includes 'wandb' but wandb is not installed"
    ) as info:
        grpo_defaults("t", report_to="wandb")
    assert "\n" not in str(info.value) and "pip install wandb" in str(info.value)
    with pytest.raises(ConfigError, match="wandb is not installed"):
        RLConfig(output_dir=str(tmp_path), report_to="wandb").to_grpo_config()


# -- the generated docs table --------------------------------------------------------------------


def test_docs_show_the_table():
    text = (DOCS / "training.md").read_text(encoding="utf-8")
    assert presets.markdown_table() in text, (
        "docs/training.md's presets table is out of date: paste "
        "verifiers.training.config.presets.markdown_table() under '## Recommended settings'"
    )
