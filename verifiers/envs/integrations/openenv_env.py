"""0.1.12's ``verifiers.envs.integrations.openenv_env``: ``OpenEnvEnv`` needs an OpenEnv server and is
refused in one line when constructed (see ``verifiers.envs.refused``)."""

from verifiers.envs.refused import OpenEnvEnv

__all__ = ["OpenEnvEnv"]
