"""Public names of verifiers 0.1.x releases that this library does not offer, each with its reason.

Three tables, one per kind of name, each entry saying why the name is not here and what to do
instead:

* ``REFUSED_MODULES``: old module paths none of whose names is offered (hosted services,
  upstream's own command-line tooling). ``import <path>`` works (the import hook of
  ``verifiers.compat.finder`` makes the module), so a module that only imports it loads; using
  any of its names is refused.
* ``REFUSED_NAMES``: ``(module, name)`` for single names of modules that exist here. The module's
  ``__getattr__`` (``refusing_getattr``) refuses them on first use.
* ``REFUSED_MEMBERS``: ``(class, member)`` for attributes and methods of our env, rubric and
  parser classes (``class`` is the ``__name__`` of the class of ours the member would be on; its
  subclasses inherit the entry). ``Environment.__getattr__`` and ``Rubric.__getattr__`` refuse
  them on first use.

A refused module name is a ``RefusedNameError`` (an ``ImportError``: what ``from module import
name`` raises for a missing name, so code that guards an optional import keeps working); a
refused member is a ``RefusedMemberError`` (an ``AttributeError``, so ``hasattr`` and
``getattr(obj, name, default)`` answer as for a missing one). Both are one line. The release
walk (tests/compat/) accepts a name of a release only if it resolves here with a compatible
signature or is listed here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from verifiers.errors import VerifiersError

_EVALUATE = "evaluate with env.evaluate(client, model) or the vf-eval command, whose results hold the outputs and metrics"
_HOSTED = "a hosted Prime service, not part of this library"
_IN_PROCESS = "environments run in-process here"
_INSTALL = "install an environment's package with pip (vf-install does it for a local folder)"
_TOKENS = "here token ids and logprobs are read by verifiers.envs.model_client.extract_turn_tokens"
_OWN_TOOL = "write it as your own tool function (any Python function with a docstring works with vf.ToolEnv)"
_EXPERIMENTAL = "verifiers.envs.experimental"
_HOSTED_SANDBOX = (
    "hosted sandbox containers (prime-sandboxes) started and driven from the environment; "
    "tools run as Python in the local sandbox here (vf.PythonEnv, vf.SandboxEnv's local tools)"
)
_GATEWAY = (
    "a gateway that serves an agent's model calls from inside a hosted sandbox back to the rollout; "
    "no hosted sandbox runs here"
)
_HARBOR_MCP = "MCP servers of Harbor tasks, run in the tasks' hosted containers; vf.HarborEnv is refused too"
_MCP = (
    "MCP servers launched and reached by the environment (vf.MCPEnv is refused); "
    "write the tools as Python functions in a vf.ToolEnv"
)
_CLIENT_LAYER = (
    "0.1.11+'s model-client layer (client classes, their configs and response models); pass an "
    "openai.AsyncOpenAI client pointed at vf-vllm or any OpenAI-compatible server, and read its responses"
)
_EVAL_TOOLING = (
    "a configuration or metadata model of upstream's vf-eval; this package's vf-eval takes its "
    "settings as flags and writes its results as a dataset (docs/evaluation.md)"
)
_V014_TASKS = (
    "0.1.14's task/harness API (vf.Env, Taskset, Harness, Toolset, User and the @vf.reward/@vf.metric/"
    "@vf.setup/@vf.update/@vf.advantage decorators), built around hosted sandboxes; write the task as a "
    "vf.SingleTurnEnv / vf.MultiTurnEnv / vf.ToolEnv with a vf.Rubric"
)
_LOOP_INTERNALS = (
    "an internal of upstream's generation loop, which changed in every release; call env.generate / "
    "env.evaluate / env.rollout, or override the documented hooks (setup_state, env_response, @vf.stop, @vf.cleanup)"
)
_ENV_SERVER = (
    "upstream's environment server (the environment run in its own process, reached over ZMQ); "
    "environments run in the caller's process here"
)
_LIMITS = (
    "a per-rollout limit upstream's loop enforced from the environment; set max_turns on the environment "
    "and max_tokens / max_seq_len on the sampling side (GRPOConfig, vf-eval flags)"
)
_EVAL_SETTINGS = (
    "a setting of upstream's evaluation runner kept on the environment; pass it to env.evaluate(...) / "
    "vf-eval (rollouts_per_example=, max_concurrent=) instead"
)
_MONITOR = (
    "0.1.9+'s tool monitor rubric; tool-call counts are reported as the metrics total_tool_calls and "
    "<tool>_calls of 0.1.8+-form tool environments"
)
_MONITOR_STOP = (
    "0.1.9+'s stop condition object on tool environments; a turn without tool calls ends the rollout here "
    "(stop_condition 'no_tools_called'), and the tool-call counts are metrics"
)
_SCORING_INTERNALS = (
    "an internal of upstream's scoring loop; call rubric.score_rollout / score_rollouts / score_group"
)
_MATH_VERIFY = (
    "an internal of upstream's MathRubric verification (its thread pool and limits); "
    "MathRubric scores with math-verify in-process here"
)
_TASKSETS = (
    "0.1.14's composable task sets and agent harnesses, which run each task in a hosted sandbox container "
    "(prime-sandboxes); write the task as a vf.MultiTurnEnv or vf.ToolEnv with Python tools"
)
_AGENT_CLI = (
    "an agent's command-line program (RLM, OpenCode) run inside a hosted sandbox, its model calls tunnelled "
    "back; run the agent's tools as Python functions in a vf.StatefulToolEnv instead"
)

REFUSED_MODULES: dict[str, str] = {
    # -- verifiers.utils.* -----------------------------------------------------------------------
    # 0.1.x utils: upstream's vf-eval command, hosted services and its own machinery.
    "verifiers.utils.eval_utils": f"internals of upstream's vf-eval command (endpoints, TOML configs, TUI, printing and saving results); {_EVALUATE}",
    "verifiers.utils.eval_display": f"upstream's vf-eval terminal display; {_EVALUATE}",
    "verifiers.utils.display_utils": f"upstream's vf-eval terminal display helpers; {_EVALUATE}",
    "verifiers.utils.env_config_utils": f"upstream's typed environment-config tables of its CLI (0.1.14); {_EVALUATE}",
    "verifiers.utils.report_utils": f"upstream's HTML evaluation reports; {_EVALUATE}",
    "verifiers.utils.save_utils": f"upstream's saving of evaluation outputs to its results folders and the Hub; {_EVALUATE}",
    "verifiers.utils.path_utils": f"upstream's evaluation-results folder layout; {_EVALUATE}",
    "verifiers.utils.metric_utils": (
        "upstream's evaluation metric accumulators; pass@k is verifiers.envs.results.pass_at_k_summary "
        "and evaluate() results carry the metrics"
    ),
    "verifiers.utils.usage_utils": "upstream's token-usage tracking in its rollout state; read usage from the model responses",
    "verifiers.utils.version_utils": (
        "upstream's version and git-commit stamps on saved results; use importlib.metadata.version(...)"
    ),
    "verifiers.utils.client_utils": (
        "upstream's client setup from its endpoint and Prime config files; pass an openai.AsyncOpenAI("
        "base_url=..., api_key=...) to env.evaluate / env.generate"
    ),
    "verifiers.utils.install_utils": f"installs from the Prime Environments Hub; {_INSTALL}",
    "verifiers.utils.import_utils": "upstream's TOML reader for its CLI configs; use tomllib.load(file)",
    "verifiers.utils.tunnel_utils": f"Cloudflare tunnels to hosted sandboxes; {_HOSTED}",
    "verifiers.utils.threaded_sandbox_client": f"the Prime sandbox client; {_HOSTED}",
    "verifiers.utils.interception_utils": (
        "the HTTP interception server of upstream's CLI-agent environments, which are not here (verifiers.envs.refused)"
    ),
    "verifiers.utils.worker_utils": f"upstream's environment-server workers over ZMQ; {_IN_PROCESS}",
    "verifiers.utils.serve_utils": f"upstream's environment servers over ZMQ; {_IN_PROCESS}",
    "verifiers.utils.process_utils": f"upstream's environment-server worker processes; {_IN_PROCESS}",
    "verifiers.utils.heartbeat": f"upstream's heartbeat to its hosted platform; {_HOSTED}",
    "verifiers.utils.thread_utils": (
        "upstream's thread-local event loops and executor scaling; sync hooks run through "
        "verifiers.utils.async_utils (call_maybe_async, run_sync)"
    ),
    "verifiers.utils.error_utils": (
        "upstream's vf.Error chains; errors here are verifiers.errors.VerifiersError subclasses "
        "(follow __cause__ for the chain)"
    ),
    "verifiers.utils.processing_utils": f"upstream's vLLM token/logprob parsing (0.1.6-0.1.7); {_TOKENS}",
    "verifiers.utils.token_utils": f"upstream's token-prompt requests to vLLM (0.1.9-0.1.10); {_TOKENS}",
    "verifiers.utils.rlm_data_serialization_utils": (
        "data serialization into the sandbox of upstream's RLMEnv (0.1.9), which is not here"
    ),
    # -- verifiers.envs.experimental.* -----------------------------------------------------------
    **dict.fromkeys(
        (
            f"{_EXPERIMENTAL}.composable",
            f"{_EXPERIMENTAL}.composable._filter",
            f"{_EXPERIMENTAL}.composable.composable_env",
            f"{_EXPERIMENTAL}.composable.harness",
            f"{_EXPERIMENTAL}.composable.harnesses",
            f"{_EXPERIMENTAL}.composable.harnesses.mini_swe_agent",
            f"{_EXPERIMENTAL}.composable.harnesses.opencode",
            f"{_EXPERIMENTAL}.composable.harnesses.rlm",
            f"{_EXPERIMENTAL}.composable.task",
            f"{_EXPERIMENTAL}.composable.tasksets",
            f"{_EXPERIMENTAL}.composable.tasksets.cp",
            f"{_EXPERIMENTAL}.composable.tasksets.cp.cp_task",
            f"{_EXPERIMENTAL}.composable.tasksets.cp.test_utils",
            f"{_EXPERIMENTAL}.composable.tasksets.harbor",
            f"{_EXPERIMENTAL}.composable.tasksets.harbor.harbor",
            f"{_EXPERIMENTAL}.composable.tasksets.lean",
            f"{_EXPERIMENTAL}.composable.tasksets.lean.lean_task",
            f"{_EXPERIMENTAL}.composable.tasksets.math",
            f"{_EXPERIMENTAL}.composable.tasksets.math.math_task",
            f"{_EXPERIMENTAL}.composable.tasksets.swe",
            f"{_EXPERIMENTAL}.composable.tasksets.swe._test_patch",
            f"{_EXPERIMENTAL}.composable.tasksets.swe.log_parser",
            f"{_EXPERIMENTAL}.composable.tasksets.swe.multi_swe",
            f"{_EXPERIMENTAL}.composable.tasksets.swe.openswe",
            f"{_EXPERIMENTAL}.composable.tasksets.swe.r2e_gym",
            f"{_EXPERIMENTAL}.composable.tasksets.swe.swe_lego",
            f"{_EXPERIMENTAL}.composable.tasksets.swe.swe_rebench_v2",
            f"{_EXPERIMENTAL}.composable.tasksets.swe.swe_rebench_v2_log_parsers",
            f"{_EXPERIMENTAL}.composable.tasksets.swe.swe_smith",
            f"{_EXPERIMENTAL}.composable.tasksets.swe.swe_tasksets",
            f"{_EXPERIMENTAL}.utils",
            f"{_EXPERIMENTAL}.utils.file_locks",
            f"{_EXPERIMENTAL}.utils.git_checkout_cache",
        ),
        _TASKSETS,
    ),
    **dict.fromkeys(
        (
            f"{_EXPERIMENTAL}.rlm_env",
            f"{_EXPERIMENTAL}.opencode_env",
            f"{_EXPERIMENTAL}.opencode_qa_env",
            f"{_EXPERIMENTAL}.opencode_rlm_env",
        ),
        _AGENT_CLI,
    ),
    f"{_EXPERIMENTAL}.sandbox_mixin": _HOSTED_SANDBOX,
    f"{_EXPERIMENTAL}.rollout_gateway_mixin": _GATEWAY,
    f"{_EXPERIMENTAL}.harbor_env.mcp": _HARBOR_MCP,
    # -- other ------------------------------------------------------------------------------------
}

REFUSED_NAMES: dict[tuple[str, str], str] = {
    ("verifiers.utils.tools", "search"): (
        f"Brave web search (needed the brave package and an API key); {_OWN_TOOL}"
    ),
    ("verifiers.utils.tools", "search_ddg"): (
        f"DuckDuckGo web search (needed the duckduckgo_search package and the network); {_OWN_TOOL}"
    ),
    ("verifiers.utils.tools", "ask"): (
        f"asking an LLM about a web page (needed a DeepInfra API key and the network); {_OWN_TOOL}"
    ),
    # -- verifiers and verifiers.types -------------------------------------------------------
    ("verifiers.types", "ClientConfig"): _CLIENT_LAYER,
    ("verifiers.types", "EndpointClientConfig"): _CLIENT_LAYER,
    ("verifiers.types", "ClientType"): _CLIENT_LAYER,
    ("verifiers.types", "Usage"): _CLIENT_LAYER,
    ("verifiers.types", "ResponseTokens"): _CLIENT_LAYER,
    ("verifiers.types", "Response"): _CLIENT_LAYER,
    ("verifiers.types", "ResponseMessage"): _CLIENT_LAYER,
    ("verifiers.types", "CustomBaseModel"): _CLIENT_LAYER,
    ("verifiers.types", "EvalConfig"): _EVAL_TOOLING,
    ("verifiers.types", "EvalRunConfig"): _EVAL_TOOLING,
    ("verifiers.types", "GenerateMetadata"): _EVAL_TOOLING,
    ("verifiers.types", "VersionInfo"): _EVAL_TOOLING,
    ("verifiers.types", "RolloutOutput"): _EVAL_TOOLING,
    ("verifiers.types", "TASK_INPUT_FIELDS"): _V014_TASKS,
    ("verifiers.types", "TimeSpan"): _V014_TASKS,
    ("verifiers.types", "TimeSpans"): _V014_TASKS,
    ("verifiers.types", "assert_json_serializable"): _V014_TASKS,
    ("verifiers.types", "flatten_task_input"): _V014_TASKS,
    ("verifiers.types", "normalize_task_payload"): _V014_TASKS,
    ("verifiers.types", "task_payload_from_info"): _V014_TASKS,
    ("verifiers", "Client"): _CLIENT_LAYER,
    ("verifiers", "AnthropicMessagesClient"): _CLIENT_LAYER,
    ("verifiers", "OpenAIChatCompletionsClient"): _CLIENT_LAYER,
    ("verifiers", "OpenAIChatCompletionsTokenClient"): _CLIENT_LAYER,
    ("verifiers", "OpenAICompletionsClient"): _CLIENT_LAYER,
    ("verifiers", "OpenAIResponsesClient"): _CLIENT_LAYER,
    ("verifiers", "Env"): _V014_TASKS,
    ("verifiers", "EnvConfig"): _V014_TASKS,
    ("verifiers", "Task"): _V014_TASKS,
    ("verifiers", "Taskset"): _V014_TASKS,
    ("verifiers", "TasksetConfig"): _V014_TASKS,
    ("verifiers", "HarborTaskset"): _V014_TASKS,
    ("verifiers", "HarborTasksetConfig"): _V014_TASKS,
    ("verifiers", "Harness"): _V014_TASKS,
    ("verifiers", "HarnessConfig"): _V014_TASKS,
    ("verifiers", "CLIHarness"): _V014_TASKS,
    ("verifiers", "MiniSWEAgent"): _V014_TASKS,
    ("verifiers", "OpenCode"): _V014_TASKS,
    ("verifiers", "Pi"): _V014_TASKS,
    ("verifiers", "RLM"): _V014_TASKS,
    ("verifiers", "SandboxConfig"): _V014_TASKS,
    ("verifiers", "Toolset"): _V014_TASKS,
    ("verifiers", "ToolsetConfig"): _V014_TASKS,
    ("verifiers", "MCPTool"): _V014_TASKS,
    ("verifiers", "MCPToolConfig"): _V014_TASKS,
    ("verifiers", "User"): _V014_TASKS,
    ("verifiers", "UserConfig"): _V014_TASKS,
    ("verifiers", "reward"): _V014_TASKS,
    ("verifiers", "metric"): _V014_TASKS,
    ("verifiers", "advantage"): _V014_TASKS,
    ("verifiers", "setup"): _V014_TASKS,
    ("verifiers", "update"): _V014_TASKS,
    ("verifiers", "RolloutGatewayMixin"): _GATEWAY,
    ("verifiers", "RendererClient"): _CLIENT_LAYER,
    ("verifiers", "BrowserEnv"): (
        "0.1.10+'s browser-automation environment (Stagehand/Playwright browsers, by default hosted on "
        "Browserbase with its API key); expose the browser actions as Python tools in a vf.StatefulToolEnv"
    ),
    # -- verifiers.utils.* ---------------------------------------------------------------------
    ("verifiers.utils.async_utils", "maybe_retry"): (
        "retried a rollout on upstream's vf.InfraError / InvalidModelResponseError in its state; "
        "failed requests here are retried by the client (openai's max_retries)"
    ),
    ("verifiers.utils.message_utils", "get_overlong_prompt_dummy_response"): (
        "upstream's stand-in response for a prompt over the context; here that rollout ends with "
        "verifiers.errors.PromptTooLongError recorded in its state"
    ),
    **dict.fromkeys(
        [
            ("verifiers.utils.message_utils", name)
            for name in ("from_raw_content_part", "normalize_messages", "maybe_normalize_messages")
        ],
        "converted messages to upstream's pydantic message classes (0.1.11+); messages here are "
        "dicts, verifiers.types.as_message gives the typed dict of a message's role",
    ),
    **dict.fromkeys(
        [
            ("verifiers.utils.message_utils", name)
            for name in ("serialize_message_for_output", "serialize_messages_for_output")
        ],
        f"upstream's format of saved evaluation outputs; {_EVALUATE}",
    ),
    **dict.fromkeys(
        [
            ("verifiers.utils.env_utils", name)
            for name in ("coerce_typed_env_config", "env_config_annotation", "env_config_type")
        ],
        "upstream's typed EnvConfig arguments of load_environment (0.1.14); pass plain keyword "
        "arguments to vf.load_environment",
    ),
    # -- verifiers.envs.* (module-level names) -------------------------------------------------
    ("verifiers.envs.sandbox_env", "SandboxCreationError"): _HOSTED_SANDBOX,
    ("verifiers.envs.sandbox_env", "SandboxNotReadyError"): _HOSTED_SANDBOX,
    ("verifiers.envs.sandbox_env", "ThreadedAsyncSandboxClient"): _HOSTED_SANDBOX,
    ("verifiers.envs.sandbox_env", "LoggerProtocol"): _HOSTED_SANDBOX,
    ("verifiers.envs.python_env", "PythonWorkerState"): _HOSTED_SANDBOX,
    ("verifiers.envs.python_env", "PythonWorkerDeadError"): _HOSTED_SANDBOX,
    ("verifiers.envs.python_env", "PythonWorkerNotReadyError"): _HOSTED_SANDBOX,
    ("verifiers.envs.python_env", "PythonWorkerRequestError"): _HOSTED_SANDBOX,
    (
        "verifiers.envs.stateful_tool",
        "filter_signature",
    ): "an internal of 0.1.9+'s StatefulToolEnv; add_tool(tool, args_to_skip=[...]) hides arguments from the model",
    ("verifiers.envs.tool", "ToolMonitorRubric"): _MONITOR,
    ("verifiers.envs.group", "ENV_GROUP_INFO_KEY"): _V014_TASKS,
    ("verifiers.rubrics.math_rubric", "verify_response"): _MATH_VERIFY,
    ("verifiers.rubrics.rubric", "ScoreObjectProvider"): _V014_TASKS,
    ("verifiers.rubrics.rubric", "GroupScoreObjectProvider"): _V014_TASKS,
    # The other names of mcp_env and cli_agent_env, modules served by verifiers.envs.refused.
    ("verifiers.envs.refused", "MCPServerConfig"): _MCP,
    ("verifiers.envs.refused", "MCPServerConnection"): _MCP,
    ("verifiers.envs.refused", "MCPToolWrapper"): _MCP,
    ("verifiers.envs.refused", "CliAgentMonitorRubric"): _AGENT_CLI,
    ("verifiers.envs.refused", "AgentError"): _AGENT_CLI,
    ("verifiers.envs.refused", "make_agent_error"): _AGENT_CLI,
    (f"{_EXPERIMENTAL}.harbor_env", "HarborMCPHealthcheck"): _HARBOR_MCP,
    (f"{_EXPERIMENTAL}.harbor_env", "HarborMCPMixin"): _HARBOR_MCP,
    (f"{_EXPERIMENTAL}.harbor_env", "HarborMCPServer"): _HARBOR_MCP,
    (f"{_EXPERIMENTAL}.harbor_env", "NETWORK_TRANSPORTS"): _HARBOR_MCP,
    (f"{_EXPERIMENTAL}.harbor_env", "mcp_agent_url"): _HARBOR_MCP,
    (f"{_EXPERIMENTAL}.harbor_env", "mcp_url_port"): _HARBOR_MCP,
    (f"{_EXPERIMENTAL}.harbor_env", "parse_mcp_servers"): _HARBOR_MCP,
    (_EXPERIMENTAL, "SandboxMixin"): _HOSTED_SANDBOX,
    (_EXPERIMENTAL, "RolloutGatewayMixin"): _GATEWAY,
    (_EXPERIMENTAL, "ComposableEnv"): _TASKSETS,
    (_EXPERIMENTAL, "Harness"): _TASKSETS,
    (_EXPERIMENTAL, "SandboxSpec"): _TASKSETS,
    (_EXPERIMENTAL, "SandboxTaskSet"): _TASKSETS,
    (_EXPERIMENTAL, "Task"): _TASKSETS,
    (_EXPERIMENTAL, "TaskSet"): _TASKSETS,
}

REFUSED_MEMBERS: dict[tuple[str, str], str] = {
    # -- Environment and its subclasses ----------------------------------------------------------
    ("Environment", "run_rollout_with_semaphore"): _LOOP_INTERNALS,
    ("Environment", "process_chat_format_vllm"): _LOOP_INTERNALS,
    ("Environment", "process_completion_format_vllm"): _LOOP_INTERNALS,
    ("Environment", "init_completion"): _LOOP_INTERNALS,
    ("Environment", "get_context_messages"): _LOOP_INTERNALS,
    ("Environment", "run_rollout"): _LOOP_INTERNALS,
    ("Environment", "run_group"): _LOOP_INTERNALS,
    ("Environment", "add_model_response"): _LOOP_INTERNALS,
    ("Environment", "render_state"): _LOOP_INTERNALS,
    ("Environment", "get_state_usage"): _LOOP_INTERNALS,
    ("Environment", "increment_state_usage"): _LOOP_INTERNALS,
    ("Environment", "increment_state_usage_from_response"): _LOOP_INTERNALS,
    ("Environment", "set_kwargs"): _LOOP_INTERNALS,
    ("Environment", "get_eval_inputs"): _LOOP_INTERNALS,
    ("Environment", "cleanup"): _LOOP_INTERNALS,
    ("Environment", "start_server"): _ENV_SERVER,
    ("Environment", "stop_server"): _ENV_SERVER,
    ("Environment", "env_client"): _ENV_SERVER,
    ("Environment", "env_server_process"): _ENV_SERVER,
    ("Environment", "death_pipe_writer"): _ENV_SERVER,
    ("Environment", "max_seq_len"): _LIMITS,
    ("Environment", "set_max_seq_len"): _LIMITS,
    ("Environment", "max_total_completion_tokens"): _LIMITS,
    ("Environment", "max_total_completion_tokens_reached"): _LIMITS,
    ("Environment", "set_max_total_completion_tokens"): _LIMITS,
    ("Environment", "timeout_seconds"): _LIMITS,
    ("Environment", "mark_timed_out"): _LIMITS,
    ("Environment", "concurrency"): _EVAL_SETTINGS,
    ("Environment", "set_concurrency"): _EVAL_SETTINGS,
    ("Environment", "rollouts_per_example"): _EVAL_SETTINGS,
    ("Environment", "pass_threshold"): _EVAL_SETTINGS,
    ("Environment", "score_rollouts"): _EVAL_SETTINGS,
    ("Environment", "set_score_rollouts"): _EVAL_SETTINGS,
    ("Environment", "interleaved_rollouts"): _EVAL_SETTINGS,
    ("Environment", "set_interleaved_rollouts"): _EVAL_SETTINGS,
    ("Environment", "dataset_source"): _EVAL_SETTINGS,
    ("Environment", "eval_dataset_source"): _EVAL_SETTINGS,
    ("Environment", "map_kwargs"): _EVAL_SETTINGS,
    ("Environment", "provides_advantages"): _V014_TASKS,
    ("Environment", "requires_group_rollouts"): _V014_TASKS,
    (
        "Environment",
        "is_completed",
    ): "a MultiTurnEnv method (every environment here but the base class is one)",
    ("EnvGroup", "get_env_for_name"): "0.1.14's name; EnvGroup routes by task: env_group.env_map[task]",
    ("StatefulToolEnv", "tool_monitor_rubric"): _MONITOR,
    ("ToolEnv", "tool_monitor_rubric"): _MONITOR_STOP,
    ("ToolEnv", "no_tools_called"): _MONITOR_STOP,
    # -- Rubric and its subclasses ---------------------------------------------------------------
    ("Rubric", "score_rollout_with_semaphore"): _SCORING_INTERNALS,
    ("Rubric", "run_score_rollout"): _SCORING_INTERNALS,
    ("Rubric", "dummy_score_rollout"): _SCORING_INTERNALS,
    ("Rubric", "dummy_score_group"): _SCORING_INTERNALS,
    ("Rubric", "cleanup"): _SCORING_INTERNALS,
    ("Rubric", "add_cleanup_handler"): _V014_TASKS,
    ("Rubric", "add_score_object_provider"): _V014_TASKS,
    ("Rubric", "add_group_score_object_provider"): _V014_TASKS,
    ("Rubric", "score_object_providers"): _V014_TASKS,
    ("Rubric", "group_score_object_providers"): _V014_TASKS,
    ("Rubric", "score_objects"): _V014_TASKS,
    ("Rubric", "group_score_objects"): _V014_TASKS,
    ("Rubric", "cleanup_objects"): _V014_TASKS,
    ("Rubric", "has_advantages"): _V014_TASKS,
    ("Rubric", "has_group_rewards"): _V014_TASKS,
    ("Rubric", "task_for_state"): _V014_TASKS,
    ("Rubric", "task_score_fields"): _V014_TASKS,
    ("MathRubric", "HARD_TIMEOUT_SECONDS"): _MATH_VERIFY,
    ("MathRubric", "MAX_VERIFY_CHARS"): _MATH_VERIFY,
    ("MathRubric", "max_verify_chars"): _MATH_VERIFY,
    ("MathRubric", "executor"): _MATH_VERIFY,
    ("MathRubric", "executor_name"): _MATH_VERIFY,
    ("MathRubric", "run_in_executor"): _MATH_VERIFY,
    ("MathRubric", "correct_answer"): _MATH_VERIFY,
    # -- SandboxEnv, PythonEnv -------------------------------------------------------------------
    ("SandboxEnv", "sandbox_request"): _HOSTED_SANDBOX,
    ("SandboxEnv", "get_sandbox_request"): _HOSTED_SANDBOX,
    ("SandboxEnv", "with_retry"): _HOSTED_SANDBOX,
    ("SandboxEnv", "teardown_sandboxes"): _HOSTED_SANDBOX,
    ("SandboxEnv", "teardown_sandbox_client"): _HOSTED_SANDBOX,
    ("SandboxEnv", "bulk_delete_sandboxes"): _HOSTED_SANDBOX,
    ("SandboxEnv", "cleanup_sandboxes"): _HOSTED_SANDBOX,
    ("PythonEnv", "cleanup_python_env"): _HOSTED_SANDBOX,
}


class RefusedNameError(VerifiersError, ImportError):
    """A public name of a 0.1.x release that is not offered here (``REFUSED_NAMES`` says why)."""


class RefusedMemberError(VerifiersError, AttributeError):
    """A member of a 0.1.x class that is not offered here (``REFUSED_MEMBERS`` says why)."""


def _refused_as(module: str, name: str) -> tuple[str, str] | None:
    """``(path, reason)``: the path ``module.name`` is refused under (``module``, or an old path
    that moved to it, ``verifiers.compat.paths.MOVED``) and why; None when it is not refused."""
    from verifiers.compat.paths import MOVED

    for path in (module, *(old for old, new in MOVED.items() if new == module)):
        reason = REFUSED_NAMES.get((path, name))
        if reason is not None:
            return path, reason
    reason = REFUSED_MODULES.get(module)
    return None if reason is None else (module, reason)


def name_refusal(module: str, name: str) -> str | None:
    """Why ``module.name`` is refused, or None when it is not."""
    found = _refused_as(module, name)
    return None if found is None else found[1]


def refuse(module: str, name: str) -> NoReturn:
    """Raise the one-line error for a refused name (``AttributeError`` for a name never public)."""
    found = None if name.startswith("__") else _refused_as(module, name)
    if found is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    path, reason = found
    raise RefusedNameError(f"{path}.{name} is not part of verifiers 0.2: {reason}")


def refusing_getattr(module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` that refuses the module's names of ``REFUSED_NAMES``."""

    def __getattr__(name: str) -> Any:
        refuse(module, name)

    return __getattr__


def inherited_entry(table: dict[tuple[str, str], str], cls: type, name: str) -> str | None:
    """``table``'s entry for ``(class name, name)`` of the first class of ``cls``'s MRO that has one:
    a class's entries hold for its subclasses."""
    for klass in cls.__mro__:
        entry = table.get((klass.__name__, name))
        if entry is not None:
            return entry
    return None


def member_refusal(cls: type, name: str) -> str | None:
    """Why ``name`` is refused on ``cls`` (an entry of any class of its MRO), or None."""
    return inherited_entry(REFUSED_MEMBERS, cls, name)


def refuse_member(obj: Any, name: str) -> NoReturn:
    """Raise the one-line error for a refused member of ``obj`` (plain ``AttributeError`` otherwise)."""
    cls = obj if isinstance(obj, type) else type(obj)
    reason = None if name.startswith("__") else member_refusal(cls, name)
    if reason is None:
        raise AttributeError(f"{cls.__name__!r} object has no attribute {name!r}")
    raise RefusedMemberError(
        f"{cls.__name__}.{name} (verifiers 0.1.x) is not part of verifiers 0.2: {reason}"
    )
