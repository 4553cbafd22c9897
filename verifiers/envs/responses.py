"""0.1.8+'s helpers that read one model response (0.1.x's ``verifiers.utils.response_utils``, an old path).

Here a response is the OpenAI client's ``ChatCompletion`` / ``Completion`` (upstream 0.1.12
wraps it in its own ``vf.Response``); both helpers read it with the code the rollouts use
(``verifiers.envs.model_client``), so they give what a rollout records.
"""

from __future__ import annotations

from typing import Any

from verifiers.envs.model_client import extract_turn_tokens, response_message
from verifiers.types import Messages, MessageType


def _message_type(response: Any) -> str:
    choices = getattr(response, "choices", None) or [None]
    return "chat" if getattr(choices[0], "message", None) is not None else "completion"


async def parse_response_message(response: Any) -> Messages:
    """The assistant's turn of ``response``: ``[message]`` for chat, its text for the completion API."""
    kind = _message_type(response)
    message = response_message(response, kind)
    return message if kind == "completion" else [message]


async def parse_response_messages(response: Any, message_type: MessageType) -> Messages:
    """0.1.8-0.1.10's form of :func:`parse_response_message`: the assistant's turn of
    ``response`` read as ``message_type`` (``[message]`` for chat, the text for completion)."""
    message = response_message(response, message_type)
    return message if message_type == "completion" else [message]


async def parse_is_truncated(response: Any, message_type: MessageType | None = None) -> bool:
    """Whether the model stopped at its token limit (``finish_reason == "length"``; 0.1.9-0.1.10)."""
    choices = getattr(response, "choices", None) or [None]
    return getattr(choices[0], "finish_reason", None) == "length"


async def parse_response_tokens(
    response: Any, max_seq_len: int | None = None, message_type: MessageType | None = None
) -> dict[str, Any] | None:
    """The token data of ``response`` (``None`` when the server sent none), cut to ``max_seq_len``.

    Keys as upstream's: ``prompt_ids``, ``prompt_mask``, ``completion_ids``, ``completion_mask``,
    ``completion_logprobs``, ``overlong_prompt``, ``is_truncated``. A prompt longer than
    ``max_seq_len`` keeps its first ``max_seq_len`` ids and an empty completion (as upstream).
    ``message_type`` (``"chat"`` / ``"completion"``) says how to read it; by default it is
    told from the response. 0.1.8-0.1.10's order, ``(response, message_type, max_seq_len)``,
    is taken too.
    """
    if isinstance(max_seq_len, str):  # 0.1.8-0.1.10: (response, message_type[, max_seq_len])
        max_seq_len, message_type = message_type, max_seq_len  # type: ignore[assignment]
    if response is None:
        return None
    tokens = extract_turn_tokens(response, message_type or _message_type(response))
    if not tokens.prompt_ids and not tokens.completion_ids:
        return None
    prompt, completion, logprobs = tokens.prompt_ids, tokens.completion_ids, tokens.completion_logprobs
    overlong = is_truncated = False
    if max_seq_len is not None:
        if len(prompt) > max_seq_len:
            overlong = is_truncated = True
            prompt, completion, logprobs = prompt[:max_seq_len], [], []
        elif len(prompt) + len(completion) > max_seq_len:
            is_truncated = True
            keep = max_seq_len - len(prompt)
            completion, logprobs = completion[:keep], logprobs[:keep]
    return {
        "prompt_ids": list(prompt),
        "prompt_mask": [0] * len(prompt),
        "completion_ids": list(completion),
        "completion_mask": [1] * len(completion),
        "completion_logprobs": list(logprobs),
        "overlong_prompt": overlong,
        "is_truncated": is_truncated,
    }


async def _parse_response_tokens_01x(
    response: Any, message_type: MessageType, max_seq_len: int | None = None
) -> dict[str, Any] | None:
    """0.1.8-0.1.10's signature of :func:`parse_response_tokens` (which takes that order itself)."""
    return await parse_response_tokens(response, max_seq_len, message_type)


# verifiers.compat.forms.forms_of reads it: the release walk accepts 0.1.8-0.1.10's signature too.
parse_response_tokens.__vf_forms__ = (_parse_response_tokens_01x,)  # type: ignore[attr-defined]
