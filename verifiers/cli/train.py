"""``vf-train @ cfg.toml [overrides]``: the trainer half of ``vf-rl``, against a running server.

    vf-vllm --model smollm2 --enforce-eager --enable-lora --max-lora-rank 8   # elsewhere
    vf-train @ configs/vf-rl/reverse-text.toml --trainer.args.max_steps 5

Reads the same TOML as ``vf-rl`` (``[inference]`` only for the server's host and
port), builds the environment (several ``[[env]]`` tables become one ``EnvGroup``
whose prompts are drawn by weight), an ``RLConfig`` and an ``RLTrainer``, and
trains; ``[trainer.args] resume_from_checkpoint = true`` (or a checkpoint folder)
continues from the last complete checkpoint in ``output_dir`` (or that folder).
``vf-rl`` runs this module, under ``accelerate launch`` for several GPUs.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from verifiers.cli.common import run_cli
from verifiers.cli.run_config.load import EnvConfig, RunConfig, load_config, parse_command_line

DESCRIPTION = (
    "Train with RLTrainer from a vf-rl TOML config, against an inference server that is already running."
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``vf-train``; returns the exit status."""
    return run_cli(_run, argv)


def _run(argv: Sequence[str] | None) -> int:
    from verifiers.training.lifecycle.heartbeat import start_from_env

    start_from_env()  # under vf-rl: the liveness beat, first of all (vf-rl finds a stopped rank by it)
    cli = parse_command_line(argv, "vf-train", {}, DESCRIPTION)
    config = load_config(cli.configs, cli.overrides)
    train(config)
    return 0


def train(config: RunConfig) -> Any:
    """Build the environment, ``RLConfig`` and ``RLTrainer`` for ``config``, and train."""
    from verifiers.training.lifecycle.heartbeat import progress_callback, start_from_env
    from verifiers.training.rl import RLTrainer

    args = config.rl_config()
    env = load_envs(config.envs, seed=args.grpo_args.get("seed", 0))
    beat = start_from_env()  # None outside vf-rl
    callbacks = [progress_callback(beat)] if beat is not None else None
    trainer = RLTrainer(model=config.model, env=env, args=args, callbacks=callbacks)
    # True: the last complete checkpoint in output_dir (GRPOTrainer resolves it); a folder: that one.
    return trainer.train(resume_from_checkpoint=config.trainer.resume_from_checkpoint)


def load_envs(envs: Sequence[EnvConfig], seed: int = 0) -> Any:
    """One environment, or an ``EnvGroup`` of several whose training prompts follow their weights.

    The weights go to ``EnvGroup(weights=...)``; a ``None`` weight (no table set
    one, see ``toml_config``) leaves the group unweighted: each environment
    contributes its whole training set once.
    """
    import verifiers as vf
    from verifiers.training.rl.output import say

    loaded = []
    for spec in envs:
        say(f"Loading environment {spec.id}" + (f" with args {spec.args}" if spec.args else ""))
        loaded.append(vf.load_environment(spec.id, **spec.args))
    if len(loaded) == 1:
        return loaded[0]
    weights = None if any(e.weight is None for e in envs) else [e.weight for e in envs]
    group = vf.EnvGroup(loaded, env_names=[e.name for e in envs], weights=weights, seed=seed)
    shares = ", ".join(f"{name} {share:.0%}" for name, share in group.task_shares().items())
    say(f"Environment group of {len(envs)} (shares: {shares}); {len(group.dataset or [])} training prompts")
    return group


if __name__ == "__main__":
    sys.exit(main())
