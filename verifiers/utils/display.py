"""Rich tables for people: training samples and vf-eval results.

Everything here is laid out to stay readable in an 80-column terminal: long
prompts are cut to their last messages, and statistics go in a narrow table of
their own rather than in extra columns. ``rich`` is imported inside the
functions so that ``import verifiers`` does not pay for it.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from rich.console import Console

    from verifiers.types import GenerateOutputs, Messages

MAX_CELL_CHARS = 1200
"""Characters shown per prompt or completion cell; the rest is elided in the middle."""


def format_messages(messages: Messages | Any, max_messages: int | None = None) -> str:
    """Plain text for a prompt or completion: a string as is, chat messages as ``role: content`` blocks.

    ``max_messages`` keeps only the last messages (a long system prompt or
    few-shot block would otherwise push the interesting part off screen).
    """
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, Sequence):
        return str(messages)
    shown = list(messages)
    skipped = 0
    if max_messages is not None and len(shown) > max_messages:
        skipped = len(shown) - max_messages
        shown = shown[-max_messages:]
    blocks = [f"[{skipped} earlier message(s)]"] if skipped else []
    for message in shown:
        if not isinstance(message, Mapping):
            blocks.append(str(message))
            continue
        content = message.get("content")
        text = content if isinstance(content, str) else _content_text(content)
        for call in message.get("tool_calls") or []:
            text += ("\n" if text else "") + _tool_call_text(call)
        blocks.append(f"{message.get('role', '?')}: {text}")
    return "\n".join(blocks)


def _content_text(content: Any) -> str:
    """Text of multi-part content (``[{"type": "text", "text": ...}, ...]``)."""
    if content is None:
        return ""
    if isinstance(content, list):
        parts = [
            p.get("text", f"<{p.get('type', 'part')}>") if isinstance(p, Mapping) else str(p) for p in content
        ]
        return " ".join(parts)
    return str(content)


def _tool_call_text(call: Any) -> str:
    """``-> name(args)`` for a tool call given as a dict or an OpenAI object."""
    if hasattr(call, "model_dump"):
        call = call.model_dump()
    if isinstance(call, str):
        try:
            call = json.loads(call)
        except ValueError:
            return f"-> {call}"
    function = call.get("function", {}) if isinstance(call, Mapping) else {}
    return f"-> {function.get('name', '?')}({function.get('arguments', '')})"


def _clip(text: str, limit: int = MAX_CELL_CHARS) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - limit} chars ...]\n{text[-half:]}"


def _console(console: Console | None) -> Console:
    from rich.console import Console

    return console if console is not None else Console()


def _errors_first(*args: Any, **kwargs: Any) -> bool:
    """Whether a call is in 0.1.9+'s order, ``(prompts, completions, errors, rewards, step, ...)``:
    rewards given by name after three positionals, or a fourth positional that is the rewards
    (a sequence) rather than ``step``."""
    return len(args) >= 3 and ("rewards" in kwargs or (len(args) >= 4 and hasattr(args[3], "__len__")))


def _print_with_errors_first(
    prompts: Sequence[Messages],
    completions: Sequence[Messages],
    errors: Sequence[Any],
    rewards: Sequence[float],
    step: int,
    num_samples: int = 1,
) -> None:
    """0.1.9+'s form of :func:`print_prompt_completions_sample`: ``errors`` comes third."""
    print_prompt_completions_sample(prompts, completions, rewards, step, num_samples, errors=errors)


def _takes_errors_first(fn: Any) -> Any:
    @functools.wraps(fn)
    def either(*args: Any, **kwargs: Any) -> None:
        return (_print_with_errors_first if _errors_first(*args, **kwargs) else fn)(*args, **kwargs)

    # verifiers.compat.forms.forms_of reads it: the release walk accepts 0.1.9+'s signature too.
    either.__vf_forms__ = (_print_with_errors_first,)  # type: ignore[attr-defined]
    return either


@_takes_errors_first
def print_prompt_completions_sample(
    prompts: Sequence[Messages],
    completions: Sequence[Messages],
    rewards: Sequence[float] | Mapping[str, Sequence[float]],
    step: int,
    num_samples: int = 1,
    console: Console | None = None,
    *,
    errors: Sequence[Any] | None = None,
) -> None:
    """Print the first ``num_samples`` (prompt, completion, reward) rows as a table titled with ``step``.

    ``rewards`` is one reward per sample, or (as 0.1.x trainers passed it) a
    mapping of reward-function name to one value per sample; the latter is
    shown as one ``name: value`` line per function. ``errors`` (one per sample,
    None for none: an exception or a dict with its text) adds an ``error:`` line
    under that completion. 0.1.9+'s positional order, ``(prompts, completions,
    errors, rewards, step, num_samples)``, is taken too.
    """
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"Step {step}", show_lines=True, expand=True)
    table.add_column("Prompt", ratio=4, overflow="fold")
    table.add_column("Completion", ratio=4, overflow="fold")
    # Per-function rewards need room for "name: 0.000" on one line.
    names = list(rewards) if isinstance(rewards, Mapping) else []
    reward_width = min(max([len(n) + 7 for n in names] + [6]), 24)
    table.add_column("Reward", justify="right", min_width=reward_width)
    count = min(num_samples, len(prompts), len(completions))
    for i in range(count):
        completion = Text(_clip(format_messages(completions[i])), style="bright_green")
        error = errors[i] if errors is not None and i < len(errors) else None
        if error is not None:
            completion.append(f"\n\nerror: {_error_text(error)}", style="bold red")
        table.add_row(
            Text(_clip(format_messages(prompts[i], max_messages=2)), style="bright_yellow"),
            completion,
            Text(_reward_cell(rewards, i), style="bold cyan"),
        )
    _console(console).print(table)


def _error_text(error: Any) -> str:
    """One line for a sample's error: ``Type: message`` of an exception, or a dict's error text."""
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    if isinstance(error, Mapping):
        for key in ("error_chain_repr", "error", "message"):
            if error.get(key):
                return str(error[key])
    return str(error)


def _reward_cell(rewards: Sequence[float] | Mapping[str, Sequence[float]], i: int) -> str:
    if isinstance(rewards, Mapping):
        return "\n".join(f"{name}: {_num(values[i])}" for name, values in rewards.items() if i < len(values))
    return _num(rewards[i]) if i < len(rewards) else "-"


def _num(value: Any) -> str:
    try:
        return f"{float(value):.3f}"
    except (TypeError, ValueError):
        return str(value)


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population standard deviation (``nan``, ``nan`` for no values)."""
    if not values:
        return math.nan, math.nan
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))


def print_results_table(
    results: GenerateOutputs,
    *,
    env_id: str | None = None,
    model: str | None = None,
    rollouts_per_example: int = 1,
    sample_index: int = 0,
    console: Console | None = None,
    pass_at_k: Mapping[str, float] | None = None,
) -> None:
    """Print vf-eval's summary: reward and metric statistics, then one sample rollout.

    The statistics table has one row for the reward and one per metric (mean,
    std, min, max over all rollouts). When ``rollouts_per_example > 1`` the
    rewards of each example's rollouts are also listed, which shows at a glance
    whether an example is always solved, never, or sometimes. ``pass_at_k``
    (``{"1": ..., "2": ...}``, see ``envs.results.pass_at_k_summary``) adds a pass@k line.
    """
    from rich.table import Table
    from rich.text import Text

    out = _console(console)
    n = len(results.reward)
    title = "Evaluation"
    if env_id or model:
        title += f": {env_id or '?'} with {model or '?'}"
    stats = Table(title=title, caption=f"{n} rollouts", title_justify="left")
    stats.add_column("", style="bold", overflow="fold", max_width=36)
    for name in ("mean", "std", "min", "max"):
        stats.add_column(name, justify="right")
    for name, values in [("reward", results.reward), *sorted(results.metrics.items())]:
        mean, std = mean_std(list(values))
        stats.add_row(
            name,
            f"{mean:.3f}",
            f"{std:.3f}",
            _num(min(values)) if values else "-",
            _num(max(values)) if values else "-",
        )
    out.print(stats)

    if rollouts_per_example > 1 and n:
        lines = []
        for r in range(rollouts_per_example):
            shown = [f"{v:.2f}" for v in results.reward[r::rollouts_per_example][:8]]
            more = " ..." if len(results.reward[r::rollouts_per_example]) > 8 else ""
            lines.append(f"r{r + 1}: [{', '.join(shown)}{more}]")
        out.print(Text("rewards by rollout (per example):\n" + "\n".join(lines), style="dim"))
    if pass_at_k:
        shown = ", ".join(
            f"pass@{k}={v:.3f}" for k, v in sorted(pass_at_k.items(), key=lambda kv: int(kv[0]))
        )
        out.print(Text(f"pass@k (per example, unbiased): {shown}", style="bold"))

    if not n:
        return
    i = min(max(sample_index, 0), n - 1)
    sample = Table(title=f"Sample rollout {i}", show_lines=True, expand=True, title_justify="left")
    sample.add_column("Prompt", ratio=1, overflow="fold")
    sample.add_column("Completion", ratio=1, overflow="fold")
    sample.add_row(
        Text(_clip(format_messages(results.prompt[i], max_messages=2)), style="bright_yellow"),
        Text(_clip(format_messages(results.completion[i])), style="bright_green"),
    )
    out.print(sample)
    metric_text = ", ".join(f"{k}={_num(v[i])}" for k, v in sorted(results.metrics.items()) if i < len(v))
    answer = results.answer[i] if i < len(results.answer) else ""
    out.print(
        Text(
            f"reward={_num(results.reward[i])}" + (f"  ({metric_text})" if metric_text else ""), style="bold"
        )
    )
    if answer:
        out.print(Text(f"answer: {_clip(str(answer), 300)}", style="dim"))
