"""vf-rl's plan (verifiers/cli/rl/plan.py): what the trainer is told of the server's chat template
(``$VF_CHAT_TEMPLATE``). Tier 1 (a pure function)."""

from __future__ import annotations

from verifiers.tokenization.chat_template import ENV_VAR


def test_vf_rl_gives_the_trainer_the_servers_template():
    from verifiers.cli.rl.plan import trainer_template_env

    assert trainer_template_env({}) == {}
    assert trainer_template_env({"no_tool_template": False}) == {}
    assert trainer_template_env({"no_tool_template": True}) == {ENV_VAR: "model"}
    assert trainer_template_env({"chat_template": "t.jinja"}) == {ENV_VAR: "t.jinja"}
