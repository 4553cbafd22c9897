"""A real vf-rl run on the tiny model: its own CPU vf-vllm, reverse-text, a checkpoint every step.

Not a double: the real thing, started as a user starts it (``python -m verifiers.cli.rl.plan @
cfg.toml --no-tmux``) from ``REAL_RUN_CONFIG`` (``tests/doubles/configs.py``), so that a test can
kill one of its children mid-run and read the steps it logged (``step_lines``).

Used by the slow, server tier (tests/cli/rl/: the server killed and the trainer killed mid-run).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.doubles.configs import REAL_RUN_CONFIG as CONFIG
from tests.doubles.vllm_server import VLLM_CACHE_ROOT, free_port

ROOT = Path(__file__).resolve().parents[2]


def start_real_run(tiny_model_dir: Path, tmp_path: Path, steps: int) -> tuple[subprocess.Popen, Path]:
    """``vf-rl`` on the tiny model and reverse-text for ``steps`` steps (a checkpoint every step, a CPU
    vf-vllm in fp32), started in ``tmp_path``: the process (stdout piped) and its output folder."""
    cfg = tmp_path / "cfg.toml"
    text = CONFIG.format(model=tiny_model_dir, port=free_port()).replace(
        "max_steps = 2", f"max_steps = {steps}"
    )
    cfg.write_text(
        text.replace(
            "[trainer]\n", '[inference.args]\nenforce_eager = true\ndtype = "float32"\n\n[trainer]\n'
        )
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CACHE_ROOT": VLLM_CACHE_ROOT,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "environments" / "reverse_text")]),
    }
    child = subprocess.Popen(
        [sys.executable, "-m", "verifiers.cli.rl.plan", "@", str(cfg), "--no-tmux"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    return child, tmp_path / "outputs" / "resume-e2e"


def step_lines(run: Path) -> list[dict]:
    """The per-step lines of a run's metrics.jsonl (not the summary, not eval lines)."""
    lines = [json.loads(line) for line in (run / "runs" / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if "train_runtime" not in r and not any(k.startswith("eval_") for k in r)]
