"""The rules a ``GRPOConfig``'s values must satisfy, each failing as one ``ConfigError`` line.

The only place fields are checked. ``validate_fields`` holds ``GRPOConfig``'s field checks;
``check_entry_fields`` the stricter ones of the rollout-counted front door (``RLConfig``,
``vf-rl``: whole numbers, steps rather than epochs, a per-turn limit inside ``max_seq_len``);
``check_report_to`` the W&B rule; ``training_args_error`` turns a ``ValueError`` from
``TrainingArguments`` into the same kind of line. Front doors with their own vocabulary call
these under :func:`renamed`, so an error names a field as the user wrote it. ``fail`` /
``at_least`` / ``positive`` are the shared ways of saying what is wrong and how to fix it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterator, Mapping
from typing import Any

from verifiers.errors import ConfigError
from verifiers.training.config.choices import CPU_PHASES, LOSS_TYPES, SAMPLING_SEEDS

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
    if c.server_sleep_during_step and c.num_batches_ahead != 0:
        fail(
            f"server_sleep_during_step=True needs num_batches_ahead=0 (it is {c.num_batches_ahead}): "
            "a server generating the next batch during the step cannot free its KV cache",
            "set num_batches_ahead=0, or server_sleep_during_step=False",
        )
    if c.cpu_phases not in CPU_PHASES:
        fail(f"unknown cpu_phases={c.cpu_phases!r}", f"use one of: {', '.join(CPU_PHASES)}")
    if c.sampling_seeds not in SAMPLING_SEEDS:
        fail(f"unknown sampling_seeds={c.sampling_seeds!r}", f"use one of: {', '.join(SAMPLING_SEEDS)}")
    if c.lora_sync not in LORA_SYNC_MODES:
        fail(f"unknown lora_sync={c.lora_sync!r}", f"use one of: {', '.join(LORA_SYNC_MODES)}")
    for name in ("async_generation_timeout", "vllm_server_timeout", "sync_weights_timeout"):
        positive(name, getattr(c, name), "a number of seconds")
    check_collective_timeout(c)
    if not 1 <= c.vllm_server_port <= 65535:
        fail(
            f"vllm_server_port={c.vllm_server_port} is not a TCP port: it must be in [1, 65535]",
            "use 1..65535",
        )
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
    collective (training/processes.py explains which waits count), or a healthy run fails on a timeout."""
    from verifiers.training.config.collective import COLLECTIVE_MARGIN_S, min_collective_timeout

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


def check_report_to(report_to: Any, name: str = "report_to") -> None:
    """A ``report_to`` the user gave that names wandb needs wandb installed (one line, else).

    A preset's own ``"wandb"`` falls back instead (``fields._available_report_to``): only a
    value someone wrote is refused, since they asked for W&B by name.
    """
    import importlib.util

    targets = [report_to] if isinstance(report_to, str) else list(report_to or [])
    if "wandb" in targets and importlib.util.find_spec("wandb") is None:
        fail(f"{name}={report_to!r} includes 'wandb' but wandb is not installed", "pip install wandb")


@contextlib.contextmanager
def renamed(names: Mapping[str, str], prefix: str = "") -> Iterator[None]:
    """Re-raise a ``ConfigError`` with field names translated (``{GRPOConfig name: the caller's}``,
    whole words, in the problem and the hint) and ``prefix`` in front: a front door's own vocabulary."""
    try:
        yield
    except ConfigError as err:
        if not names and not prefix:
            raise
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b") if names else None

        def translate(text: str | None) -> str | None:
            if text is None or pattern is None:
                return text
            return pattern.sub(lambda m: names[m.group(1)], text)

        raise ConfigError(prefix + (translate(err.message) or ""), hint=translate(err.hint)) from None


# The front door's rules (RLConfig / vf-rl), in GRPOConfig's names (RLConfig's own last):
# (integer?, lowest, lowest allowed?, None allowed?, hint). Fields GRPOConfig checks itself
# are listed only for their type; validate_fields then checks their range.
_ENTRY_RULES: dict[str, tuple[bool, float | None, bool, bool, str]] = {
    "max_steps": (True, 1, True, False, "the number of optimizer steps"),
    "max_seq_len": (True, None, True, False, "prompt and completion need a token each"),
    "max_tokens": (True, None, True, True, "or None for no per-turn limit"),
    "max_prompt_length": (True, None, True, True, "or None for min(512, max_seq_len // 2)"),
    "learning_rate": (False, None, True, False, "e.g. 1e-5 with LoRA"),
    "warmup_steps": (True, 0, True, False, "0 for no warm-up"),
    "max_grad_norm": (False, 0, True, False, "0 turns gradient clipping off"),
    "weight_decay": (False, 0, True, False, "0.0 for none"),
    "beta": (False, None, True, False, "0.0 turns the KL penalty off"),
    "num_iterations": (True, None, True, False, "passes over each batch"),
    "num_batches_ahead": (True, None, True, False, "0 means synchronous generation"),
    "temperature": (False, None, True, False, "GRPO needs sampled, differing completions"),
    "top_p": (False, None, True, False, "1.0 disables nucleus sampling"),
    "top_k": (True, None, True, True, "or None to sample from all tokens"),
    "min_p": (False, None, True, True, "or None to disable min-p sampling"),
    "repetition_penalty": (False, None, True, False, "1.0 means no penalty"),
    "vllm_server_port": (True, None, True, False, "a TCP port"),
    "vllm_server_timeout": (False, None, True, False, "seconds"),
    "async_generation_timeout": (False, None, True, False, "seconds"),
    "max_concurrent": (True, None, True, False, "rollouts in flight at once"),
    "eval_steps": (True, 1, True, True, "or None"),
    "save_steps": (True, 1, True, False, "steps between checkpoints"),
    "logging_steps": (True, 1, True, False, "steps between log lines"),
    "num_completions_to_print": (True, None, True, True, "rows of each sample block"),
    "log_samples_every": (True, 0, True, False, "0: never"),
}


def check_entry_fields(values: Mapping[str, Any]) -> None:
    """The front door's rules on ``values`` (``{GRPOConfig name: value}``, plus RLConfig's
    ``log_samples_every``): whole numbers where a count is meant, steps rather than epochs, a
    named run, and a per-turn ``max_tokens`` inside ``max_seq_len``. ``validate_fields`` checks
    the rest."""
    for name, (integer, low, low_ok, none_ok, hint) in _ENTRY_RULES.items():
        if name not in values:
            continue
        value = values[name]
        if value is None and none_ok:
            continue
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not is_number or (integer and not isinstance(value, int)):
            fail(f"{name}={value!r} must be {'an integer' if integer else 'a number'}", hint)
        if low is not None and (value < low if low_ok else value <= low):
            fail(f"{name}={value!r} must be {'>=' if low_ok else '>'} {low}", hint)
    if "run_name" in values and not (values["run_name"] and isinstance(values["run_name"], str)):
        fail(f"run_name={values['run_name']!r} must be a non-empty string")
    tokens, seq = values.get("max_tokens"), values.get("max_seq_len")
    if tokens is not None and seq is not None and not 1 <= tokens < seq:
        fail(
            f"max_tokens={tokens} must be >= 1 and < max_seq_len={seq}",
            "it is the per-turn limit; prompt and completion together must fit max_seq_len",
        )


def check_wandb_settings(report_to: Any, settings: Mapping[str, Any]) -> None:
    """W&B settings (``{name: value}``, e.g. ``wandb_project``) only reach W&B: refused when
    ``report_to`` does not include it, where they would be accepted and do nothing."""
    targets = [report_to] if isinstance(report_to, str) else list(report_to or [])
    given = [name for name, value in settings.items() if value]
    if given and "wandb" not in targets:
        fail(
            f"{given[0]}={settings[given[0]]!r} is set but report_to={report_to!r} does not include 'wandb'",
            'add report_to = "wandb" (pip install wandb), or drop the W&B settings',
        )
