"""The batch rule, in one place: how rollouts are cut into micro-batches, optimizer steps and generation batches.

P = number of training processes.

- A *micro-batch* is ``per_device_train_batch_size`` samples on one process: one
  forward/backward pass.
- An *optimizer step* consumes ``per_device_train_batch_size × P ×
  gradient_accumulation_steps`` samples (the global step batch). It must be
  divisible by ``num_generations``, so every step trains on whole groups.
- A *generation batch* is what one round of ``env.a_generate`` produces:
  ``generation_batch_size = per_device_train_batch_size × P × steps_per_generation``
  samples, i.e. ``generation_batch_size / num_generations`` prompts. Give at most
  one of the two; by default ``steps_per_generation = gradient_accumulation_steps``
  (one generation batch per optimizer step). As in TRL and verifiers 0.1.x, a
  generation batch may cover more micro-steps than an optimizer step (a whole
  number of optimizer steps: ``steps_per_generation`` a multiple of
  ``gradient_accumulation_steps``) or fewer (a whole fraction of one:
  ``gradient_accumulation_steps`` a multiple of ``steps_per_generation``). In the
  second case one optimizer step is generated in ``rounds = gradient_accumulation_steps
  / steps_per_generation`` generation batches, one after the other, all from the
  same weights (nothing is synced within a step): ``generation_batch_size`` then
  bounds how many rollouts are generated at once, e.g. to spare the server's memory.
  :func:`generation_plan` says what the trainer fetches per optimizer step.

``RLConfig`` and the ``vf-rl`` TOML count the same thing in rollouts:
``rollouts_per_example`` is ``num_generations``, ``micro_batch_size`` is
``per_device_train_batch_size`` and ``batch_size`` is the global step batch, so
``gradient_accumulation_steps = batch_size / (micro_batch_size × P)``.
:func:`rollout_layout` translates those names and then applies
:func:`resolve_batch_layout`, the rule itself; ``GRPOConfig`` calls the latter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verifiers.training.config.rules import at_least, fail


@dataclass(frozen=True)
class BatchLayout:
    """The resolved sizes, in ``GRPOConfig``'s names, for ``num_processes`` processes."""

    num_generations: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    generation_batch_size: int
    steps_per_generation: int


def resolve_batch_layout(
    *,
    per_device_train_batch_size: int,
    num_processes: int,
    gradient_accumulation_steps: int,
    num_generations: int,
    generation_batch_size: int | None = None,
    steps_per_generation: int | None = None,
) -> tuple[int, int]:
    """Check the batch sizes against each other; return ``(generation_batch_size, steps_per_generation)``.

    Raises ``ConfigError`` naming the values and a fix. See the module docstring for the rule.
    """
    at_least("per_device_train_batch_size", per_device_train_batch_size, 1)
    at_least("gradient_accumulation_steps", gradient_accumulation_steps, 1)
    per_micro_step = per_device_train_batch_size * num_processes  # samples per micro-step, all processes
    step_batch = per_micro_step * gradient_accumulation_steps  # samples per optimizer step
    if step_batch % num_generations != 0:
        fail(
            f"the global batch per optimizer step, per_device_train_batch_size={per_device_train_batch_size} "
            f"× processes={num_processes} × gradient_accumulation_steps={gradient_accumulation_steps} "
            f"= {step_batch}, is not divisible by num_generations={num_generations}",
            f"choose sizes whose product is a multiple of {num_generations}",
        )
    both = generation_batch_size is not None and steps_per_generation is not None
    # Both set is fine when they agree (a config rebuilt from its own resolved values).
    if both and generation_batch_size != per_micro_step * steps_per_generation:
        fail(
            f"generation_batch_size={generation_batch_size} and steps_per_generation={steps_per_generation} "
            f"disagree (per_device_train_batch_size × processes × steps_per_generation = "
            f"{per_micro_step * steps_per_generation})",
            "set only one; the other follows from it",
        )

    def fits(steps: int) -> bool:  # a whole number of optimizer steps, or a whole fraction of one
        return steps >= 1 and (
            steps % gradient_accumulation_steps == 0 or gradient_accumulation_steps % steps == 0
        )

    if generation_batch_size is not None:
        whole = generation_batch_size >= 1 and generation_batch_size % per_micro_step == 0
        if not (whole and fits(generation_batch_size // per_micro_step)):
            fail(
                f"generation_batch_size={generation_batch_size} is neither a multiple nor a whole fraction of "
                f"the global batch per optimizer step ({step_batch}) in micro-steps of "
                f"per_device_train_batch_size × processes = {per_micro_step}",
                f"use one of {_sizes(per_micro_step, gradient_accumulation_steps)}, or a multiple of {step_batch}",
            )
        steps_per_generation = generation_batch_size // per_micro_step
    elif steps_per_generation is None:
        steps_per_generation = gradient_accumulation_steps
    elif not fits(steps_per_generation):
        fail(
            f"steps_per_generation={steps_per_generation} is neither a multiple nor a divisor of "
            f"gradient_accumulation_steps={gradient_accumulation_steps}",
            "a generation batch must be a whole number of optimizer steps, or a whole fraction of one",
        )
    if (per_micro_step * steps_per_generation) % num_generations != 0:
        fail(
            f"a generation batch of {per_micro_step * steps_per_generation} samples (per_device_train_batch_size"
            f" × processes × steps_per_generation) does not hold whole groups of num_generations={num_generations}",
            f"make the generation batch a multiple of {num_generations}",
        )
    return per_micro_step * steps_per_generation, steps_per_generation


def _sizes(per_micro_step: int, gradient_accumulation_steps: int) -> str:
    """The generation batch sizes up to one optimizer step's, for an error message."""
    steps = [d for d in range(1, gradient_accumulation_steps + 1) if gradient_accumulation_steps % d == 0]
    return ", ".join(str(per_micro_step * d) for d in steps)


@dataclass(frozen=True)
class GenerationPlan:
    """What the trainer fetches from the generator at a time (a *trained batch*).

    ``rounds``: generation batches generated one after the other for it (> 1 only when a
    generation batch is smaller than an optimizer step); ``micro_steps``: micro-steps
    trained on it per pass, ``max(steps_per_generation, gradient_accumulation_steps)``;
    ``samples``: its size, ``generation_batch_size × rounds``.
    """

    rounds: int
    micro_steps: int
    samples: int


def generation_plan(
    generation_batch_size: int, steps_per_generation: int, gradient_accumulation_steps: int
) -> GenerationPlan:
    """The trained batch for a resolved layout (see :class:`GenerationPlan`).

    Worked example (the guide's): ``per_device_train_batch_size=8``, one process,
    ``gradient_accumulation_steps=4``, ``generation_batch_size=16`` gives
    ``steps_per_generation=2``: each optimizer step (32 samples) is generated in
    2 rounds of 16, so ``GenerationPlan(rounds=2, micro_steps=4, samples=32)``.
    """
    rounds = max(1, gradient_accumulation_steps // steps_per_generation)
    micro_steps = max(steps_per_generation, gradient_accumulation_steps)
    return GenerationPlan(rounds=rounds, micro_steps=micro_steps, samples=generation_batch_size * rounds)


def plan_of(args: Any) -> GenerationPlan:
    """:func:`generation_plan` of a resolved ``GRPOConfig``."""
    return generation_plan(
        args.generation_batch_size, args.steps_per_generation, args.gradient_accumulation_steps
    )


def rollout_layout(
    batch_size: int,
    micro_batch_size: int,
    rollouts_per_example: int,
    num_processes: int = 1,
    processes_name: str = "processes",
) -> BatchLayout:
    """The rollout counts of ``RLConfig`` / ``vf-rl`` as a :class:`BatchLayout` (one generation batch per step).

    Worked example: ``batch_size=64, micro_batch_size=8, rollouts_per_example=8`` on 2
    processes gives 8 groups per optimizer step, ``per_device_train_batch_size=8``,
    ``gradient_accumulation_steps = 64 / (8 × 2) = 4``, ``steps_per_generation=4`` and
    ``generation_batch_size = 8 × 2 × 4 = 64``.

    A bad count raises ``ConfigError`` in the caller's names; ``processes_name`` is how
    the process count is called in the message (``max(trainer.gpus, 1)`` for a TOML config).
    """
    for name, value in (
        ("batch_size", batch_size),
        ("micro_batch_size", micro_batch_size),
        ("rollouts_per_example", rollouts_per_example),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            fail(f"{name}={value!r} must be a positive integer")
    per_micro_step = micro_batch_size * num_processes
    if batch_size % per_micro_step:
        lo = batch_size - batch_size % per_micro_step
        options = " or ".join(str(v) for v in (lo, lo + per_micro_step) if v > 0)
        fail(
            f"batch_size={batch_size} is not divisible by micro_batch_size × {processes_name} = "
            f"{micro_batch_size} × {num_processes} = {per_micro_step}",
            f"use e.g. batch_size = {options}",
        )
    if batch_size % rollouts_per_example:
        fail(
            f"batch_size={batch_size} is not divisible by rollouts_per_example={rollouts_per_example}",
            "a batch must hold whole groups of rollouts of one prompt",
        )
    accumulation = batch_size // per_micro_step
    generation_batch_size, steps_per_generation = resolve_batch_layout(
        per_device_train_batch_size=micro_batch_size,
        num_processes=num_processes,
        gradient_accumulation_steps=accumulation,
        num_generations=rollouts_per_example,
    )
    return BatchLayout(
        num_generations=rollouts_per_example,
        per_device_train_batch_size=micro_batch_size,
        gradient_accumulation_steps=accumulation,
        generation_batch_size=generation_batch_size,
        steps_per_generation=steps_per_generation,
    )


def check_batch_sizes(
    batch_size: int,
    micro_batch_size: int,
    rollouts_per_example: int,
    num_processes: int = 1,
    processes_name: str = "processes",
) -> None:
    """Raise ``ConfigError`` when the rollout counts break the rule (:func:`rollout_layout`)."""
    rollout_layout(batch_size, micro_batch_size, rollouts_per_example, num_processes, processes_name)
