"""verifiers: environments, rubrics and GRPO training for language models.

``import verifiers`` stays light: it never imports torch, transformers or vllm.
Training names (``GRPOTrainer``, ``get_model_and_tokenizer``, ...) resolve on
first use; if the training extras are missing they raise ``MissingExtraError``
naming the extra to install. Old module paths (0.1.x's ``verifiers.envs.tool_env``,
``verifiers.trainers``, ...) are served by ``verifiers.compat``'s import hook, installed here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from verifiers.compat import install as _install_old_paths
from verifiers.envs.decorators import cleanup, stop, teardown
from verifiers.envs.environment import Environment
from verifiers.envs.group import EnvGroup
from verifiers.envs.gym import GymEnv
from verifiers.envs.integrations import ReasoningGymEnv, TextArenaEnv
from verifiers.envs.loader import load_environment
from verifiers.envs.multiturn import MultiTurnEnv
from verifiers.envs.python_env import PythonEnv
from verifiers.envs.refused import CliAgentEnv, HarborEnv, MCPEnv, OpenEnvEnv
from verifiers.envs.sandbox_env import SandboxEnv
from verifiers.envs.singleturn import SingleTurnEnv
from verifiers.envs.stateful_tool import StatefulToolEnv
from verifiers.envs.tool import ToolEnv
from verifiers.errors import (
    ConfigError,
    DatasetFormatError,
    EnvironmentArgsError,
    EnvironmentNotFoundError,
    MissingExtraError,
    MissingPackageError,
    SandboxError,
    ServerError,
    ToolCallError,
    ToolError,
    ToolParseError,
    VerifiersError,
    WeightSyncError,
)
from verifiers.parsers.maybe_think_parser import MaybeThinkParser
from verifiers.parsers.parser import Parser
from verifiers.parsers.think_parser import ThinkParser
from verifiers.parsers.xml_parser import XMLParser
from verifiers.rubrics.group import RubricGroup
from verifiers.rubrics.judge import JudgeRubric
from verifiers.rubrics.rubric import Rubric
from verifiers.rubrics.tool import ToolRubric
from verifiers.types import (
    AssistantMessage,
    ChatMessage,
    DatasetBuilder,
    GenerateInputs,
    GenerateOutputs,
    Info,
    Message,
    Messages,
    ProcessedOutputs,
    RewardFunc,
    RolloutInput,
    RolloutScore,
    RolloutScores,
    SamplingArgs,
    State,
    SystemMessage,
    Tool,
    ToolCall,
    ToolMessage,
    TrajectoryStep,
    TurnTokens,
    UserMessage,
)
from verifiers.utils.data import extract_boxed_answer, extract_hash_answer, load_example_dataset
from verifiers.utils.display import print_prompt_completions_sample
from verifiers.utils.ensure import MissingKeyError, ensure_keys
from verifiers.utils.extras import import_with_extra
from verifiers.utils.logging import log_level, quiet_verifiers, setup_logging

__version__ = "0.2.0"

_install_old_paths()

# name -> (module, extra that provides its dependencies)
_LAZY: dict[str, tuple[str, str]] = {
    "get_model": ("verifiers.models", "train"),
    "get_tokenizer": ("verifiers.models", "train"),
    "get_model_and_tokenizer": ("verifiers.models", "train"),
    # verifiers.training says where each of its names lives.
    "GRPOConfig": ("verifiers.training", "train"),
    "grpo_defaults": ("verifiers.training", "train"),
    "lora_defaults": ("verifiers.training", "train"),
    "GRPOTrainer": ("verifiers.training", "train"),
    "RLConfig": ("verifiers.training", "train"),
    "RLTrainer": ("verifiers.training", "train"),
    "MathRubric": ("verifiers.rubrics.math_rubric", "envs"),
    "VLLMClient": ("verifiers.inference.client.vllm_client", "train"),
}


__all__ = [
    "AssistantMessage",
    "ChatMessage",
    "DatasetBuilder",
    "CliAgentEnv",
    "ConfigError",
    "DatasetFormatError",
    "EnvGroup",
    "Environment",
    "EnvironmentArgsError",
    "EnvironmentNotFoundError",
    "GenerateInputs",
    "GenerateOutputs",
    "GymEnv",
    "HarborEnv",
    "Info",
    "Message",
    "JudgeRubric",
    "MCPEnv",
    "MaybeThinkParser",
    "Messages",
    "MissingExtraError",
    "MissingKeyError",
    "MissingPackageError",
    "MultiTurnEnv",
    "OpenEnvEnv",
    "Parser",
    "ProcessedOutputs",
    "PythonEnv",
    "ReasoningGymEnv",
    "RewardFunc",
    "RolloutInput",
    "RolloutScore",
    "RolloutScores",
    "Rubric",
    "RubricGroup",
    "SamplingArgs",
    "SandboxEnv",
    "SandboxError",
    "ServerError",
    "SingleTurnEnv",
    "State",
    "StatefulToolEnv",
    "SystemMessage",
    "TextArenaEnv",
    "ThinkParser",
    "Tool",
    "ToolCall",
    "ToolCallError",
    "ToolEnv",
    "ToolError",
    "ToolMessage",
    "ToolParseError",
    "ToolRubric",
    "TrajectoryStep",
    "TurnTokens",
    "UserMessage",
    "VerifiersError",
    "WeightSyncError",
    "XMLParser",
    "cleanup",
    "ensure_keys",
    "extract_boxed_answer",
    "extract_hash_answer",
    "load_environment",
    "load_example_dataset",
    "print_prompt_completions_sample",
    "log_level",
    "quiet_verifiers",
    "setup_logging",
    "stop",
    "teardown",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        from verifiers.compat.refused import refuse

        refuse(__name__, name)  # a later release's name we do not offer: one line saying why
    module_name, extra = _LAZY[name]
    module = import_with_extra(module_name, f"verifiers.{name}", extra)
    value = getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_LAZY))


if TYPE_CHECKING:  # pragma: no cover
    from verifiers.inference.client.vllm_client import VLLMClient  # noqa: F401
    from verifiers.models import get_model, get_model_and_tokenizer, get_tokenizer  # noqa: F401
    from verifiers.rubrics.math_rubric import MathRubric  # noqa: F401
    from verifiers.training import (  # noqa: F401
        GRPOConfig,
        GRPOTrainer,
        RLConfig,
        RLTrainer,
        grpo_defaults,
        lora_defaults,
    )
