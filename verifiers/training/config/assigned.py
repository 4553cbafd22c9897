"""Fields assigned after construction (the 0.1.x habit), resolved into a new config for training.

0.1.x scripts write ``args = vf.grpo_defaults(...)`` and then ``args.num_generations = 12``,
``args.max_prompt_length = None``, ... . ``GRPOConfig`` is a plain dataclass: such an
assignment changes the field and nothing else, so the values ``__post_init__`` derived from
it (batch layout, ``epsilon_high``, ``max_prompt_length``, ``eval_steps``, ``ddp_timeout``)
and its checks are out of date. ``GRPOTrainer`` therefore trains with
:func:`resolved_config`: a NEW config constructed from the object's current values, so every
check and derivation (TrainingArguments' own included) runs again through the constructor.
The user's object is never changed.

Which values are the user's: ``__post_init__`` records what it derived (``_derived``). A derived
field whose value is still the one derived is passed as None, so it is derived again from the
new values; any other value (given at construction, or assigned since) is the user's and kept.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

# Fields whose stored value may be derived from others (None = derive). ``GRPOConfig.__post_init__``
# records in ``_derived`` which of them it derived, so a later assignment can be told from a derivation.
DERIVED_FIELDS = (
    "generation_batch_size",
    "steps_per_generation",
    "epsilon_high",
    "max_prompt_length",
    "max_tokens",
    "max_completion_length",
    "eval_steps",  # TrainingArguments': None -> logging_steps under eval_strategy="steps"
    "ddp_timeout",  # None -> collective.collective_timeout
)


def current_values(args: Any) -> dict[str, Any]:
    """The constructor keywords that rebuild ``args`` from its current values: only fields that
    differ from their default (TrainingArguments warns about deprecated fields that are set), and
    derived fields still as derived left out (None: derived again)."""
    derived = getattr(args, "_derived", None)
    if derived is None:  # a config pickled by an older version: take every value as given
        derived = {}
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(args):
        if not f.init:
            continue
        value = getattr(args, f.name)
        if f.name in derived and _same(value, derived[f.name]):
            continue  # still as derived: the field default (None) derives it again
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = f.default
        if default is not dataclasses.MISSING and f.name not in DERIVED_FIELDS and _same(value, default):
            continue
        kwargs[f.name] = value
    return kwargs


def resolved_config(args: Any) -> Any:
    """A new ``GRPOConfig`` of ``args``' class (a ``GRPOConfig``), checked and derived from the values now on
    ``args`` (see the module docstring); raises ``ConfigError`` like the constructor."""
    return type(args)(**current_values(args))


def steps_for_epochs(args: Any, dataset_len: int) -> int:
    """``max_steps`` for a run counted in epochs (``max_steps <= 0``): ``num_train_epochs`` passes
    over ``dataset_len`` prompts, ``num_generations`` samples each, at least 1."""
    samples_per_step = args.per_device_train_batch_size * args.world_size * args.gradient_accumulation_steps
    steps_per_epoch = math.ceil(dataset_len * args.num_generations / samples_per_step)
    return max(1, math.ceil(args.num_train_epochs * steps_per_epoch))


def with_epoch_steps(args: Any, dataset_len: int) -> Any:
    """``args`` itself when it counts in steps; else a new config whose ``max_steps`` is
    :func:`steps_for_epochs` (the trainer hands one step count to every stage)."""
    if args.max_steps > 0:
        return args
    return type(args)(**{**current_values(args), "max_steps": steps_for_epochs(args, dataset_len)})


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) and type(a) is type(b) or (a is None and b is None)
    except Exception:  # a value without a usable == (e.g. an array): treat it as changed
        return False
