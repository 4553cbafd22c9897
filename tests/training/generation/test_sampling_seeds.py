"""``sampling_seeds``: per-rollout seeds on the requests, or none (issue 39, finding 7).

A seeded request makes vLLM's sampler draw its noise request by request every decode step
(``benchmarks/seeds.py`` measures the cost); the option turns the seeds off, and a bad value is
one ``ConfigError``. Pure and component tests: a fake env records the sampling arguments.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.doubles.generation import DATASET, FakeEnv, make_producer
from verifiers.errors import ConfigError
from verifiers.training.generation import generator as generator_module
from verifiers.training.generation.producer import producer_seed

pytest.importorskip("transformers")


def config(tmp_path, **kw):
    import verifiers as vf

    return vf.GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", seed=11, **kw)


def test_default_sends_a_seed_per_rollout_and_none_sends_none(tmp_path):
    assert config(tmp_path).sampling_seeds == "rollout"  # seeded runs stay reproducible by default
    assert producer_seed(config(tmp_path)) == 11
    assert producer_seed(config(tmp_path, sampling_seeds="none")) is None
    for mode, has_seed in (("rollout", True), ("none", False)):
        env = FakeEnv()
        asyncio.run(
            make_producer(env, seed=producer_seed(config(tmp_path, sampling_seeds=mode))).produce(0, 0)
        )
        assert env.calls and all(("seed" in c["sampling_args"]) == has_seed for c in env.calls), mode


def test_unknown_value_is_one_config_error(tmp_path):
    with pytest.raises(ConfigError) as err:
        config(tmp_path, sampling_seeds="group")
    assert "sampling_seeds='group'" in str(err.value) and "rollout, none" in str(err.value)
    assert "\n" not in err.value.message


def test_build_generator_hands_the_option_to_the_producer(tmp_path, monkeypatch):
    """The trainer's path: ``build_generator`` gives the producer ``producer_seed(args)``."""
    seen = {}

    class Stop(Exception):
        pass

    def recording_producer(*args, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(generator_module, "RolloutProducer", recording_producer)
    for mode, expected in (("rollout", 11), ("none", None)):
        args = config(tmp_path, sampling_seeds=mode, per_device_train_batch_size=4, num_generations=4)
        with pytest.raises(Stop):
            generator_module.build_generator(FakeEnv(), None, "m", DATASET, args, None, trained=0)
        assert seen["seed"] == expected, mode
