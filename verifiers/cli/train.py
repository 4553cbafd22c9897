"""``vf-train @ cfg.toml [overrides]``: the trainer half of ``vf-rl``, against a running server.

    vf-vllm --model smollm2 --enforce-eager --enable-lora --max-lora-rank 8   # elsewhere
    vf-train @ configs/vf-rl/reverse-text.toml --trainer.args.max_steps 5

Reads the same TOML as ``vf-rl`` (``[inference]`` only for the server's host and
port), builds the environment (several ``[[env]]`` tables become one ``EnvGroup``
whose prompts are drawn by weight), an ``RLConfig`` and an ``RLTrainer``, and
trains. ``vf-rl`` runs this module, under ``accelerate launch`` for several GPUs.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from typing import Any

from verifiers.cli.common import run_cli
from verifiers.cli.toml_config import EnvConfig, RunConfig, load_config, parse_command_line
from verifiers.errors import ConfigError

DESCRIPTION = (
    "Train with RLTrainer from a vf-rl TOML config, against an inference server that is already running."
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``vf-train``; returns the exit status."""
    return run_cli(_run, argv)


def _run(argv: Sequence[str] | None) -> int:
    cli = parse_command_line(argv, "vf-train", {}, DESCRIPTION)
    config = load_config(cli.config, cli.overrides)
    train(config)
    return 0


def train(config: RunConfig) -> Any:
    """Build the environment, ``RLConfig`` and ``RLTrainer`` for ``config``, and train."""
    from verifiers.training.rl import RLTrainer

    args = config.rl_config()
    env = load_envs(config.envs, seed=args.grpo_args.get("seed", 0))
    return RLTrainer(model=config.model, env=env, args=args).train()


def load_envs(envs: Sequence[EnvConfig], seed: int = 0) -> Any:
    """One environment, or an ``EnvGroup`` of several whose training prompts follow their weights."""
    import verifiers as vf
    from verifiers.training.rl import say

    loaded = []
    for spec in envs:
        say(f"Loading environment {spec.id}" + (f" with args {spec.args}" if spec.args else ""))
        loaded.append(vf.load_environment(spec.id, **spec.args))
    if len(loaded) == 1:
        return loaded[0]
    group = vf.EnvGroup(loaded, env_names=[e.name for e in envs])
    if group.dataset is not None and len({e.weight for e in envs}) > 1:
        group.dataset = weighted_rows(group.dataset, {e.name: e.weight for e in envs}, seed)
    shares = ", ".join(f"{e.name} {e.weight:g}" for e in envs)
    say(f"Environment group of {len(envs)} (weights: {shares}); {len(group.dataset or [])} training prompts")
    return group


def weighted_rows(dataset: Any, weights: dict[str, float], seed: int = 0) -> Any:
    """Resample ``dataset`` (with a ``task`` column) so each task's share of rows follows ``weights``.

    ``EnvGroup`` concatenates its members' datasets, so each member's share is its
    dataset size. Here the total row count is kept and split by weight: a task
    with more rows than its share is subsampled, one with fewer is repeated
    (whole copies, then a random remainder). The order is then shuffled by the trainer.
    """
    rows_by_task: dict[str, list[int]] = {}
    for i, task in enumerate(dataset["task"]):
        rows_by_task.setdefault(task, []).append(i)
    missing = sorted(set(weights) - set(rows_by_task))
    if missing:
        raise ConfigError(
            f"environment(s) {', '.join(missing)} have no training rows", hint="drop them or give them data"
        )
    total, weight_sum = len(dataset), sum(weights.values())
    rng = random.Random(seed)
    picked: list[int] = []
    for task, weight in weights.items():
        rows = rows_by_task[task]
        want = max(1, round(total * weight / weight_sum))
        copies, rest = divmod(want, len(rows))
        picked += rows * copies + rng.sample(rows, rest)
    return dataset.select(sorted(picked))


if __name__ == "__main__":
    sys.exit(main())
