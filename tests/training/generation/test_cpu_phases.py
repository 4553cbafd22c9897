"""cpu_phases: generation and training take turns when the server computes on the trainer's CPU."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from verifiers.errors import ConfigError
from verifiers.training.generation.cpu_phases import choose_phases, describe, plan_phases


def plan(setting, ahead=1, server="cpu", same=True, trainer="cpu"):
    return plan_phases(setting, ahead, server_device=server, same_machine=same, trainer_device=trainer)


def test_auto_takes_turns_only_when_both_compute_on_this_cpu():
    assert plan("auto").exclusive and plan("auto").num_batches_ahead == 0
    assert plan("auto", ahead=2).num_batches_ahead == 0
    # A GPU server, a server on another machine, or a GPU trainer: overlap as configured.
    for kw in (dict(server="cuda"), dict(same=False), dict(trainer="cuda")):
        p = plan("auto", ahead=1, **kw)
        assert not p.exclusive and p.num_batches_ahead == 1, kw


def test_explicit_settings_win():
    assert plan("exclusive", server="cuda", same=False).num_batches_ahead == 0
    p = plan("overlap", ahead=2)
    assert not p.exclusive and p.num_batches_ahead == 2


def test_the_log_line_says_what_num_batches_ahead_becomes():
    line = describe(plan("auto", ahead=1), 1, threads=2)
    assert "take turns" in line and "num_batches_ahead=1 acts as 0" in line and "2 torch threads" in line
    assert "cpu_phases='overlap'" in line  # the way out
    assert "acts as" not in describe(plan("auto", ahead=0), 0, threads=2)
    assert describe(plan("overlap"), 1, threads=2).startswith("generation overlaps training")


class Client:
    def __init__(self, device="cpu", same=True):
        self.device, self.same, self.asked = device, same, 0

    def server_device(self):
        self.asked += 1
        return self.device

    def shares_machine(self):
        return self.same


def args(setting="auto", ahead=1, device="cpu"):
    return SimpleNamespace(cpu_phases=setting, num_batches_ahead=ahead, device=SimpleNamespace(type=device))


def test_choose_phases_asks_the_server_and_logs_one_line(caplog):
    with caplog.at_level(logging.INFO, logger="verifiers.training.generation.cpu_phases"):
        assert choose_phases(args(), Client()).num_batches_ahead == 0
    assert len(caplog.records) == 1 and "take turns" in caplog.records[0].getMessage()
    assert choose_phases(args(), Client(device="cuda")).num_batches_ahead == 1
    assert choose_phases(args(), Client(same=False)).num_batches_ahead == 1
    quiet = Client()
    assert choose_phases(args("overlap"), quiet).num_batches_ahead == 1 and quiet.asked == 0


def test_a_client_that_cannot_tell_keeps_the_configured_overlap():
    assert choose_phases(args(), object()).num_batches_ahead == 1


def test_unknown_setting_is_refused_with_the_choices():
    from verifiers.training.config.fields import grpo_defaults

    with pytest.raises(ConfigError, match=r"cpu_phases='sometimes'.*auto, exclusive, overlap"):
        grpo_defaults("x", output_dir="/tmp/vf-cpu-phases", report_to="none", cpu_phases="sometimes")


def test_vf_rl_shows_the_choice_once_in_its_output(capsys, monkeypatch):
    import logging

    from verifiers.training.rl.output import show_choices
    from verifiers.utils.logging import setup_logging

    root, phases = (
        logging.getLogger("verifiers"),
        logging.getLogger("verifiers.training.generation.cpu_phases"),
    )
    saved, disabled = list(root.handlers), phases.disabled
    root.handlers = []  # no logging set up (earlier tests may have left handlers)
    monkeypatch.delenv("RANK", raising=False)  # the main process prints
    phases.disabled = False  # another test's logging.config.dictConfig may have disabled it
    try:
        show_choices()
        show_choices()  # idempotent
        choose_phases(args(), Client())  # no logging set up (vf-rl's trainer): printed
        out, err = capsys.readouterr()
        assert out.count("take turns") == 1 and "take turns" not in err
        setup_logging("WARNING")  # the user's own logging: printed once, there
        choose_phases(args(), Client())
        out, err = capsys.readouterr()
        assert "take turns" not in out and err.count("take turns") == 1
    finally:
        root.handlers, phases.disabled = saved, disabled
