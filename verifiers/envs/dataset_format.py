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
from collections.abc import Callable
from typing import Any

from verifiers.errors import ConfigError, DatasetFormatError
from verifiers.types import ChatMessage, GenerateInputs, Info, Messages, MessageType


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


def _check_prompts(prompts: list[Any], expected: type, message: str, hint: str) -> None:
    """``DatasetFormatError`` naming the first prompt that is not an ``expected`` (``message``
    is formatted with its ``row`` and ``kind``)."""
    bad = next((i for i, p in enumerate(prompts) if not isinstance(p, expected)), None)
    if bad is not None:
        raise DatasetFormatError(message.format(row=bad, kind=type(prompts[bad]).__name__), hint=hint)


def format_dataset(
    dataset: Any,
    system_prompt: str | None = None,
    few_shot: list[ChatMessage] | None = None,
    message_type: MessageType = "chat",
    name: str = "dataset",
    question_key: str = "question",
    answer_key: str = "answer",
):
    """Return ``dataset`` with ``prompt``, ``answer``, ``info``, ``task`` and ``id`` columns.

    Prompts come from the ``question_key`` column unless there is a ``prompt``
    column; with ``answer_key`` other than ``"answer"``, that column's values
    become ``answer`` (0.1.4, which did this only when it built prompts).
    Raises :class:`DatasetFormatError` if there is neither a ``prompt`` nor a
    question column, or a column holds the wrong kind of value.
    """
    dataset = to_dataset(dataset, name)
    columns = list(dataset.column_names)
    if answer_key != "answer" and "prompt" not in columns and answer_key in columns:
        dataset = _replace_column(dataset, "answer", list(dataset[answer_key]))
        columns = list(dataset.column_names)
    if "prompt" in columns:
        prompts = list(dataset["prompt"])
        if message_type == "completion":
            _check_prompts(
                prompts,
                str,
                f"{name} row {{row}}: message_type='completion' needs string prompts, "
                "but column 'prompt' holds {kind}",
                "use message_type='chat', or give a 'prompt' column of strings",
            )
        elif any(isinstance(p, str) for p in prompts):
            # A chat env given plain-string prompts: treat them like questions.
            fixed = [build_prompt(p, system_prompt, few_shot) if isinstance(p, str) else p for p in prompts]
            dataset = _replace_column(dataset, "prompt", fixed)
        else:
            _check_prompts(
                prompts,
                list,
                f"{name} row {{row}}: column 'prompt' must hold lists of chat messages, got {{kind}}",
                "give a list of {'role', 'content'} dicts per row, or a 'question' column",
            )
    elif question_key in columns:
        prompts = [build_prompt(q, system_prompt, few_shot, message_type) for q in dataset[question_key]]
        dataset = dataset.add_column("prompt", prompts)
    else:
        raise DatasetFormatError(
            f"{name} has neither a 'prompt' nor a {question_key!r} column "
            f"(columns: {', '.join(columns) or 'none'})",
            hint=f"add a {question_key!r} column, or a 'prompt' column of chat messages",
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


def inputs_to_rows(
    inputs: Any,
    format_dataset_fn: Callable[[Any, str], Any],
    format_prompt_fn: Callable[[str], Messages],
) -> list[dict]:
    """Rows of ``prompt/answer/task/info`` from a Dataset, a dict of lists, a list of dicts or
    ``GenerateInputs`` (the inputs of ``Environment.a_generate``).

    ``format_dataset_fn`` / ``format_prompt_fn`` are the environment's own (a
    dataset without prompts, or a ``question`` column, is formatted as the env does).
    """
    if isinstance(inputs, GenerateInputs):
        if inputs.completion is not None:
            # Ignoring them would silently generate new completions instead.
            raise ConfigError(
                "GenerateInputs.completion is set, but a_generate always generates the completions",
                hint="leave completion=None, or score existing completions with env.rubric.score_rollouts(...)",
            )
        inputs = {k: v for k, v in vars(inputs).items() if k != "completion" and v is not None}
    if isinstance(inputs, list):
        if not inputs:
            return []
        inputs = {k: [r.get(k) for r in inputs] for k in inputs[0]}
    if not isinstance(inputs, dict):
        dataset = to_dataset(inputs, "inputs")
        if "prompt" not in dataset.column_names:
            dataset = format_dataset_fn(dataset, "inputs")
        inputs = dataset.to_dict()
    if "prompt" not in inputs:
        if "question" not in inputs:
            raise DatasetFormatError(
                f"inputs have neither a 'prompt' nor a 'question' column (columns: {', '.join(inputs)})",
                hint="pass a dataset from env.get_dataset() or a dict with a 'prompt' list",
            )
        inputs = {**inputs, "prompt": [format_prompt_fn(q) for q in inputs["question"]]}
    n = len(inputs["prompt"])
    for key, values in inputs.items():
        if values is not None and len(values) != n:
            raise DatasetFormatError(f"inputs column '{key}' has {len(values)} values but 'prompt' has {n}")

    def col(name: str, default: Any) -> list[Any]:
        values = inputs.get(name)
        return list(values) if values is not None else [default] * n

    answers, tasks, infos = col("answer", ""), col("task", "default"), col("info", None)
    rows = [
        {
            "prompt": clean_prompt(p),
            "answer": "" if a is None else a,
            "task": t or "default",
            "info": parse_info(i),
        }
        for p, a, t, i in zip(inputs["prompt"], answers, tasks, infos, strict=True)
    ]
    if inputs.get("example_id") is not None:  # given (0.1.6+): each rollout's state carries it
        for row, example_id in zip(rows, inputs["example_id"], strict=True):
            row["example_id"] = example_id
    return rows
