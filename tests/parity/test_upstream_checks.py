"""The checks upstream never made up front, against 0.1.4 and 0.1.12 (each an oracle, conftest.py).

A JudgeRubric whose judge_prompt names a field of its own is built (upstream fills the template
only in ``judge()``, where a missing field is a ``KeyError``), and a reward function wrapped as
``functools.update_wrapper(partial(f, ...), f)`` is accepted and scores what ``f`` returns. The
same probe (tests/drivers/upstream_checks_probe.py) runs on both sides. Slow tier: the oracle
venvs are built from PyPI on first use.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.parity.conftest import ORACLE_PINS, RELEASE_PINS, _oracle_venv, build_oracle

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "tests" / "drivers" / "upstream_checks_probe.py"


def probe(python: str, cwd: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(OPENAI_API_KEY="EMPTY", VF_LOG_LEVEL="CRITICAL", HF_HUB_OFFLINE="1")
    done = subprocess.run(
        [python, "-I", str(PROBE)], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def ours() -> dict:
    return probe(sys.executable, ROOT)


@pytest.mark.parametrize("version", ["0.1.4", "0.1.12"])
def test_upstream_checks_match_release(version, ours, tmp_path_factory):
    pins = ORACLE_PINS if version == "0.1.4" else RELEASE_PINS[version]
    python = build_oracle(version, pins, _oracle_venv(tmp_path_factory, version))
    theirs = probe(str(python), tmp_path_factory.mktemp(f"probe-{version}"))
    # built on both sides
    assert theirs["judge_construct"] == ours["judge_construct"] == {"ok": True}
    # judge() fails on both with a KeyError whose message starts with upstream's words
    assert theirs["judge_call"]["error"] == "KeyError"
    assert "KeyError" in ours["judge_call"]["bases"]
    assert ours["judge_call"]["str"].startswith(theirs["judge_call"]["str"])
    assert "override judge()" in ours["judge_call"]["str"]  # then our hint
    # the wrapped partial scores the same
    assert (
        theirs["partial_reward"]
        == ours["partial_reward"]
        == {"ok": {"reward": 3.0, "metrics": {"scaled": 3.0}}}
    )
