"""vf-rl's plan (verifiers/cli/rl/plan.py): what the trainer is told of the server's chat template
(``$VF_CHAT_TEMPLATE``), and the KV cache it asks the server for. Tier 1 (pure functions). (Its dry
runs: test_rl_cli.py, test_gpu_configs.py, test_shared_gpu.py.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from verifiers.tokenization.chat_template import ENV_VAR


def test_vf_rl_gives_the_trainer_the_servers_template():
    from verifiers.cli.rl.plan import trainer_template_env

    assert trainer_template_env({}) == {}
    assert trainer_template_env({"no_tool_template": False}) == {}
    assert trainer_template_env({"no_tool_template": True}) == {ENV_VAR: "model"}
    assert trainer_template_env({"chat_template": "t.jinja"}) == {ENV_VAR: "t.jinja"}


def test_vf_rl_asks_for_the_sequences_in_flight_times_max_seq_len():
    pytest.importorskip("transformers")
    from verifiers.cli.rl.plan import run_kv_tokens

    rl = SimpleNamespace(batch_size=32, max_concurrent=1024, max_seq_len=512)
    assert run_kv_tokens(rl) == 32 * 512
    assert run_kv_tokens(SimpleNamespace(batch_size=32, max_concurrent=8, max_seq_len=512)) == 8 * 512
    assert run_kv_tokens(rl, max_num_seqs=4) == 4 * 512
