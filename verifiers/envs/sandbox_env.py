"""``SandboxEnv`` (0.1.8+'s ``vf.SandboxEnv``) on this machine: a ``StatefulToolEnv`` whose tools
run in a per-rollout sandbox.

Upstream creates one hosted container per rollout (prime-sandboxes, a docker image) and gives
the model a ``bash(command)`` tool inside it. Here the sandbox is local
(:mod:`verifiers.envs.sandbox`: a locked-down Python process, no network, no shell, no
processes), so what fits is Python: ``vf.PythonEnv`` and subclasses that offer Python tools.
Refused, in one ``ConfigError`` line, is what needs the hosted container: a ``SandboxEnv``
used as it is (its ``bash`` tool runs shell commands), a subclass that keeps ``bash`` (at its
first rollout, as the tool list is only final then), or a docker image other than a plain
``python:3.x`` one.

Per rollout, as upstream: ``state["sandbox_id"]`` (a local id) and ``state["sandbox_state"]``
(``ready``, ``ready_wait_time``, ``command_execution_times``), reported by the monitor
metrics ``sandbox_ready_wait_time`` and ``sandbox_command_execution_time`` (weight 0).
``post_rollout(state)`` runs when the rollout ends (upstream's hook before the sandbox is
deleted); the constructor's hosted-sandbox settings (``cpu_cores``, ``team_id``, retries, ...)
are accepted and have no effect, but ``memory_gb`` and ``timeout_per_command_seconds`` limit
each run.
"""

from __future__ import annotations

import re
import uuid
from typing import Any, TypedDict

from verifiers.compat.refused import refusing_getattr
from verifiers.envs.decorators import cleanup
from verifiers.envs.stateful_tool import StatefulToolEnv
from verifiers.errors import ConfigError, SandboxError
from verifiers.rubrics.rubric import Rubric
from verifiers.types import Messages, State

__all__ = ["SandboxEnv", "SandboxMonitorRubric"]

_LOCAL_IMAGE = re.compile(r"^(docker\.io/)?(library/)?python:3(\.\d+)*(-slim|-bookworm|-bullseye|-alpine)?$")
"""Docker images whose use is plain Python, which the local sandbox runs with this interpreter."""

_HOSTED = "a hosted sandbox (prime-sandboxes) to run shell commands in a container"


class SandboxMonitorRubric(Rubric):
    """Monitor metrics of the sandbox (weight 0): time to ready and mean command time."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.add_metric(self.sandbox_ready_wait_time)
        self.add_metric(self.sandbox_command_execution_time)

    def sandbox_ready_wait_time(self, state: State) -> float:
        return float((state.get("sandbox_state") or {}).get("ready_wait_time", 0.0))

    def sandbox_command_execution_time(self, state: State) -> float:
        times = (state.get("sandbox_state") or {}).get("command_execution_times") or []
        return float(sum(times) / len(times)) if times else 0.0


class SandboxState(TypedDict):
    """``state["sandbox_state"]`` (0.1.9+): whether the sandbox is ready, how long that took, and
    each command's run time."""

    ready: bool
    ready_wait_time: float
    command_execution_times: list[float]


class HostedSandboxClient:
    """``SandboxEnv.sandbox_client`` (0.1.5+): upstream's client of the hosted sandbox service.

    Subclasses read the attribute, so it exists; every use of it is refused in one line, since
    there is no hosted service here (tools run as Python in the local sandbox instead)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise ConfigError(
            f"SandboxEnv.sandbox_client.{name} needs {_HOSTED}",
            hint="offer Python tools (vf.PythonEnv runs code in a local sandbox) instead of sandbox client calls",
        )


class SandboxEnv(StatefulToolEnv):
    """Per-rollout local sandbox; see the module for what runs here and what is refused."""

    def __init__(
        self,
        sandbox_name: str = "sandbox-env",
        docker_image: str = "python:3.11-slim",
        start_command: str = "tail -f /dev/null",
        cpu_cores: int = 1,
        memory_gb: int = 2,
        disk_size_gb: int = 5,
        gpu_count: int = 0,
        timeout_minutes: int = 60,
        timeout_per_command_seconds: int = 30,
        environment_vars: dict[str, str] | None = None,
        team_id: str | None = None,
        advanced_configs: Any = None,
        labels: list[str] | None = None,
        max_retries: int = 5,
        base_delay: float = 0.5,
        backoff_factor: float = 2.0,
        max_backoff_seconds: float = 30.0,
        jitter: float = 1e-3,
        stop_errors: list[type[Exception]] | None = None,
        sandbox_client_max_workers: int = 50,
        sandbox_client_max_connections: int = 100,
        sandbox_client_max_keepalive_connections: int = 50,
        **kwargs: Any,
    ):
        if type(self) is SandboxEnv:
            raise ConfigError(
                f"vf.SandboxEnv runs the model's bash commands in a container, which needs {_HOSTED}",
                hint="on this machine use vf.PythonEnv (Python code in a local sandbox), or a vf.StatefulToolEnv "
                "with your own tools",
            )
        if not _LOCAL_IMAGE.match(str(docker_image)):
            raise ConfigError(
                f"{type(self).__name__}(docker_image={docker_image!r}) needs {_HOSTED} built from that image",
                hint="only plain python:3.x images run locally (as Python in verifiers' sandbox)",
            )
        if gpu_count:
            raise ConfigError(f"{type(self).__name__}(gpu_count={gpu_count}) needs {_HOSTED} with a GPU")
        if float(timeout_per_command_seconds) <= 0 or float(memory_gb) <= 0:
            raise ConfigError(
                f"timeout_per_command_seconds={timeout_per_command_seconds} and memory_gb={memory_gb} must be > 0"
            )
        super().__init__(stop_errors=stop_errors if stop_errors is not None else [SandboxError], **kwargs)
        self.sandbox_name = sandbox_name
        self.docker_image = docker_image
        self.timeout_per_command_seconds = timeout_per_command_seconds
        self.memory_gb = memory_gb
        self.environment_vars = dict(environment_vars or {})
        self.active_sandboxes: set[str] = set()
        self.sandbox_client = HostedSandboxClient()
        self.add_rubric(SandboxMonitorRubric())
        self.add_tool(self.bash, args_to_skip=["sandbox_id", "working_dir", "sandbox_state"])

    async def bash(
        self, command: str, sandbox_id: str, sandbox_state: dict, working_dir: str | None = None
    ) -> str:
        """Execute `command` inside persistent sandbox container."""
        # Never reached in a rollout: setup_state refuses an env that still offers bash.
        raise ConfigError(f"the bash tool needs {_HOSTED}")

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        """Open this rollout's sandbox (a local id and its bookkeeping)."""
        if "bash" in self.tool_map:
            raise ConfigError(
                f"{type(self).__name__} offers the bash tool, which needs {_HOSTED}",
                hint="remove it (self.remove_tool(self.bash)) and offer Python tools, as vf.PythonEnv does",
            )
        sandbox_id = f"local-{uuid.uuid4().hex[:12]}"
        self.active_sandboxes.add(sandbox_id)
        state["sandbox_id"] = sandbox_id
        state["sandbox_state"] = {"ready": True, "ready_wait_time": 0.0, "command_execution_times": []}
        return await super().setup_state(state, **kwargs)

    def update_tool_args(
        self, tool_name: str, tool_args: dict, messages: Messages, state: State, **kwargs: Any
    ) -> dict:
        updated = dict(tool_args)
        if tool_name == "bash":
            updated.update(sandbox_id=state["sandbox_id"], sandbox_state=state["sandbox_state"])
            updated["working_dir"] = state.get("working_dir")
        return updated

    async def post_rollout(self, state: State) -> None:
        """Override to read what the sandbox holds before it closes (e.g. for reward functions)."""

    @cleanup
    async def destroy_sandbox(self, state: State) -> None:
        await self.post_rollout(state)
        self.active_sandboxes.discard(state.get("sandbox_id") or "")


# Names of upstream's module that are not offered here: refused in one line (verifiers.compat.refused).
__getattr__ = refusing_getattr(__name__)
