"""Example datasets and answer extraction helpers.

``load_example_dataset`` knows 0.1.4's fifteen names (with its hub paths,
default splits and ``question`` / ``answer`` columns) plus the datasets bundled
under ``verifiers/data/``, which load offline. A hub name loads through
``datasets.load_dataset``, which reads the local Hugging Face cache and, unless
``HF_DATASETS_OFFLINE=1``, the network; when neither has it, it fails with one
``ConfigError`` line that says it needs the hub. ``datasets`` is imported only
when a dataset is loaded, so ``import verifiers`` stays light.

The extraction helpers behave as 0.1.4's (tests/parity compares them), since
rewards are computed from what they return.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from verifiers.errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from datasets import Dataset

_BOXED = "\\boxed{"

BOXED_SYSTEM_PROMPT = "Please reason step by step, and put your final answer within \\boxed{}."
"""System prompt asking for the final answer in ``\\boxed{}`` (0.1.x's wording)."""
# 0.1.4's text exactly, including the run of spaces its source's line continuation
# put after "tags." (the prompt a model was tuned with stays the same).
THINK_BOXED_SYSTEM_PROMPT = (
    "Think step-by-step inside <think>...</think> tags.     Then, give your final answer inside \\boxed{}."
)
"""System prompt asking for reasoning in ``<think>`` tags, then a ``\\boxed{}`` answer (0.1.4's wording)."""


def extract_boxed_answer(text: str, strict: bool = False) -> str:
    """Return the content of the last ``\\boxed{...}`` in ``text`` (nested braces allowed).

    If it has no ``\\boxed{`` or its last one never closes (a truncated
    completion), ``text`` is returned unchanged, as in 0.1.4 (so a bare final
    answer still compares equal); with ``strict=True`` (0.1.12+), ``""`` instead,
    for rewards where the format counts.
    """
    start = text.rfind(_BOXED)
    content = None if start == -1 else _balanced(text, start + len(_BOXED))
    if content is None:
        return "" if strict else text
    return content


def _balanced(text: str, begin: int) -> str | None:
    """Text from ``begin`` up to the brace that closes the one just before it, or None."""
    depth = 1
    for i in range(begin, len(text)):
        char = text[i]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[begin:i]
    return None


def extract_hash_answer(text: str) -> str:
    """Return the GSM8K final answer after ``####`` (``"... #### 42"`` -> ``"42"``); ``text`` itself
    when it has none (0.1.4)."""
    if "####" not in text:
        return text
    return text.split("####")[1].strip()


def strip_non_numeric(text: str) -> str:
    """Keep only the digits and dots of ``text`` (``"$1,234.5"`` -> ``"1234.5"``)."""
    return "".join(c for c in text if c.isdigit() or c == ".")


@dataclass(frozen=True)
class _HubDataset:
    """A hub dataset known by a short name, and how 0.1.4 turned it into question/answer rows."""

    path: str
    config: str | None
    default_split: str
    to_row: Callable[[dict[str, Any]], dict[str, Any]]
    keep: Callable[[dict[str, Any]], bool] | None = None
    extra_configs: tuple[str, ...] = ()  # more configs whose rows are appended (aime2025's two parts)


def _row(
    question: str, answer: Callable[[dict[str, Any]], Any]
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    return lambda x: {"question": x[question], "answer": answer(x)}


def _choices(letters: str, options_key: str, answer: Callable[[dict[str, Any]], str]):
    def to_row(x: dict[str, Any]) -> dict[str, Any]:
        question = f"Question: {x['question']}\n"
        for letter, option in zip(letters, x[options_key], strict=False):
            question += f"\n{letter}: {option}"
        return {"question": question, "answer": answer(x)}

    return to_row


def _gpqa_row(x: dict[str, Any]) -> dict[str, Any]:
    # 0.1.4 shuffled the letters with the global `random` state (unseeded), so
    # the correct letter of a row was not reproducible there either.
    import random

    letters = ["A", "B", "C", "D"]
    random.shuffle(letters)
    texts = [x["Correct Answer"], x["Incorrect Answer 1"], x["Incorrect Answer 2"], x["Incorrect Answer 3"]]
    by_letter = dict(zip(letters, texts, strict=True))
    question = f"Question: {x['Question']}\n\n" + "\n".join(f"{k}: {by_letter[k]}" for k in "ABCD")
    return {"question": question, "answer": letters[0]}


def _openbookqa_row(x: dict[str, Any]) -> dict[str, Any]:
    choices = "\n".join(
        f"{label}. {text}" for label, text in zip(x["choices"]["label"], x["choices"]["text"], strict=False)
    )
    return {"question": f"Question: {x['question_stem']}\n\nChoices:\n{choices}", "answer": x["answerKey"]}


_PYTHON_PROBLEM = "Solve the following coding problem using the programming language python:"

HUB_DATASETS: dict[str, _HubDataset] = {
    # 0.1.4's names, hub paths, default splits (used when split=None) and columns.
    "aime2024": _HubDataset(
        "HuggingFaceH4/aime_2024", None, "train", _row("problem", lambda x: str(int(x["answer"])))
    ),
    "aime2025": _HubDataset(
        "opencompass/AIME2025",
        "AIME2025-I",
        "test",
        _row("question", lambda x: strip_non_numeric(x["answer"])),
        extra_configs=("AIME2025-II",),
    ),
    "amc2023": _HubDataset("knoveleng/AMC-23", None, "train", _row("problem", lambda x: x["answer"])),
    "gpqa_diamond": _HubDataset("Idavidrein/gpqa", "gpqa_diamond", "train", _gpqa_row),
    "gpqa_main": _HubDataset("Idavidrein/gpqa", "gpqa_main", "train", _gpqa_row),
    "gsm8k": _HubDataset(
        "openai/gsm8k", "main", "test", _row("question", lambda x: extract_hash_answer(x["answer"]))
    ),
    "math": _HubDataset(
        "chiayewken/competition_math",
        None,
        "train",
        _row("problem", lambda x: extract_boxed_answer(x["solution"])),
    ),
    "math500": _HubDataset("HuggingFaceH4/MATH-500", None, "test", _row("problem", lambda x: x["answer"])),
    "mmlu": _HubDataset(
        "cais/mmlu", "all", "dev", _choices("ABCD", "choices", lambda x: "ABCD"[x["answer"]])
    ),
    "mmlu_pro": _HubDataset(
        "TIGER-Lab/MMLU-Pro", None, "validation", _choices("ABCDEFGHIJ", "options", lambda x: x["answer"])
    ),
    "openbookqa": _HubDataset("allenai/openbookqa", "main", "train", _openbookqa_row),
    "openrs": _HubDataset("knoveleng/open-rs", None, "train", _row("problem", lambda x: x["answer"])),
    "openrs_easy": _HubDataset(
        "knoveleng/open-rs",
        None,
        "train",
        _row("problem", lambda x: x["answer"]),
        keep=lambda x: x["level"] == "Easy",
    ),
    "openrs_hard": _HubDataset(
        "knoveleng/open-rs",
        None,
        "train",
        _row("problem", lambda x: x["answer"]),
        keep=lambda x: x["level"] == "Hard",
    ),
    "prime_code": _HubDataset(
        "PrimeIntellect/verifiable-coding-problems",
        None,
        "train",
        _row("prompt", lambda x: x["verification_info"]),
        keep=lambda x: x["prompt"].startswith(_PYTHON_PROBLEM),
    ),
}
"""Short name -> hub dataset (0.1.4's fifteen; needs the hub or a cached copy)."""

BUNDLED_DATASETS: dict[str, str] = {"reverse_text": "verifiers.data.reverse_text"}
"""Short name -> module under ``verifiers/data/`` (works offline)."""


def load_example_dataset(
    name: str = "gsm8k", split: str | None = None, n: int | None = None, seed: int | None = 0
) -> Dataset:
    """Load an example dataset as a ``datasets.Dataset`` with ``question`` and ``answer`` columns.

    Args:
        name: (default ``gsm8k``, as 0.1.x) one of 0.1.4's hub datasets (``aime2024``, ``aime2025``,
            ``amc2023``, ``gpqa_diamond``, ``gpqa_main``, ``gsm8k``, ``math``,
            ``math500``, ``mmlu``, ``mmlu_pro``, ``openbookqa``, ``openrs``,
            ``openrs_easy``, ``openrs_hard``, ``prime_code``; they need the hub or
            its local cache) or a bundled one (``reverse_text``; offline).
        split: the split to load; ``None`` picks 0.1.4's default for the name
            (``gsm8k``, ``math500``, ``aime2025``: test; ``mmlu``: dev;
            ``mmlu_pro``: validation; the others and ``reverse_text``: train).
        n: keep ``n`` rows, a random sample drawn with ``seed`` so that a small
            ``n`` is still representative; ``None`` or ``-1`` keeps every row
            in stored order.
        seed: seed of that sample; ``None`` keeps the first ``n`` rows instead.

    Raises:
        ConfigError: unknown name or split, or a hub dataset that cannot be
            loaded here (one line, saying it needs the hub).
    """
    key = name.strip().lower().replace("-", "_")
    if key in BUNDLED_DATASETS:
        return _take(_load_bundled(key, split or "train"), n, seed)
    if key in HUB_DATASETS:
        spec = HUB_DATASETS[key]
        # Sample before mapping, as 0.1.4 did, so the same n and seed pick the same rows.
        return _load_hub(key, split or spec.default_split, n, seed)
    raise ConfigError(
        f"unknown example dataset '{name}'",
        hint=f"use one of: {', '.join(BUNDLED_DATASETS)} (offline), {', '.join(HUB_DATASETS)} (hub)",
    )


def get_preprocess_fn(name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The function that turns one raw row of hub dataset ``name`` into its ``question`` /
    ``answer`` row (what :func:`load_example_dataset` maps over it; 0.1.x).

    As 0.1.x's, ``mmlu``'s writes its answer letter to ``temp_answer`` (which
    ``load_example_dataset`` renamed to ``answer`` once the raw integer ``answer`` column
    was gone), and the ``openrs_easy`` / ``openrs_hard`` level filters are not part of it.
    """
    key = name.strip().lower().replace("-", "_")
    if key not in HUB_DATASETS:
        raise ConfigError(
            f"dataset '{name}' has no preprocess function", hint=f"use one of: {', '.join(HUB_DATASETS)}"
        )
    to_row = HUB_DATASETS[key].to_row
    if key != "mmlu":
        return to_row

    def preprocess_mmlu(x: dict[str, Any]) -> dict[str, Any]:
        row = to_row(x)
        return {"question": row["question"], "temp_answer": row["answer"]}

    return preprocess_mmlu


def format_dataset(
    dataset: Dataset,
    system_prompt: str | None = None,
    few_shot: list[dict[str, Any]] | None = None,
    question_key: str = "question",
    answer_key: str = "answer",
    map_kwargs: dict[str, Any] | None = None,
) -> Dataset:
    """``dataset`` with an ``example_id`` and a ``prompt`` column when it has none (0.1.8+).

    ``example_id`` numbers the rows (an ``example_id`` column that is not integers is
    renamed ``src_id`` first). ``prompt`` is ``[system?] + few_shot + [user: question]``
    from the ``question_key`` column, and with ``answer_key`` other than ``"answer"`` that
    column is copied to ``answer`` too. ``map_kwargs`` go to ``dataset.map``. An
    environment formats its own dataset (``Environment.format_dataset``); this is the
    standalone 0.1.x helper.
    """
    if "example_id" in dataset.column_names and not isinstance(dataset["example_id"][0], int):
        dataset = dataset.rename_column("example_id", "src_id")
    if "example_id" not in dataset.column_names:
        dataset = dataset.add_column("example_id", list(range(len(dataset))))
    if "prompt" in dataset.column_names:
        return dataset
    head = [{"role": "system", "content": system_prompt}] if system_prompt else []
    head += list(few_shot or [])

    def add_prompt(x: dict[str, Any]) -> dict[str, Any]:
        row = {"prompt": [*head, {"role": "user", "content": x[question_key]}]}
        if answer_key != "answer":
            row["answer"] = x[answer_key]
        return row

    return dataset.map(add_prompt, **(map_kwargs or {}))


def _load_bundled(key: str, split: str) -> Dataset:
    module = importlib.import_module(BUNDLED_DATASETS[key])
    if split not in module.SPLITS:
        raise ConfigError(
            f"dataset '{key}' has no split '{split}'",
            hint=f"use one of: {', '.join(module.SPLITS)}",
        )
    from datasets import Dataset

    return Dataset.from_list(module.rows(split))


def _load_hub(key: str, split: str, n: int | None, seed: int | None) -> Dataset:
    import os

    import datasets

    spec = HUB_DATASETS[key]
    try:
        parts = [datasets.load_dataset(spec.path, spec.config, split=split)]
        parts += [datasets.load_dataset(spec.path, extra, split=split) for extra in spec.extra_configs]
    except Exception as err:  # no network, offline mode, no cache, unknown split, auth
        reason = " ".join(str(err).split())[:160] or type(err).__name__
        offline = os.environ.get("HF_DATASETS_OFFLINE", "").lower() in ("1", "true", "yes", "on")
        raise ConfigError(
            f"example dataset '{key}' ({spec.path}, split '{split}') needs the Hugging Face hub"
            f"{' and HF_DATASETS_OFFLINE is set' if offline else ''}: {reason}",
            hint=f"run once online to cache it, or use a bundled offline dataset: {', '.join(BUNDLED_DATASETS)}",
        ) from None
    raw = datasets.concatenate_datasets(parts) if len(parts) > 1 else parts[0]
    if spec.keep is not None:
        raw = raw.filter(spec.keep)
    raw = _take(raw, n, seed)
    return raw.map(spec.to_row, remove_columns=raw.column_names).select_columns(["question", "answer"])


def _take(dataset: Dataset, n: int | None, seed: int | None) -> Dataset:
    if n is None or n < 0 or n >= len(dataset):
        return dataset
    if seed is not None:
        dataset = dataset.shuffle(seed=seed)
    return dataset.select(range(n))
