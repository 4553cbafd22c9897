"""What ``Environment.a_generate`` returns, built from finished rollouts.

- :func:`collect_outputs`: scored rollouts -> one ``GenerateOutputs`` (every
  result reports the same metric names; a failed rollout adds ``ERROR_METRIC``).
- :func:`raise_if_unreachable`: the one case a batch of rollouts raises instead
  of returning values: none of them reached the model server.
- :func:`results_dataset`: ``GenerateOutputs`` -> a ``datasets.Dataset``.
- :func:`pass_at_k`, :func:`pass_at_k_summary`: upstream's (0.1.10+) pass@k and
  pass^k over the rollouts of each example, reported by ``vf-eval``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from verifiers.envs.model_client import client_url
from verifiers.errors import ConfigError, ServerUnreachableError
from verifiers.failures import FailureKind, failure_of
from verifiers.types import GenerateOutputs, Messages, RolloutScore, State

ERROR_METRIC = "rollout_errors"
"""Per rollout: 1.0 if it failed (``state["failure"]`` set), else 0.0. Summed over a batch it is the
trainer's metric of the same name; present once any rollout of a call failed."""


def collect_outputs(results: list[tuple[Messages, State, RolloutScore]], names: list[str]) -> GenerateOutputs:
    """One ``GenerateOutputs`` from ``(completion, state, score)`` per rollout, in order.

    ``names`` are the metrics every result reports (0.0 where a score lacks one);
    metrics some scores add are appended after them.
    """
    states = [r[1] for r in results]
    scores = [r[2] for r in results]
    all_names = list(names)
    for score in scores:
        all_names += [k for k in score.metrics if k not in all_names]
    metrics = {name: [float(s.metrics.get(name, 0.0)) for s in scores] for name in all_names}
    errors = [1.0 if failure_of(s) is not None else 0.0 for s in states]
    if any(errors) and ERROR_METRIC not in metrics:
        metrics[ERROR_METRIC] = errors
    return GenerateOutputs(
        prompt=[s["prompt"] for s in states],
        completion=[r[0] for r in results],
        answer=[s["answer"] for s in states],
        state=states,
        info=[s["info"] for s in states],
        task=[s["task"] for s in states],
        reward=[float(s.reward) for s in scores],
        metrics=metrics,
    )


def raise_if_unreachable(states: list[State], client: Any) -> None:
    """``ServerUnreachableError`` (naming the URL) if every rollout failed to reach the server:
    all-zero rewards would hide a dead server."""
    kinds = [getattr(failure_of(s), "kind", None) for s in states]
    if states and all(kind is FailureKind.SERVER_UNREACHABLE for kind in kinds):
        raise ServerUnreachableError(
            f"could not connect to the model server for any of {len(states)} rollouts",
            hint="start the server (vf-vllm / vllm serve) or fix the client's base_url",
            url=client_url(client) or None,
        )


def results_dataset(
    results: GenerateOutputs,
    push_to_hub: bool = False,
    hub_name: str | None = None,
    state_columns: list[str] | None = None,
) -> Any:
    """A ``datasets.Dataset`` of the results: prompt, completion, answer, task, info (JSON), reward,
    metrics, and the ``state_columns`` asked for; pushed to the Hub as ``hub_name`` if asked."""
    from datasets import Dataset

    if push_to_hub and not hub_name:
        raise ConfigError("push_to_hub=True needs a hub_name", hint="pass hub_name='user/dataset'")
    columns: dict[str, list[Any]] = {
        "prompt": list(results.prompt),
        "completion": list(results.completion),
        "answer": list(results.answer),
        "task": list(results.task),
        # JSON, because Arrow cannot hold dicts whose keys or value types differ by row.
        "info": [json.dumps(i, default=str) for i in results.info],
        "reward": list(results.reward),
    }
    for name, values in results.metrics.items():
        if name not in columns:
            columns[name] = list(values)
    for name in state_columns or []:
        columns[name] = [s.get(name) for s in results.state]
    dataset = Dataset.from_dict(columns)
    if push_to_hub:
        dataset.push_to_hub(hub_name)
    return dataset


PASS_THRESHOLD = 0.5
"""A rollout counts as correct for pass@k when its reward is at least this (upstream's default)."""


def pass_at_k(n: int, c: int, k: int) -> tuple[float, float]:
    """``(pass@k, pass^k)`` of one example with ``n`` rollouts of which ``c`` are correct.

    Unbiased estimators over the ``C(n, k)`` ways to pick ``k`` of the ``n`` rollouts:
    pass@k = 1 - C(n-c, k) / C(n, k) (at least one of the k is correct) and
    pass^k = C(c, k) / C(n, k) (all k are correct). Needs ``1 <= k <= n`` and ``0 <= c <= n``.
    """
    if not (1 <= k <= n and 0 <= c <= n):
        raise ConfigError(f"pass@k needs 1 <= k <= n and 0 <= c <= n, got n={n}, c={c}, k={k}")
    total = math.comb(n, k)
    return 1.0 - math.comb(n - c, k) / total, math.comb(c, k) / total


def pass_k_values(rollouts_per_example: int) -> list[int]:
    """The k reported for ``rollouts_per_example`` rollouts: powers of 2 up to it (none for 1), as upstream."""
    if rollouts_per_example < 2:
        return []
    return [2**i for i in range(rollouts_per_example.bit_length()) if 2**i <= rollouts_per_example]


def pass_at_k_summary(
    rewards: Sequence[float],
    example_ids: Sequence[Any],
    rollouts_per_example: int,
    threshold: float = PASS_THRESHOLD,
) -> tuple[dict[str, float], dict[str, float]]:
    """``(pass_at_k, pass_all_k)``: ``{str(k): mean over examples}`` for each k of :func:`pass_k_values`.

    ``rewards[i]`` is rollout ``i``'s reward and ``example_ids[i]`` its example; only examples
    with all ``rollouts_per_example`` rollouts count (a resumed run's unfinished example
    does not). Empty dicts when no example is complete or ``rollouts_per_example`` is 1.
    """
    ks = pass_k_values(rollouts_per_example)
    counts: dict[Any, list[int]] = {}
    for reward, example in zip(rewards, example_ids, strict=True):
        seen = counts.setdefault(example, [0, 0])
        seen[0] += 1
        seen[1] += int(reward >= threshold)
    complete = [c for n, c in counts.values() if n == rollouts_per_example]
    if not ks or not complete:
        return {}, {}
    at: dict[str, float] = {}
    every: dict[str, float] = {}
    for k in ks:
        pairs = [pass_at_k(rollouts_per_example, c, k) for c in complete]
        at[str(k)] = sum(p for p, _ in pairs) / len(pairs)
        every[str(k)] = sum(a for _, a in pairs) / len(pairs)
    return at, every
