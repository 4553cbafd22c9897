"""0.1.8+'s helpers that read one model response (``verifiers.utils.response_utils``).

Here a response is the OpenAI client's ``ChatCompletion`` / ``Completion`` (upstream 0.1.12
wraps it in its own ``vf.Response``); both helpers read it with the code the rollouts use
(``verifiers.envs.model_client``), so they give what a rollout records.
"""

from __future__ import annotations

from typing import Any

from verifiers.envs.model_client import extract_turn_tokens, response_message
from verifiers.types import Messages


def _message_type(response: Any) -> str:
    choices = getattr(response, "choices", None) or [None]
    return "chat" if getattr(choices[0], "message", None) is not None else "completion"


async def parse_response_message(response: Any) -> Messages:
    """The assistant's turn of ``response``: ``[message]`` for chat, its text for the completion API."""
    kind = _message_type(response)
    message = response_message(response, kind)
    return message if kind == "completion" else [message]


async def parse_response_tokens(response: Any, max_seq_len: int | None = None) -> dict[str, Any] | None:
    """The token data of ``response`` (``None`` when the server sent none), cut to ``max_seq_len``.

    Keys as upstream's: ``prompt_ids``, ``prompt_mask``, ``completion_ids``, ``completion_mask``,
    ``completion_logprobs``, ``overlong_prompt``, ``is_truncated``. A prompt longer than
    ``max_seq_len`` keeps its first ``max_seq_len`` ids and an empty completion (as upstream).
    """
    if response is None:
        return None
    tokens = extract_turn_tokens(response, _message_type(response))
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
