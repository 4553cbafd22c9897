"""Field names and values that TRL's ``GRPOConfig`` users bring, mapped or refused in one line.

A script moved from TRL passes ``vf.GRPOConfig(use_vllm=True, scale_rewards="group", ...)``.
Python's own answer to an unknown keyword is a ``TypeError`` that says nothing of what
to use instead, and a TRL string given to one of our bool fields (``scale_rewards="none"``)
would be truthy, so the run would silently do the opposite. This module holds what
those names mean here, so ``GRPOConfig`` can refuse them with the fix, or convert them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from verifiers.errors import ConfigError, nearest

_SERVER = "generation always goes through a vf-vllm server: start `vf-vllm --model M` and set vllm_server_host / vllm_server_port"

# TRL GRPOConfig fields we do not have -> what to do instead.
TRL_ONLY_FIELDS: dict[str, str] = {
    "use_vllm": _SERVER,
    "vllm_mode": _SERVER,
    "vllm_server_base_url": "set vllm_server_host and vllm_server_port",
    "vllm_gpu_memory_utilization": "pass --gpu-memory-utilization to vf-vllm",
    "vllm_tensor_parallel_size": "pass --tensor-parallel-size to vf-vllm",
    "vllm_max_model_length": "pass --max-model-len to vf-vllm",
    "vllm_enable_sleep_mode": "set server_sleep_during_step=True (with num_batches_ahead=0) and start "
    "vf-vllm with --enable-sleep-mode",
    "vllm_group_port": "weights travel through vf-vllm's own routes; there is no separate group port",
    "vllm_importance_sampling_correction": "the correction is always on; tune importance_sampling_cap "
    "and importance_sampling_mask_low / importance_sampling_mask_high",
    "vllm_importance_sampling_cap": "use importance_sampling_cap",
    "reward_weights": "give the weights to the environment's rubric: vf.Rubric(funcs=[...], weights=[...])",
    "importance_sampling_level": "use loss_type='gspo' for sequence-level ratios",
    "generation_kwargs": "set the sampling fields (temperature, top_p, top_k, min_p, ...) or the "
    "environment's sampling_args",
    "chat_template_kwargs": "set them in the environment's sampling_args (extra_body)",
    "model_init_kwargs": "load the model yourself (vf.get_model_and_tokenizer) and pass it",
    "num_generations_eval": "set rollouts per example in the evaluation (vf-eval -r)",
    "max_tool_calling_iterations": "use the environment's max_turns (vf.ToolEnv(max_turns=...))",
}

# TRL's scale_rewards strings -> our bool (TRL: "group" / "batch" / "none"; True / False too).
_SCALE_REWARDS = {"group": True, "none": False}


def refuse_unknown_fields(names: Iterable[str], known: Iterable[str]) -> None:
    """Raise ``ConfigError`` for the first name that is not a field: TRL's with the fix, else the nearest."""
    known = list(known)
    for name in names:
        if name in known:
            continue
        if name in TRL_ONLY_FIELDS:
            raise ConfigError(f"GRPOConfig has no field {name!r} (a TRL setting)", hint=TRL_ONLY_FIELDS[name])
        close = nearest(name, known, cutoff=0.75)
        hint = f"did you mean {close!r}?" if close else "see docs/training.md for the fields"
        raise ConfigError(f"GRPOConfig has no field {name!r}", hint=hint)


def scale_rewards_flag(value: Any) -> bool:
    """``scale_rewards`` as our bool: TRL's ``"group"`` is True, ``"none"`` False; ``"batch"`` is refused."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _SCALE_REWARDS:
        return _SCALE_REWARDS[value.lower()]
    if isinstance(value, str) and value.lower() == "batch":
        raise ConfigError(
            "scale_rewards='batch' (TRL's batch-wide std) is not supported",
            hint="use True (divide by each group's std, TRL's 'group') or False ('none')",
        )
    raise ConfigError(
        f"scale_rewards={value!r} must be True or False", hint="TRL's 'group' and 'none' are accepted too"
    )
