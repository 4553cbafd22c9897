"""Environment classes of upstream 0.1.10+ that need outside servers or hosted sandboxes, which a
single offline machine does not have: importable (so a module naming them loads), and refused
in one ``ConfigError`` line, saying what they need, when constructed.

- ``MCPEnv``: tools served by MCP servers it launches and talks to (with their network services);
- ``OpenEnvEnv``: an OpenEnv environment server (a docker image or a remote endpoint);
- ``CliAgentEnv``: a command-line agent run inside a hosted sandbox, its model calls tunnelled back;
- ``HarborEnv``: Harbor tasks, each in its own hosted sandbox container.
"""

from __future__ import annotations

from typing import Any

from verifiers.compat.refused import refusing_getattr
from verifiers.envs.multiturn import MultiTurnEnv
from verifiers.errors import ConfigError
from verifiers.types import Messages, State

__all__ = ["CliAgentEnv", "HarborEnv", "MCPEnv", "OpenEnvEnv", "RefusedEnv"]

# The other names of upstream's modules served from here (mcp_env, cli_agent_env): refused in one
# line (verifiers.compat.refused).
__getattr__ = refusing_getattr(__name__)


class RefusedEnv(MultiTurnEnv):
    """Base of the refused classes: constructing one raises ``ConfigError`` with ``NEEDS``."""

    NEEDS = ""
    INSTEAD = "write the tools as Python functions in a vf.ToolEnv / vf.StatefulToolEnv"

    def __init__(self, *args: Any, **kwargs: Any):
        raise ConfigError(
            f"vf.{type(self).__name__} is not supported here: it needs {self.NEEDS}", hint=self.INSTEAD
        )

    async def env_response(
        self, messages: Messages, state: State, **kwargs: Any
    ) -> Messages:  # pragma: no cover
        return []


class MCPEnv(RefusedEnv):
    NEEDS = "MCP servers launched and reached by the environment (and the services behind them)"


class OpenEnvEnv(RefusedEnv):
    NEEDS = "an OpenEnv environment server (a docker image or a remote endpoint)"
    INSTEAD = "wrap the environment's reset/step in a vf.GymEnv, or write a vf.MultiTurnEnv"


class CliAgentEnv(RefusedEnv):
    NEEDS = (
        "a hosted sandbox (prime-sandboxes) to run the agent's CLI in, with its model calls tunnelled back"
    )
    INSTEAD = "run the agent's tools as Python functions in a vf.StatefulToolEnv, or code in vf.PythonEnv"


class HarborEnv(CliAgentEnv):
    NEEDS = "Harbor task containers in a hosted sandbox (prime-sandboxes)"
