"""The table of old module paths: every path that earlier code imports and no file defines any more.

Two kinds of entry:

* ``MOVED``: the old path is another module now. Importing the old path gives that very
  module object (``verifiers.envs.tool_env is verifiers.envs.tool``), so its names, its
  monkeypatching and ``isinstance`` checks are the real ones.
* ``REEXPORTED``: the old module gathered names from several modules (or from the lazy
  top-level names of ``verifiers``). Importing it gives a small module holding exactly
  those names, each resolved from where it lives now on first use.

``NEEDS_EXTRA`` lists the old paths whose import imported the training stack: they still
do, at import, and raise ``MissingExtraError`` naming the extra when it is missing (as
they did in 0.1.x); the other paths stay light. An old path that is the prefix of another
(``verifiers.rl.trainer``) is a package, so its old submodules import too.

Where the paths come from:

* 0.1.x: the module paths that environment modules and scripts written for 0.1.4 import
  (``tests/test_compat_paths.py`` imports each with its names);
* the guides: ``verifiers.rl.trainer`` (``RLTrainer``, ``RLConfig``; files ``trainer.py``
  and ``orchestrator.py``), now ``verifiers/training/rl/`` and ``verifiers/training/generation/``;
* 0.2's docs: ``verifiers.rollout.*`` (``python -m verifiers.rollout.chat_template`` was a
  documented command), now ``verifiers.tokenization`` and ``verifiers.failures``.
* 0.2's ``verifiers.utils.env_loader``, ``sandbox`` and ``sandbox_child``: environment code,
  now under ``verifiers/envs/`` (utils holds no domain).
* 0.2's flat ``verifiers.inference`` modules, split by process: ``server/`` runs in vLLM,
  ``client/`` in the trainer, what both share stays in ``verifiers.inference``.

Old 0.2 paths that are packages now keep their names on the package itself instead
(``verifiers.training.config``, ``verifiers.training.rl``, ``verifiers.cli.rl``); the other
flat training/cli modules of 0.2 were never documented for import and have no entry.
"""

from __future__ import annotations

MOVED: dict[str, str] = {
    # 0.1.x
    "verifiers.envs.multiturn_env": "verifiers.envs.multiturn",
    "verifiers.envs.singleturn_env": "verifiers.envs.singleturn",
    "verifiers.envs.stateful_tool_env": "verifiers.envs.stateful_tool",
    "verifiers.envs.tool_env": "verifiers.envs.tool",
    "verifiers.envs.env_group": "verifiers.envs.group",
    "verifiers.envs.textarena_env": "verifiers.envs.refused",  # 0.1.4's TextArenaEnv: refused there
    "verifiers.rubrics.judge_rubric": "verifiers.rubrics.judge",
    "verifiers.rubrics.rubric_group": "verifiers.rubrics.group",
    "verifiers.rubrics.tool_rubric": "verifiers.rubrics.tool",
    "verifiers.utils.data_utils": "verifiers.utils.data",
    "verifiers.utils.model_utils": "verifiers.models",
    "verifiers.inference.vllm_client": "verifiers.inference.client.vllm_client",
    # 0.1.x utils
    "verifiers.utils.config_utils": "verifiers.utils.ensure",
    "verifiers.utils.decorators": "verifiers.envs.decorators",
    "verifiers.utils.tools": "verifiers.envs.builtin_tools",
    "verifiers.utils.response_utils": "verifiers.envs.responses",
    # 0.2 (issue 44): what only environments use moved from utils/ to envs/
    "verifiers.utils.env_loader": "verifiers.envs.loader",
    "verifiers.utils.sandbox": "verifiers.envs.sandbox",
    "verifiers.utils.sandbox_child": "verifiers.envs.sandbox_child",
    # 0.1.10+ (issue 25): upstream's experimental environments
    "verifiers.envs.experimental.gym_env": "verifiers.envs.gym",
    "verifiers.envs.experimental.mcp_env": "verifiers.envs.refused",
    "verifiers.envs.experimental.cli_agent_env": "verifiers.envs.refused",
    "verifiers.envs.integrations.openenv_env": "verifiers.envs.refused",  # 0.1.12
    # 0.2's docs
    "verifiers.rollout.chat_template": "verifiers.tokenization.chat_template",
    "verifiers.rollout.tokens": "verifiers.tokenization.assembly",
    "verifiers.rollout.failure": "verifiers.failures",
    # 0.2's inference/, split by process (issue 44): server/ runs in vLLM, client/ in the trainer.
    # ``verifiers.inference.worker`` is a vLLM ``--worker-extension-cls`` path and
    # ``verifiers.inference.parent_watch`` the vLLM plugin an installed 0.2 names.
    **{
        f"verifiers.inference.{old}": f"verifiers.inference.server.{new}"
        for old, new in (
            ("server_state", "state"),
            ("server_files", "files"),
            ("worker", "worker"),
            ("kv_cache", "kv_cache"),
            ("vllm_flags", "vllm_flags"),
            ("vllm_version", "vllm_version"),
            ("parent_watch", "parent_watch"),
            ("cpu_binding", "cpu_binding"),
            ("log_filter", "log_filter"),
        )
    },
    "verifiers.inference.nccl_update": "verifiers.inference.client.nccl_update",
    "verifiers.inference.ipc_update": "verifiers.inference.client.ipc_update",
    "verifiers.training.weights.names": "verifiers.inference.names",
}

_GENERATOR = "verifiers.training.generation.generator"
_PRODUCER = "verifiers.training.generation.producer"

REEXPORTED: dict[str, dict[str, str]] = {
    # 0.1.x
    "verifiers.utils.logging_utils": {
        "setup_logging": "verifiers.utils.logging",
        "print_prompt_completions_sample": "verifiers.utils.display",
        # 0.1.x utils
        **dict.fromkeys(
            (
                "LOGGER_NAME",
                "JsonFormatter",
                "log_level",
                "quiet_verifiers",
                "log_once",
                "warning_once",
                "print_time",
                "print_size",
                "truncate",
            ),
            "verifiers.utils.logging",
        ),
    },
    # 0.1.x utils (its typed-config helpers of 0.1.14 are refused, verifiers.compat.refused)
    "verifiers.utils.env_utils": {"load_environment": "verifiers.envs.loader"},
    "verifiers.trainers": dict.fromkeys(
        ("GRPOConfig", "GRPOTrainer", "grpo_defaults", "lora_defaults"), "verifiers"
    ),
    "verifiers.trainers.grpo_trainer": {"GRPOTrainer": "verifiers"},
    "verifiers.trainers.grpo_config": dict.fromkeys(
        ("GRPOConfig", "grpo_defaults", "lora_defaults"), "verifiers"
    ),
    # the guides
    "verifiers.rl": dict.fromkeys(("RLConfig", "RLTrainer"), "verifiers"),
    "verifiers.rl.trainer": {
        **dict.fromkeys(("RLTrainer", "RLConfig", "GRPOTrainer", "GRPOConfig"), "verifiers"),
        "BatchGenerator": _GENERATOR,
        "RolloutProducer": _PRODUCER,
        "build_generator": _GENERATOR,
    },
    "verifiers.rl.trainer.trainer": dict.fromkeys(
        ("RLTrainer", "RLConfig", "GRPOTrainer", "GRPOConfig"), "verifiers"
    ),
    "verifiers.rl.trainer.orchestrator": {
        "BatchGenerator": _GENERATOR,
        "build_generator": _GENERATOR,
        "RolloutProducer": _PRODUCER,
        "GeneratedBatch": _PRODUCER,
    },
    # 0.2's docs: the package of the three modules above
    "verifiers.rollout": {},
    # 0.2's verifiers.inference.transport held both sides of a weight transfer (issue 44): the
    # names both processes share are in inference/wire.py (and safetensors_writer.py), the
    # trainer's side in inference/client/, unpacking an uploaded adapter in inference/server/.
    "verifiers.inference.transport": {
        **dict.fromkeys(
            (
                "TRANSPORTS",
                "FILE_PREFIX",
                "ADAPTER_CONFIG_KEY",
                "transfer_dir",
                "new_name",
                "is_transfer_name",
                "remove_abandoned_transfer_files",
            ),
            "verifiers.inference.wire",
        ),
        **dict.fromkeys(("write_safetensors", "safetensors_bytes"), "verifiers.inference.safetensors_writer"),
        **dict.fromkeys(
            (
                "TRANSPORT_ENV",
                "env_override",
                "gpu_uuid",
                "choose_transport",
                "prepare_tensors",
                "split_by_module",
                "layer_pieces",
                "tensor_meta",
                "cuda_device_of",
                "ready_event",
                "gpu_chunks",
                "StagingFile",
                "write_probe",
            ),
            "verifiers.inference.client.transport",
        ),
        **dict.fromkeys(
            ("lora_payload", "write_lora_dir", "lora_blob"), "verifiers.inference.client.adapters"
        ),
        **dict.fromkeys(
            ("weight_source_class", "NcclWeightSender"), "verifiers.inference.client.nccl_sender"
        ),
        "unpack_lora_blob": "verifiers.inference.server.adapter_upload",
    },
    # 0.1.10+ (issue 25)
    # 0.1.14: harbor_env became a package (env.py, mcp.py; mcp is refused, verifiers.compat.refused)
    "verifiers.envs.experimental.harbor_env": {"HarborEnv": "verifiers.envs.refused"},
    "verifiers.envs.experimental.harbor_env.env": {"HarborEnv": "verifiers.envs.refused"},
    "verifiers.envs.experimental": {
        "GymEnv": "verifiers.envs.gym",
        **dict.fromkeys(("MCPEnv", "CliAgentEnv", "HarborEnv"), "verifiers.envs.refused"),
    },
}

NEEDS_EXTRA: dict[str, str] = {
    "verifiers.utils.model_utils": "train",
    "verifiers.trainers.grpo_trainer": "train",
    "verifiers.trainers.grpo_config": "train",
    "verifiers.rl.trainer": "train",
    "verifiers.rl.trainer.trainer": "train",
    "verifiers.rl.trainer.orchestrator": "train",
}

OLD_PATHS: frozenset[str] = frozenset(MOVED) | frozenset(REEXPORTED)
