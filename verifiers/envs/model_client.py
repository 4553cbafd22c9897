"""One model call through any OpenAI-compatible client, and what to read from its answer.

- Builds the request: sampling args, tools, and the vLLM token-data parameters
  (see docs/architecture.md, "Token data from the server").
- Works with ``AsyncOpenAI`` and with a sync ``OpenAI`` client (run in a thread).
- If an endpoint rejects the token-data parameters (HTTP 400/422 naming them),
  retries once without them, remembers that for the client's URL, warns once.
- Maps transport failures to typed errors (``ServerUnreachableError`` with the
  URL, ``ServerTimeoutError``, ``ServerError``); a prompt longer than the
  model's context becomes :class:`PromptTooLongError`.
- Extracts the assistant message and :class:`TurnTokens` from a response.

``openai`` is imported lazily so ``import verifiers`` stays fast.
"""

from __future__ import annotations

import concurrent.futures
import inspect
import logging
import re
import threading
from typing import Any

from verifiers.errors import PromptTooLongError, ServerError, ServerTimeoutError, ServerUnreachableError
from verifiers.types import (
    AssistantMessage,
    ChatMessage,
    Messages,
    MessageType,
    SamplingArgs,
    ToolCall,
    TurnTokens,
)
from verifiers.utils.async_utils import is_async_callable, resolve, run_in_thread
from verifiers.utils.logging import warn_once

logger = logging.getLogger("verifiers.envs.model_client")

TOKEN_EXTRA_PARAMS = ("return_tokens_as_token_ids", "return_token_ids")
_TOKEN_PARAM_NAMES = ("logprobs", *TOKEN_EXTRA_PARAMS)
_CONTEXT_RE = re.compile(
    r"maximum context length|context length|context_length_exceeded|prompt is too long|too many tokens",
    re.IGNORECASE,
)

# Client URLs whose endpoint rejected the token-data parameters (shared by all envs:
# it is a property of the server, not of the environment).
_no_token_data: set[str] = set()
_no_token_lock = threading.Lock()
_known_params: dict[Any, frozenset[str] | None] = {}


def client_url(client: Any) -> str:
    """The client's base URL as a string ('' if it has none)."""
    return str(getattr(client, "base_url", "") or "").rstrip("/")


def _client_key(client: Any) -> str:
    return client_url(client) or f"client-{id(client)}"


def client_supports_token_data(client: Any) -> bool:
    """False once the client's endpoint has rejected the token-data parameters."""
    with _no_token_lock:
        return _client_key(client) not in _no_token_data


def forget_token_support(client: Any | None = None) -> None:
    """Forget which endpoints rejected token parameters (all, or one client's) (for tests)."""
    with _no_token_lock:
        if client is None:
            _no_token_data.clear()
        else:
            _no_token_data.discard(_client_key(client))


def _create_params(create: Any) -> frozenset[str] | None:
    """Keyword names ``create`` accepts (None if it takes ``**kwargs``: then send everything)."""
    key = getattr(create, "__func__", create)
    if key not in _known_params:
        try:
            params = inspect.signature(create).parameters.values()
        except (TypeError, ValueError):
            _known_params[key] = None
        else:
            if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
                _known_params[key] = None
            else:
                _known_params[key] = frozenset(p.name for p in params)
    return _known_params[key]


def build_request(
    create: Any,
    model: str,
    prompt: Messages,
    message_type: MessageType,
    sampling_args: SamplingArgs | None,
    oai_tools: list[dict] | None,
    token_data: bool,
) -> dict[str, Any]:
    """Keyword arguments for ``create``.

    ``max_tokens`` becomes ``max_completion_tokens`` for chat: OpenAI's newer
    models reject ``max_tokens`` and vLLM accepts both (and the reverse for the
    completions API, which only knows ``max_tokens``). ``None`` values are
    dropped. Arguments the SDK method does not name (vLLM's ``top_k``,
    ``min_p``, ``repetition_penalty``, ...) travel in ``extra_body``.
    """
    chat = message_type == "chat"
    args = {k: v for k, v in (sampling_args or {}).items() if v is not None}
    extra_body = dict(args.pop("extra_body", None) or {})
    if chat and "max_tokens" in args:
        args.setdefault("max_completion_tokens", args.pop("max_tokens"))
        args.pop("max_tokens", None)
    if not chat and "max_completion_tokens" in args:
        args.setdefault("max_tokens", args.pop("max_completion_tokens"))
        args.pop("max_completion_tokens", None)
    if token_data:
        args.setdefault("logprobs", True if chat else 1)
        for name in TOKEN_EXTRA_PARAMS:
            extra_body.setdefault(name, True)
    known = _create_params(create)
    if known is not None:
        for name in [k for k in args if k not in known]:
            extra_body.setdefault(name, args.pop(name))
    kwargs: dict[str, Any] = {"model": model, **args}
    if chat:
        kwargs["messages"] = prompt
        if oai_tools:
            kwargs["tools"] = oai_tools
    else:
        kwargs["prompt"] = prompt
    if extra_body:
        kwargs["extra_body"] = extra_body
    return kwargs


def _status_and_message(err: BaseException) -> tuple[int | None, str]:
    status = getattr(err, "status_code", None)
    message = str(getattr(err, "message", None) or err)
    body = getattr(err, "body", None)
    if body is not None and str(body) not in message:
        message = f"{message} {body}"
    return status, message


def _rejects_token_params(err: BaseException) -> bool:
    status, message = _status_and_message(err)
    return status in (400, 422) and any(p in message for p in _TOKEN_PARAM_NAMES)


def translate_error(err: BaseException, url: str) -> BaseException:
    """The typed verifiers error for an OpenAI SDK error (other errors are returned unchanged)."""
    import openai

    if isinstance(err, ServerError):
        return err
    if isinstance(err, openai.APITimeoutError):
        return ServerTimeoutError(
            "the model server did not answer in time",
            hint="raise the client timeout or lower max_concurrent",
            url=url,
        )
    if isinstance(err, openai.APIConnectionError):
        return ServerUnreachableError(
            "could not connect to the model server",
            hint="start the server (vf-vllm / vllm serve) or fix the client's base_url",
            url=url,
        )
    if isinstance(err, openai.APIStatusError):
        status, message = _status_and_message(err)
        if status in (400, 413) and _CONTEXT_RE.search(message):
            return PromptTooLongError(
                "the prompt is longer than the model's context window", url=url, status=status
            )
        return ServerError("the model server rejected the request", url=url, status=status, body=message)
    return err


async def _invoke(create: Any, kwargs: dict[str, Any], executor: concurrent.futures.Executor | None) -> Any:
    if is_async_callable(create):
        return await create(**kwargs)
    # A sync client: its blocking HTTP call runs in a worker thread.
    return await resolve(await run_in_thread(create, executor=executor, **kwargs))


async def call_model(
    client: Any,
    model: str,
    prompt: Messages,
    message_type: MessageType = "chat",
    sampling_args: SamplingArgs | None = None,
    oai_tools: list[dict] | None = None,
    executor: concurrent.futures.Executor | None = None,
) -> Any:
    """Send one chat/completion request and return the SDK's response object."""
    api = client.chat.completions if message_type == "chat" else client.completions
    create = api.create
    url = client_url(client)
    token_data = client_supports_token_data(client)
    kwargs = build_request(create, model, prompt, message_type, sampling_args, oai_tools, token_data)
    try:
        return await _invoke(create, kwargs, executor)
    except Exception as err:
        if not (token_data and _rejects_token_params(err)):
            raise translate_error(err, url) from err
        with _no_token_lock:
            _no_token_data.add(_client_key(client))
        warn_once(
            logger,
            f"no-token-data:{_client_key(client)}",
            "the endpoint %s rejected the token-data parameters (%s); retrying without them. "
            "Rollouts from it carry no token ids/logprobs (fine for evaluation, not for training).",
            url or "(client)",
            ", ".join(_TOKEN_PARAM_NAMES),
        )
    # The user's own sampling args stay; only the ones we added are dropped.
    kwargs = build_request(create, model, prompt, message_type, sampling_args, oai_tools, token_data=False)
    try:
        return await _invoke(create, kwargs, executor)
    except Exception as err:
        raise translate_error(err, url) from err


# -- reading a response ------------------------------------------------------


def _first_choice(response: Any) -> Any:
    choices = getattr(response, "choices", None)
    if not choices:
        raise ServerError("the model server returned a response with no choices")
    return choices[0]


def _extra(obj: Any, name: str) -> Any:
    """A field the SDK does not declare (vLLM's token ids): attribute or ``model_extra``."""
    if obj is None:
        return None
    value = getattr(obj, name, None)
    if value is None:
        value = (getattr(obj, "model_extra", None) or {}).get(name)
    return value


def _ids_from_tokens(tokens: list[Any]) -> list[int]:
    """Token ids from ``"token_id:N"`` strings (vLLM's return_tokens_as_token_ids); [] if not all parse."""
    ids = []
    for tok in tokens:
        if not isinstance(tok, str) or not tok.startswith("token_id:"):
            return []
        try:
            ids.append(int(tok[len("token_id:") :]))
        except ValueError:
            return []
    return ids


def finish_reason(response: Any) -> str | None:
    return getattr(_first_choice(response), "finish_reason", None)


def extract_turn_tokens(response: Any, message_type: MessageType) -> TurnTokens:
    """The server's token data for one call; empty lists where it gave none."""
    choice = _first_choice(response)
    logprobs = getattr(choice, "logprobs", None)
    if message_type == "chat":
        prompt_ids = _extra(response, "prompt_token_ids")
        entries = list(getattr(logprobs, "content", None) or []) if logprobs is not None else []
        lps = [float(getattr(e, "logprob", 0.0)) for e in entries]
        tokens = [getattr(e, "token", None) for e in entries]
    else:
        prompt_ids = _extra(choice, "prompt_token_ids")
        lps = [float(x) if x is not None else 0.0 for x in (getattr(logprobs, "token_logprobs", None) or [])]
        tokens = list(getattr(logprobs, "tokens", None) or [])
    completion_ids = _extra(choice, "token_ids")
    if completion_ids is None:
        completion_ids = _ids_from_tokens(tokens)
    completion_ids = [int(t) for t in completion_ids or []]
    if lps and len(lps) != len(completion_ids):
        warn_once(
            logger,
            "logprob-length-mismatch",
            "the server returned %d logprobs for %d sampled tokens; dropping the logprobs",
            len(lps),
            len(completion_ids),
        )
        lps = []
    return TurnTokens(
        prompt_ids=[int(t) for t in prompt_ids or []],
        completion_ids=completion_ids,
        completion_logprobs=lps,
        finish_reason=getattr(choice, "finish_reason", None),
    )


def _tool_call_dict(tc: Any) -> dict[str, Any]:
    if isinstance(tc, dict):
        return tc
    fn = getattr(tc, "function", None)
    return {
        "id": getattr(tc, "id", None),
        "type": getattr(tc, "type", None) or "function",
        "function": {"name": getattr(fn, "name", None), "arguments": getattr(fn, "arguments", None) or ""},
    }


def response_message(response: Any, message_type: MessageType) -> ChatMessage | str:
    """The assistant's turn: a message dict (with ``tool_calls`` as dicts) for chat, text for completion."""
    choice = _first_choice(response)
    if message_type == "completion":
        return getattr(choice, "text", None) or ""
    msg = getattr(choice, "message", None)
    # An AssistantMessage: a plain-dict message that 0.1.12 code can also read as m.content,
    # m.tool_calls[i].name.
    out: ChatMessage = AssistantMessage(content=getattr(msg, "content", None) or "")
    tool_calls = getattr(msg, "tool_calls", None)
    if tool_calls:
        out["tool_calls"] = [ToolCall(_tool_call_dict(tc)) for tc in tool_calls]
    return out
