"""Environment classes of upstream 0.1.10+ that need outside servers or hosted sandboxes, which a
single offline machine does not have: importable (so a module naming them loads), and refused
in one ``ConfigError`` line, saying what they need, when constructed.

- ``MCPEnv``: tools served by MCP servers it launches and talks to (with their network services);
- ``OpenEnvEnv``: an OpenEnv environment server (a docker image or a remote endpoint);
- ``CliAgentEnv``: a command-line agent run inside a hosted sandbox, its model calls tunnelled back;
- ``HarborEnv``: Harbor tasks, each in its own hosted sandbox container.

Also 0.1.4's ``TextArenaEnv`` (its module path ``verifiers.envs.textarena_env`` is served from
here by ``verifiers.compat``), which is not ported; that is not ``vf.TextArenaEnv``, 0.1.12's
form (``verifiers.envs.integrations``), which plays the game where ``textarena`` is installed.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from verifiers.compat.refused import refusing_getattr
from verifiers.envs.multiturn import MultiTurnEnv
from verifiers.errors import ConfigError
from verifiers.types import Messages, State

__all__ = ["CliAgentEnv", "HarborEnv", "MCPEnv", "OpenEnvEnv", "RefusedEnv", "TextArenaEnv"]

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


def textarena_installed() -> bool:
    """True if the optional ``textarena`` package can be imported."""
    return importlib.util.find_spec("textarena") is not None


class TextArenaEnv(MultiTurnEnv):
    """0.1.4's ``verifiers.envs.textarena_env.TextArenaEnv``, not ported: constructing it raises
    ``ConfigError``. 0.1.4 wrapped games of the optional ``textarena`` package (Wordle, Hangman)
    by driving its private game API and downloading nltk word lists at import. Without
    ``textarena`` the error says to install it; with it, to use ``vf.TextArenaEnv`` (0.1.12's form,
    which runs) or the bundled ``wordle`` environment (the same game, offline)."""

    def __init__(self, *args: Any, game: str = "Wordle-v0", **kwargs: Any):
        if not textarena_installed():
            raise ConfigError(
                f"TextArenaEnv(game={game!r}) needs the 'textarena' package, which is not installed",
                hint="install it with: pip install textarena",
            )
        raise ConfigError(
            f"0.1.4's verifiers.envs.textarena_env.TextArenaEnv(game={game!r}) is not ported to verifiers 0.2 "
            "(it drove textarena's private game API)",
            hint="use vf.TextArenaEnv (0.1.12's form) or vf.load_environment('wordle') for Wordle offline",
        )

    async def is_completed(self, messages: Any, state: Any, **kwargs: Any) -> bool:  # pragma: no cover
        return True

    async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:  # pragma: no cover
        return [], state
