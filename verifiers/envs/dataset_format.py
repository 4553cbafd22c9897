"""Dataset formatting for environments: the columns every rollout needs.

A dataset row becomes a rollout input with ``prompt`` (chat messages, or a
string for ``message_type="completion"``), ``answer`` (str, default ""),
``info`` (dict, or a JSON string of one; default {}), ``task`` (default
"default") and ``id``. A ``question`` column is turned into a prompt as
``[system?] + few_shot + [user: question]``.

``datasets`` is imported inside functions so ``import verifiers`` stays fast.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from verifiers.errors import ConfigError, DatasetFormatError
from verifiers.types import ChatMessage, Info, Messages, MessageType


def clean_message(message: Any) -> ChatMessage:
    """A copy of ``message`` without ``None``-valued keys (``content`` is kept).

    Arrow stores a column of messages as one struct type, so a row's messages
    come back with every key any row had (``tool_calls: None`` on a user
    message); servers and chat templates should not see those.
    """
    if not isinstance(message, dict):
        raise DatasetFormatError(
            f"a chat message must be a dict with 'role' and 'content', got {type(message).__name__}",
            hint="use a 'question' column of strings, or a 'prompt' column of lists of message dicts",
        )
    return {k: copy.deepcopy(v) for k, v in message.items() if v is not None or k == "content"}


def clean_prompt(prompt: Messages) -> Messages:
    """A deep copy of ``prompt`` safe to send and to mutate (see :func:`clean_message`)."""
    if isinstance(prompt, str):
        return prompt
    return [clean_message(m) for m in prompt]


def parse_info(info: Any) -> Info:
    """``info`` as a dict: ``None`` -> {}, a JSON string -> its object, a dict -> a shallow copy."""
    if info is None or info == "":
        return {}
    if isinstance(info, str):
        try:
            value = json.loads(info)
        except json.JSONDecodeError as e:
            raise DatasetFormatError(
                f"'info' is a string but not valid JSON ({e.msg})", hint="store a dict, or json.dumps(dict)"
            ) from None
        if not isinstance(value, dict):
            raise DatasetFormatError(
                f"'info' must be a JSON object, got {type(value).__name__}",
                hint="store a dict, or json.dumps(dict)",
            )
        return value
    if isinstance(info, dict):
        return dict(info)
    raise DatasetFormatError(f"'info' must be a dict or a JSON string, got {type(info).__name__}")


def build_prompt(
    question: str,
    system_prompt: str | None = None,
    few_shot: list[ChatMessage] | None = None,
    message_type: MessageType = "chat",
) -> Messages:
    """The prompt for a question: chat messages, or one string for the completion API.

    For ``completion`` the system prompt, the few-shot messages' contents and
    the question are joined by blank lines.
    """
    if message_type == "completion":
        parts = [system_prompt] if system_prompt else []
        parts += [str(m.get("content", "")) for m in few_shot or []]
        parts.append(str(question))
        return "\n\n".join(parts)
    messages: list[ChatMessage] = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages += [clean_message(m) for m in few_shot or []]
    messages.append({"role": "user", "content": str(question)})
    return messages


def to_dataset(data: Any, name: str = "dataset"):
    """Accept a ``datasets.Dataset``, a list of row dicts, or a dict of columns."""
    from datasets import Dataset

    if isinstance(data, Dataset):
        return data
    if isinstance(data, dict):
        return Dataset.from_dict(data)
    if isinstance(data, list):
        return Dataset.from_list(data)
    if hasattr(data, "column_names") and hasattr(data, "select"):
        return data  # a Dataset-like object (e.g. from another datasets version)
    raise ConfigError(
        f"{name} must be a datasets.Dataset, got {type(data).__name__}",
        hint="wrap your rows with datasets.Dataset.from_list(rows)",
    )


def _replace_column(dataset, name: str, values: list[Any]):
    if name in dataset.column_names:
        dataset = dataset.remove_columns(name)
    return dataset.add_column(name, values)


def format_dataset(
    dataset: Any,
    system_prompt: str | None = None,
    few_shot: list[ChatMessage] | None = None,
    message_type: MessageType = "chat",
    name: str = "dataset",
):
    """Return ``dataset`` with ``prompt``, ``answer``, ``info``, ``task`` and ``id`` columns.

    Raises :class:`DatasetFormatError` if there is neither a ``prompt`` nor a
    ``question`` column, or a column holds the wrong kind of value.
    """
    dataset = to_dataset(dataset, name)
    columns = list(dataset.column_names)
    if "prompt" in columns:
        prompts = list(dataset["prompt"])
        if message_type == "completion":
            bad = next((i for i, p in enumerate(prompts) if not isinstance(p, str)), None)
            if bad is not None:
                raise DatasetFormatError(
                    f"{name} row {bad}: message_type='completion' needs string prompts, "
                    f"but column 'prompt' holds {type(prompts[bad]).__name__}",
                    hint="use message_type='chat', or give a 'prompt' column of strings",
                )
        elif any(isinstance(p, str) for p in prompts):
            # A chat env given plain-string prompts: treat them like questions.
            fixed = [build_prompt(p, system_prompt, few_shot) if isinstance(p, str) else p for p in prompts]
            dataset = _replace_column(dataset, "prompt", fixed)
        else:
            bad = next((i for i, p in enumerate(prompts) if not isinstance(p, list)), None)
            if bad is not None:
                raise DatasetFormatError(
                    f"{name} row {bad}: column 'prompt' must hold lists of chat messages, "
                    f"got {type(prompts[bad]).__name__}",
                    hint="give a list of {'role', 'content'} dicts per row, or a 'question' column",
                )
    elif "question" in columns:
        prompts = [build_prompt(q, system_prompt, few_shot, message_type) for q in dataset["question"]]
        dataset = dataset.add_column("prompt", prompts)
    else:
        raise DatasetFormatError(
            f"{name} has neither a 'prompt' nor a 'question' column (columns: {', '.join(columns) or 'none'})",
            hint="add a 'question' column, or a 'prompt' column of chat messages",
        )
    n = len(dataset)
    if "answer" not in columns:
        dataset = dataset.add_column("answer", [""] * n)
    if "info" in columns:
        for i, info in enumerate(dataset["info"]):
            try:
                parse_info(info)
            except DatasetFormatError as e:
                raise DatasetFormatError(f"{name} row {i}: {e.message}", hint=e.hint) from None
    else:
        dataset = dataset.add_column("info", [{}] * n)
    if "task" not in columns:
        dataset = dataset.add_column("task", ["default"] * n)
    if "id" not in columns:
        dataset = dataset.add_column("id", list(range(n)))
    return dataset
