"""The rules a ``GRPOConfig``'s values must satisfy, each failing as one ``ConfigError`` line.

``validate_fields`` holds the field checks; ``training_args_error`` turns a ``ValueError``
from ``TrainingArguments`` into the same kind of line; ``fail`` / ``at_least`` /
``positive`` are the shared ways of saying what is wrong and how to fix it.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from verifiers.errors import ConfigError
from verifiers.training.generation.cpu_phases import CPU_PHASES
from verifiers.training.loss.losses import LOSS_TYPES

LORA_SYNC_MODES = ("auto", "adapter", "merged")


def fail(problem: str, fix: str | None = None) -> None:
    """Raise the one-line ``ConfigError``: what is wrong, then how to fix it."""
    raise ConfigError(problem, hint=fix)


def at_least(name: str, value: int, minimum: int, why: str | None = None) -> None:
    if value is None or value < minimum:
        fail(f"{name}={value} must be >= {minimum}", why or f"set {name} to {minimum} or more")


def positive(name: str, value: float, why: str | None = None) -> None:
    if value is None or value <= 0:
        fail(f"{name}={value} must be > 0", why or f"set {name} to a positive value")


def validate_fields(c: Any) -> None:
    """``GRPOConfig``'s own field rules: checks that need no process count (they run before
    TrainingArguments sets up devices). ``c`` is the config."""
    if c.loss_type not in LOSS_TYPES:
        fail(f"unknown loss_type={c.loss_type!r}", f"use one of: {', '.join(LOSS_TYPES)}")
    at_least("num_generations", c.num_generations, 2, "a group needs 2+ completions to have a baseline")
    at_least("max_seq_len", c.max_seq_len, 2, "prompt and completion need a token each")
    at_least("max_prompt_length", c.max_prompt_length, 1, "or None for min(512, max_seq_len // 2)")
    if c.max_prompt_length >= c.max_seq_len:
        fail(
            f"max_prompt_length={c.max_prompt_length} must be < max_seq_len={c.max_seq_len}",
            "raise max_seq_len or lower max_prompt_length to leave room for the completion",
        )
    if c.max_tokens is not None:
        at_least("max_tokens", c.max_tokens, 1, "or None for no per-turn limit")
    if c.learning_rate < 0:
        fail(f"learning_rate={c.learning_rate} must be >= 0", "e.g. 1e-6 (full model) or 1e-5 (LoRA)")
    positive("temperature", c.temperature, "GRPO needs sampled, differing completions")
    if c.top_k is not None and c.top_k != -1 and c.top_k < 1:
        fail(f"top_k={c.top_k} must be >= 1", "or None (or -1) to sample from all tokens")
    if not 0.0 < c.top_p <= 1.0:
        fail(f"top_p={c.top_p} must be in (0, 1]", "use 1.0 to disable nucleus sampling")
    if c.min_p is not None and not 0.0 <= c.min_p <= 1.0:
        fail(f"min_p={c.min_p} must be in [0, 1]", "or None to disable min-p sampling")
    positive("repetition_penalty", c.repetition_penalty, "1.0 means no penalty")
    for name in ("presence_penalty", "frequency_penalty"):
        if not -2.0 <= getattr(c, name) <= 2.0:
            fail(f"{name}={getattr(c, name)} must be in [-2, 2]", "0.0 means no penalty")
    if not 0.0 < c.epsilon < 1.0:
        fail(
            f"epsilon={c.epsilon} must be in (0, 1)",
            "the lower clip bound 1 - epsilon must be positive",
        )
    positive("epsilon_high", c.epsilon_high)
    if c.delta is not None and c.delta <= 1.0 + c.epsilon_high:
        fail(
            f"delta={c.delta} must be > 1 + epsilon_high = {1.0 + c.epsilon_high}",
            "raise delta (e.g. 4.0) or set it to None",
        )
    if c.beta < 0:
        fail(f"beta={c.beta} must be >= 0", "use 0.0 to turn the KL penalty off")
    at_least("num_iterations", c.num_iterations, 1)
    at_least("num_batches_ahead", c.num_batches_ahead, 0, "0 means synchronous generation")
    at_least("max_concurrent", c.max_concurrent, 1)
    at_least("max_filter_rounds", c.max_filter_rounds, 0)
    if c.async_max_queue_size is not None:
        at_least(
            "async_max_queue_size",
            c.async_max_queue_size,
            1,
            "or None to size it from num_batches_ahead",
        )
    if c.cpu_phases not in CPU_PHASES:
        fail(f"unknown cpu_phases={c.cpu_phases!r}", f"use one of: {', '.join(CPU_PHASES)}")
    if c.lora_sync not in LORA_SYNC_MODES:
        fail(f"unknown lora_sync={c.lora_sync!r}", f"use one of: {', '.join(LORA_SYNC_MODES)}")
    for name in ("async_generation_timeout", "vllm_server_timeout", "sync_weights_timeout"):
        positive(name, getattr(c, name), "a number of seconds")
    check_collective_timeout(c)
    if not 1 <= c.vllm_server_port <= 65535:
        fail(f"vllm_server_port={c.vllm_server_port} is not a TCP port", "use 1..65535")
    if c.importance_sampling_cap is not None and c.importance_sampling_cap < 1.0:
        fail(
            f"importance_sampling_cap={c.importance_sampling_cap} must be >= 1",
            "an on-policy token has weight 1 and must not be scaled down; None disables the cap",
        )
    low, high = c.importance_sampling_mask_low, c.importance_sampling_mask_high
    if low is not None and not 0.0 <= low < 1.0:
        fail(f"importance_sampling_mask_low={low} must be in [0, 1)", "or None to keep low-weight tokens")
    if high is not None and high <= 1.0:
        fail(f"importance_sampling_mask_high={high} must be > 1", "or None to keep high-weight tokens")
    lo_r, hi_r = c.min_group_mean_reward, c.max_group_mean_reward
    if lo_r is not None and hi_r is not None and lo_r > hi_r:
        fail(
            f"min_group_mean_reward={lo_r} > max_group_mean_reward={hi_r}",
            "the band would drop every group; swap or widen them",
        )
    if not 0.0 <= c.ref_model_mixup_alpha <= 1.0:
        fail(
            f"ref_model_mixup_alpha={c.ref_model_mixup_alpha} must be in [0, 1]",
            "1.0 copies the policy into the reference; 0.0 never moves it",
        )
    at_least("ref_model_sync_steps", c.ref_model_sync_steps, 1)
    if c.num_completions_to_print is not None:
        at_least("num_completions_to_print", c.num_completions_to_print, 1, "or None for all")
    if c.per_device_eval_batch_size is not None:
        at_least("per_device_eval_batch_size", c.per_device_eval_batch_size, 1, "or None for max_concurrent")


def check_collective_timeout(c: Any) -> None:
    """``ddp_timeout`` must outlast what the main process does while the others wait in a
    collective (processes.py explains which waits count), or a healthy run fails on a timeout."""
    from verifiers.training.lifecycle.processes import COLLECTIVE_MARGIN_S, min_collective_timeout

    at_least("ddp_timeout", c.ddp_timeout, 1, "or None to derive it")
    least = min_collective_timeout(c)
    if c.ddp_timeout < least:
        fail(
            f"ddp_timeout={c.ddp_timeout} is shorter than what the main process may do alone while the "
            f"others wait: max(sync_weights_timeout={c.sync_weights_timeout:g}, async_generation_timeout="
            f"{c.async_generation_timeout:g}) + {COLLECTIVE_MARGIN_S} = {least} s",
            f"set ddp_timeout >= {least}, lower those timeouts, or leave ddp_timeout unset (derived)",
        )


_ENUM_ERROR = re.compile(
    r"^(?P<value>.*) is not a valid (?P<kind>\w+), please select one of \[(?P<choices>.*)\]$"
)


def training_args_error(config: Any, err: ValueError) -> ConfigError:
    """A ``ValueError`` from ``TrainingArguments.__post_init__`` as a one-line ``ConfigError``.

    An unknown choice (``lr_scheduler_type``, ``optim``, ``*_strategy``, ...) names
    the field it was given to and the valid choices; anything else keeps
    transformers' own wording.
    """
    message = " ".join(str(err).split())
    match = _ENUM_ERROR.match(message)
    if match:
        value = match["value"]
        names = [
            f.name
            for f in dataclasses.fields(config)
            if isinstance(getattr(config, f.name, None), str) and getattr(config, f.name) == value
        ]
        where = f"{names[0]}={value!r}" if names else repr(value)
        choices = match["choices"].replace("'", "")
        return ConfigError(f"{where} is not a valid {match['kind']}", hint=f"use one of: {choices}")
    return ConfigError(f"invalid training arguments: {message}", hint="fix the field it names")
