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
  (one generation batch per optimizer step). ``steps_per_generation`` counts
  micro-steps and must be a multiple of ``gradient_accumulation_steps``, so a
  generation batch is a whole number of optimizer steps.

``RLConfig`` and the ``vf-rl`` TOML count the same thing in rollouts:
``rollouts_per_example`` is ``num_generations``, ``micro_batch_size`` is
``per_device_train_batch_size`` and ``batch_size`` is the global step batch, so
``gradient_accumulation_steps = batch_size / (micro_batch_size × P)``.
:func:`rollout_layout` translates those names and then applies
:func:`resolve_batch_layout`, the rule itself; ``GRPOConfig`` calls the latter.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifiers.training.config_rules import at_least, fail


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
    if generation_batch_size is not None:
        if generation_batch_size < 1 or generation_batch_size % step_batch != 0:
            fail(
                f"generation_batch_size={generation_batch_size} is not a positive multiple of the global batch "
                f"per optimizer step ({step_batch})",
                f"use a multiple of {step_batch}",
            )
        steps_per_generation = generation_batch_size // per_micro_step
    elif steps_per_generation is None:
        steps_per_generation = gradient_accumulation_steps
    elif steps_per_generation < 1 or steps_per_generation % gradient_accumulation_steps != 0:
        fail(
            f"steps_per_generation={steps_per_generation} is not a positive multiple of "
            f"gradient_accumulation_steps={gradient_accumulation_steps}",
            "a generation batch must be a whole number of optimizer steps",
        )
    return per_micro_step * steps_per_generation, steps_per_generation


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
