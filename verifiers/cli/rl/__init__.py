"""``vf-rl``: plan a run from one TOML (plan.py), then launch and supervise it (launcher.py)."""

from verifiers.cli.rl.plan import main

__all__ = ["main"]
