"""Environments wrapping third-party packages (0.1.10+'s ``verifiers.envs.integrations``).

Each module imports without its package; constructing the class without it raises
``MissingPackageError`` naming what to ``pip install``. ``OpenEnvEnv`` needs an outside
server and is refused in one line (``verifiers.envs.refused``; its module path
``openenv_env`` is an old path of ``verifiers.compat``).
"""

from verifiers.envs.integrations.reasoninggym_env import ReasoningGymEnv
from verifiers.envs.integrations.textarena_env import TextArenaEnv
from verifiers.envs.refused import OpenEnvEnv

__all__ = ["OpenEnvEnv", "ReasoningGymEnv", "TextArenaEnv"]
