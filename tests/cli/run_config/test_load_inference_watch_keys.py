"""vf-rl's [inference] keys that bound the server's hang watch, ``hang_timeout_s`` and
``progress_timeout_s``, as the run config reads them (verifiers/cli/run_config/load.py): defaults
that follow the trainer's waits, and each bad value in one line. Tier 1 (TOML text parsed, nothing
started)."""

from __future__ import annotations

import pytest

from verifiers.errors import ConfigError


def parse(**inference):
    from tests.doubles.configs import RL_CONFIG as CONFIG
    from verifiers.cli.run_config import load as tc

    raw = tc.tomllib.loads(CONFIG)
    trainer_args = inference.pop("trainer_args", {})
    raw["inference"].update(inference)
    raw["trainer"].setdefault("args", {}).update(trainer_args)
    return tc.parse_config(raw).inference


def test_bounds_default_and_are_read_from_the_inference_table():
    assert (parse().hang_timeout_s, parse().progress_timeout_s) == (60.0, 120.0)
    cfg = parse(hang_timeout_s=15, progress_timeout_s=0)
    assert (cfg.hang_timeout_s, cfg.progress_timeout_s) == (15.0, 0.0)
    # defaults fit a short trainer wait: half of it
    assert parse(trainer_args={"vllm_server_timeout": 100}).progress_timeout_s == 50.0


@pytest.mark.parametrize(
    "inference, message",
    [
        (
            {"hang_timeout_s": -1},
            "inference.hang_timeout_s = -1 (an integer) must be a number of seconds >= 0",
        ),
        ({"progress_timeout_s": "60"}, 'inference.progress_timeout_s = "60" (a string) must be a number'),
        ({"hang_timeout_s": True}, "inference.hang_timeout_s = true (a boolean) must be a number"),
        (
            {"hang_timeout_s": 300},
            "inference.hang_timeout_s = 300 must be below trainer.args.vllm_server_timeout (300 s)",
        ),
        (
            {"progress_timeout_s": 90, "trainer_args": {"sync_weights_timeout": 80}},
            "inference.progress_timeout_s = 90 must be below trainer.args.sync_weights_timeout (80 s)",
        ),
    ],
)
def test_a_bad_bound_is_one_line(inference, message):
    with pytest.raises(ConfigError) as err:
        parse(**inference)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
