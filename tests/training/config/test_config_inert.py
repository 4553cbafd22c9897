"""GRPOConfig is inert: constructing it checks and derives, and nothing else.

No hook on assignment, no patched ``__init__``, no process-group or exit side effects
(``start_training_processes`` does those where training starts); fields assigned after
construction reach training through ``assigned.resolved_config``, a new config, and the
user's object is never changed.
"""

from __future__ import annotations

import copy
import pickle

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from verifiers.errors import ConfigError  # noqa: E402
from verifiers.training import processes  # noqa: E402
from verifiers.training.config import assigned  # noqa: E402
from verifiers.training.config.fields import GRPOConfig, grpo_defaults  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_process_no_gpu")  # tests/training/config/conftest.py


def make(**kw) -> GRPOConfig:
    kw.setdefault("report_to", "none")
    kw.setdefault("output_dir", "/tmp/vf-test-inert")
    return grpo_defaults("inert", **kw)


def test_the_class_has_no_assignment_hook_and_its_generated_init():
    assert "__setattr__" not in GRPOConfig.__dict__
    assert not hasattr(GRPOConfig.__init__, "__wrapped__")  # not a wrapper around the dataclass init
    with pytest.raises(ConfigError, match=r"GRPOConfig has no field 'use_vllm' \(a TRL setting\)"):
        GRPOConfig(output_dir="/tmp/x", use_vllm=True)
    with pytest.raises(ConfigError, match=r"did you mean 'num_generations'"):
        GRPOConfig(output_dir="/tmp/x", num_generation=4)


def test_construction_touches_no_process_group_and_registers_nothing_at_exit(monkeypatch):
    calls = []
    monkeypatch.setattr(processes, "apply_collective_timeout", lambda s: calls.append(("timeout", s)))
    monkeypatch.setattr(processes, "destroy_group_at_exit", lambda: calls.append(("atexit",)))
    args = make()
    args.resolve()
    assert calls == []
    processes.start_training_processes(args)  # what GRPOTrainer.__init__ calls
    assert calls == [("timeout", args.ddp_timeout), ("atexit",)]


def test_resolve_builds_a_new_config_and_leaves_the_users_alone():
    args = make()
    args.num_generations = 16
    args.gradient_accumulation_steps = 8
    args.max_prompt_length = None  # a 0.1.x script: derive it again
    args.max_seq_len = 300
    new = args.resolve()
    assert new is not args
    assert (new.generation_batch_size, new.steps_per_generation, new.max_prompt_length) == (64, 8, 150)
    assert (args.generation_batch_size, args.steps_per_generation) == (32, 4)  # as constructed
    assert args.max_prompt_length is None and args.num_generations == 16  # as assigned


def test_only_changed_fields_are_passed_again():
    args = make()
    kwargs = assigned.current_values(args)
    for name in ("generation_batch_size", "steps_per_generation", "epsilon_high", "max_prompt_length"):
        assert name not in kwargs  # derived, still as derived
    assert "learning_rate" not in kwargs  # the field default
    assert kwargs["warmup_steps"] == 10  # the preset's, not the default
    assert assigned.resolved_config(args).to_dict() == args.to_dict()


def test_epochs_are_turned_into_steps_on_a_new_config():
    args = make(max_steps=-1, num_train_epochs=2)
    # 10 prompts × 8 completions = 80 samples, 32 a step: 3 steps an epoch, 6 in all
    new = assigned.with_epoch_steps(args, dataset_len=10)
    assert new.max_steps == 6 and args.max_steps == -1
    counted_in_steps = make(max_steps=7)
    assert assigned.with_epoch_steps(counted_in_steps, 10) is counted_in_steps


def test_copies_and_pickles_keep_working():
    args = make()
    args.num_generations = 16
    for copied in (copy.deepcopy(args), pickle.loads(pickle.dumps(args))):
        assert copied.num_generations == 16
        assert copied.resolve().num_generations == 16


def test_a_config_pickled_before_the_record_takes_every_value_as_given():
    args = make()
    del args.__dict__["_derived"]  # as unpickled from a version that kept none
    args.max_seq_len = 8192
    assert args.resolve().max_prompt_length == 512  # kept: no record says it was derived
