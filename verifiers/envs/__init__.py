"""Environments. The classes are also importable from here (``from verifiers.envs import ToolEnv``), as in 0.1.x."""

from verifiers.envs import integrations
from verifiers.envs.environment import Environment
from verifiers.envs.group import EnvGroup
from verifiers.envs.gym import GymEnv
from verifiers.envs.multiturn import MultiTurnEnv
from verifiers.envs.python_env import PythonEnv
from verifiers.envs.refused import CliAgentEnv, HarborEnv, MCPEnv, OpenEnvEnv
from verifiers.envs.sandbox_env import SandboxEnv
from verifiers.envs.singleturn import SingleTurnEnv
from verifiers.envs.stateful_tool import StatefulToolEnv
from verifiers.envs.tool import ToolEnv

__all__ = [
    "CliAgentEnv",
    "EnvGroup",
    "Environment",
    "GymEnv",
    "HarborEnv",
    "MCPEnv",
    "MultiTurnEnv",
    "OpenEnvEnv",
    "PythonEnv",
    "SandboxEnv",
    "SingleTurnEnv",
    "StatefulToolEnv",
    "ToolEnv",
    "integrations",
]
