"""LoRA settings: ``lora_defaults`` (a peft ``LoraConfig``) and the rules its values follow."""

from __future__ import annotations

from typing import Any

from verifiers.errors import MissingExtraError
from verifiers.training.config.rules import fail

LORA_TARGET_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")


def lora_defaults(
    r: int = 8, alpha: float = 16, dropout: float = 0.0, target_modules: list[str] | str | None = None
) -> Any:
    """A peft ``LoraConfig`` for a causal LM, on the attention projections unless ``target_modules`` is given.

    ``target_modules`` is a list of module names or, as in PEFT, one string: ``"all-linear"``
    (every linear layer but the output head) or a regular expression over module names.
    Values PEFT would reject later (or silently misuse) are refused here with a ``ConfigError``.
    """
    check_lora_settings(r, alpha, dropout, target_modules)
    try:
        from peft import LoraConfig
    except ModuleNotFoundError as e:
        raise MissingExtraError("lora_defaults", "train", e) from e
    targets = (
        target_modules if isinstance(target_modules, str) else list(target_modules or LORA_TARGET_MODULES)
    )
    return LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )


def check_lora_settings(
    r: Any, alpha: Any, dropout: Any, target_modules: Any, names: tuple[str, ...] = ("r", "alpha", "dropout")
) -> None:
    """The LoRA rules: ``r`` >= 1 (int), ``alpha`` > 0, 0 <= ``dropout`` < 1, ``target_modules`` a
    non-empty string or list of strings (or None). ``names`` are the fields as the caller calls them."""
    r_name, alpha_name, dropout_name = names
    if not _is_number(r) or isinstance(r, float):
        fail(f"{r_name}={r!r} must be an integer", "the LoRA rank, e.g. 8 or 16")
    if r < 1:
        fail(f"{r_name}={r!r} must be >= 1", "the LoRA rank, e.g. 8 or 16")
    if not _is_number(alpha) or alpha <= 0:
        fail(f"{alpha_name}={alpha!r} must be > 0", "the LoRA scale is alpha / r; e.g. 2 × r")
    if not _is_number(dropout) or not 0.0 <= dropout < 1.0:
        fail(f"{dropout_name}={dropout!r} must be in [0, 1)", "0.0 for no dropout")
    name = "target_modules" if r_name == "r" else "lora_target_modules"
    if isinstance(target_modules, str):
        if not target_modules.strip():
            fail(f"{name}='' names no module", 'use "all-linear" or a list such as ["q_proj", "v_proj"]')
    elif target_modules is not None:
        items = list(target_modules) if isinstance(target_modules, (list, tuple)) else None
        if not items or not all(isinstance(t, str) and t for t in items):
            fail(
                f"{name}={target_modules!r} must be a non-empty list of module names",
                'or "all-linear", or None for q_proj, k_proj, v_proj, o_proj',
            )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
