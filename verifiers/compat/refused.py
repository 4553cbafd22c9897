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
}

REFUSED_MEMBERS: dict[tuple[str, str], str] = {
    # -- Environment and its subclasses ----------------------------------------------------------
    # -- Rubric and its subclasses ---------------------------------------------------------------
    # -- SandboxEnv, PythonEnv -------------------------------------------------------------------
}


class RefusedNameError(VerifiersError, ImportError):
    """A public name of a 0.1.x release that is not offered here (``REFUSED_NAMES`` says why)."""


class RefusedMemberError(VerifiersError, AttributeError):
    """A member of a 0.1.x class that is not offered here (``REFUSED_MEMBERS`` says why)."""


def name_refusal(module: str, name: str) -> str | None:
    """Why ``module.name`` is refused, or None when it is not."""
    return REFUSED_NAMES.get((module, name)) or REFUSED_MODULES.get(module)


def refuse(module: str, name: str) -> NoReturn:
    """Raise the one-line error for a refused name (``AttributeError`` for a name never public)."""
    reason = None if name.startswith("__") else name_refusal(module, name)
    if reason is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    raise RefusedNameError(f"{module}.{name} is not part of verifiers 0.2: {reason}")


def refusing_getattr(module: str) -> Callable[[str], Any]:
    """A module ``__getattr__`` that refuses the module's names of ``REFUSED_NAMES``."""

    def __getattr__(name: str) -> Any:
        refuse(module, name)

    return __getattr__


def member_refusal(cls: type, name: str) -> str | None:
    """Why ``name`` is refused on ``cls`` (an entry of any class of its MRO), or None."""
    for klass in cls.__mro__:
        reason = REFUSED_MEMBERS.get((klass.__name__, name))
        if reason is not None:
            return reason
    return None


def refuse_member(obj: Any, name: str) -> NoReturn:
    """Raise the one-line error for a refused member of ``obj`` (plain ``AttributeError`` otherwise)."""
    cls = obj if isinstance(obj, type) else type(obj)
    reason = None if name.startswith("__") else member_refusal(cls, name)
    if reason is None:
        raise AttributeError(f"{cls.__name__!r} object has no attribute {name!r}")
    raise RefusedMemberError(
        f"{cls.__name__}.{name} (verifiers 0.1.x) is not part of verifiers 0.2: {reason}"
    )
