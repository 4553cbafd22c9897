"""vf-rl's [trainer] keys that drive the trainer watch, ``max_restarts`` and ``hang_timeout_s``, as the
run config reads them (verifiers/cli/run_config/load.py): defaults, and each bad value in one line.
Tier 1 (TOML text parsed, nothing started)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from tests.doubles.configs import RL_CONFIG as CONFIG  # noqa: E402
from verifiers.cli.rl.trainer_watch import (  # noqa: E402
    HANG_MARGIN_S,
    LIVE_BOUND_S,
    hang_bound,
)
from verifiers.cli.run_config import load as tc  # noqa: E402
from verifiers.errors import ConfigError  # noqa: E402
from verifiers.training.lifecycle import heartbeat as hb  # noqa: E402


def parse(**trainer_keys):
    raw = tc.tomllib.loads(CONFIG)
    raw["trainer"].update(trainer_keys)
    return tc.parse_config(raw)


def test_trainer_keys_defaults():
    config = parse()
    assert config.trainer.max_restarts == 3 and config.trainer.hang_timeout_s is None
    # unset: the trainer's 30-minute checkpoint-write floor (above the 300 s server wait) + margin
    assert hang_bound(config) == 1800 + HANG_MARGIN_S
    assert hang_bound(parse(hang_timeout_s=90)) == 90.0
    assert hang_bound(parse(hang_timeout_s=0)) is None
    assert parse(max_restarts=0).trainer.max_restarts == 0
    assert LIVE_BOUND_S >= 10 * hb.LIVE_BEAT_S


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"max_restarts": -1}, "trainer.max_restarts = -1 must be >= 0"),
        ({"max_restarts": "3"}, "key 'trainer.max_restarts' must be an integer, got \"3\" (a string)"),
        ({"max_restarts": 1.5}, "key 'trainer.max_restarts' must be an integer, got 1.5 (a number)"),
        ({"hang_timeout_s": -5}, "trainer.hang_timeout_s = -5 must be >= 0 and finite"),
        ({"hang_timeout_s": "10m"}, "key 'trainer.hang_timeout_s' must be a number, got \"10m\" (a string)"),
        ({"hang_timeout": 60}, "unknown key 'trainer.hang_timeout'; did you mean 'hang_timeout_s'?"),
    ],
)
def test_bad_trainer_keys_are_one_line(keys, message):
    with pytest.raises(ConfigError) as err:
        parse(**keys)
    assert err.value.message == message
