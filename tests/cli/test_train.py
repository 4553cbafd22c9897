"""vf-train (verifiers/cli/train.py): several environments load as one (weighted) EnvGroup, and bad
input is one error line. Tier 1 (environments built in process, no training)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.doubles.cli_errors import one_error  # noqa: E402
from verifiers.cli import train as train_cli  # noqa: E402
from verifiers.cli.run_config import load as tc  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_process")  # tests/cli/conftest.py


def test_load_envs_groups_several_environments(monkeypatch):
    from datasets import Dataset

    import verifiers as vf

    def fake_load(env_id, **args):
        n = args.get("n", 4)
        return vf.SingleTurnEnv(dataset=Dataset.from_dict({"question": [f"{env_id}{i}" for i in range(n)]}))

    monkeypatch.setattr(vf, "load_environment", fake_load)
    specs = [tc.EnvConfig("a", {"n": 8}, None, "a"), tc.EnvConfig("b", {"n": 2}, None, "b")]
    group = train_cli.load_envs(specs)  # no weights: each env's whole training set, once
    assert isinstance(group, vf.EnvGroup) and group.env_names == ["a", "b"] and len(group.dataset) == 10
    assert group.weights is None and list(group.dataset["task"]).count("b") == 2
    weighted = train_cli.load_envs(
        [tc.EnvConfig("a", {"n": 8}, 1.0, "a"), tc.EnvConfig("b", {"n": 2}, 4.0, "b")]
    )
    assert list(weighted.dataset["task"]).count("b") == 8
    single = train_cli.load_envs(specs[:1])
    assert not isinstance(single, vf.EnvGroup)


def test_vf_train_bad_input(tmp_path, config_file, capsys):
    assert "not found" in one_error(capsys, train_cli.main(["@", str(tmp_path / "nope.toml")]))
    line = one_error(capsys, train_cli.main(["@", str(config_file), "--trainer.args.lora_rnk", "4"]))
    assert line == "error: unknown key 'trainer.args.lora_rnk'; did you mean 'lora_rank'?"
