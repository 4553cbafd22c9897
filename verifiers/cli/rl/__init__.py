"""``vf-rl``: plan a run from one TOML (plan.py), then launch and supervise it (launcher.py).

plan.py imports launcher.py, never the reverse: the launcher runs any object with a
plan's fields (``launcher.Plan``).
"""

from verifiers.cli.rl.launcher import Launcher, Side
from verifiers.cli.rl.plan import Plan, build_plan, main

__all__ = ["Launcher", "Plan", "Side", "build_plan", "main"]
