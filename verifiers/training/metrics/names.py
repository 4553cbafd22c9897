"""Every metric name the GRPO trainer logs, with what it means: the one registry.

The metric table of docs/training.md ("What a run shows and writes") is
generated from :data:`METRICS` by ``scripts/gen_metric_docs.py``, and tests
check that the table is current and that every key the training code emits is
registered here (:func:`is_registered`). To add a metric: emit it, add a
:class:`Metric` below, run ``python scripts/gen_metric_docs.py``.

Families (one entry stands for many names): ``rewards/<function>`` (one per
reward function of the env's rubric) and ``eval_<metric>`` (what ``evaluate``
logs: the batch statistics below, ``/`` written ``_``). ``errors/<kind>`` is
derived from ``FailureKind`` (rollout/failure.py): one metric per kind.
"""

from __future__ import annotations

from dataclasses import dataclass

from verifiers.failures import FailureKind


@dataclass(frozen=True)
class Metric:
    """One logged name (or family, with ``<...>`` in it) and its one-line meaning.

    ``when``: None if every training step logs it; otherwise the condition under which it is logged.
    """

    name: str
    description: str
    when: str | None = None

    @property
    def prefix(self) -> str | None:
        """For a family (``rewards/<function>``): the part before ``<``; None for a single name."""
        return self.name.split("<")[0] if "<" in self.name else None


def _failure_metrics() -> list[Metric]:
    return [Metric(f"errors/{kind.value}", kind.description) for kind in FailureKind]


METRICS: tuple[Metric, ...] = (
    Metric("loss", "the step's loss (mean over micro-batches and processes)"),
    Metric("reward", "mean reward of the generation batch; it should rise"),
    Metric("reward_std", "spread (standard deviation) of the batch's rewards"),
    Metric("reward/min", "lowest reward of the step's batches"),
    Metric("reward/max", "highest reward of the step's batches"),
    Metric("rewards/<function>", "each reward function's mean score (its raw score, before weights)"),
    Metric(
        "entropy",
        "mean per-token entropy of the policy; slowly falling is normal, a collapse toward 0 means "
        "the policy stopped exploring",
    ),
    Metric("kl", "KL to the reference model (0 without one, beta = 0)"),
    Metric("importance_ratio/mean", "mean trainer/server probability ratio per token; should stay near 1.0"),
    Metric("importance_ratio/min", "smallest trainer/server probability ratio of the step"),
    Metric("importance_ratio/max", "largest trainer/server probability ratio of the step"),
    Metric("importance_ratio/truncated", "share of tokens whose ratio was capped at importance_sampling_cap"),
    Metric("masked_token_frac", "share of tokens dropped by the importance-weight band"),
    Metric("clip_ratio/low", "share of tokens whose ratio was clipped below 1 - epsilon"),
    Metric("clip_ratio/high", "share of tokens whose ratio was clipped above 1 + epsilon_high"),
    Metric("clip_ratio/region", "share of tokens in either clip region"),
    Metric("completion_length/mean", "mean completion length in tokens"),
    Metric("completion_length/min", "shortest completion of the step, in tokens"),
    Metric("completion_length/max", "longest completion of the step, in tokens"),
    Metric("truncated_frac", "share of completions cut at a length limit"),
    Metric("zero_std_groups_frac", "share of groups whose rewards were all equal (no signal)"),
    Metric(
        "template_rewrites",
        "multi-turn rollouts split into one sample per turn because the chat template rewrote history",
    ),
    Metric(
        "samples_per_rollout", "training samples per rollout (above 1 when template rewrites split rollouts)"
    ),
    Metric("rollout_errors", "rollouts that failed (reward 0, not trained); errors/<kind> says why"),
    *_failure_metrics(),
    Metric("completions/empty", "rollouts whose completion was empty (the model stopped at once)"),
    Metric("policy_lag", "how many updates old the trained batch's weights were"),
    Metric("time/generation_s", "seconds spent generating the batch"),
    Metric("time/train_s", "seconds spent training the step"),
    Metric("time/sync_s", "seconds spent syncing weights to the server"),
    Metric(
        "time/wait_generation_s",
        "seconds the trainer waited for a batch; large means generation is the bottleneck",
    ),
    Metric("time/step_s", "seconds from the end of the previous step to the end of this one"),
    Metric(
        "filtered_groups_frac",
        "share of generated groups the difficulty filter dropped",
        when="difficulty filtering is on",
    ),
    Metric(
        "prompt_truncated_frac",
        "share of prompts cut to max_prompt_length before they were sent",
        when="the trainer cuts prompts (max_prompt_length)",
    ),
    Metric(
        "eval_<metric>",
        "the batch statistics above for the eval split (`eval_reward`, `eval_rewards_<function>`, ...)",
        when="evaluate() runs (eval_strategy)",
    ),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in METRICS}


def is_registered(name: str) -> bool:
    """True if ``name`` is a registered metric or belongs to a registered family."""
    if name in BY_NAME:
        return True
    return any(
        m.prefix is not None and name.startswith(m.prefix) and len(name) > len(m.prefix) for m in METRICS
    )


def markdown_tables() -> str:
    """The docs' metric tables: what every step logs, then what is logged only sometimes."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    always = [m for m in METRICS if m.when is None]
    sometimes = [m for m in METRICS if m.when is not None]
    lines = ["| metric | what it says |", "|---|---|"]
    lines += [f"| `{m.name}` | {cell(m.description)} |" for m in always]
    lines += ["", "Logged only in some runs:", "", "| metric | logged when | what it says |", "|---|---|---|"]
    lines += [f"| `{m.name}` | {cell(m.when or '')} | {cell(m.description)} |" for m in sometimes]
    return "\n".join(lines)
