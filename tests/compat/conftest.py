"""The compat tier: every public name of every verifiers 0.1.x release, walked in its own venv.

Each release's venv is ``tests/parity/conftest.py``'s ``build_oracle`` (cached under
``$VF_CACHE_DIR/oracle-<version>``), with the same pins as the parity tier's: 0.1.4's for
0.1.4, the 0.1.8+ pins (openai 2, prime-sandboxes, ...) for the later releases, so that their
modules import. The walk itself (``tests/drivers/release_walk.py``) is cached beside the venv
as ``release-walk.json``: a warm run reads JSON and never starts the release's Python.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.parity.conftest import _PINS_01X, _SANDBOX_PINS, ORACLE_PINS, build_oracle, run_driver

# Every 0.1.x release on PyPI from 0.1.4 on (0.1.13 was never published; .postN releases are
# packaging fixes of the same API and are not walked).
RELEASES = ("0.1.4", "0.1.5", "0.1.6", "0.1.7", "0.1.8", "0.1.9", "0.1.10", "0.1.11", "0.1.12", "0.1.14")


def release_pins(version: str) -> tuple[str, ...]:
    """The parity tier's pins where it has the release (so both tiers share one venv), else the
    0.1.8+ pins; 0.1.11 imports prime-tunnel at ``import verifiers``, 0.1.14 in its experimental envs."""
    if version == "0.1.4":
        return ORACLE_PINS
    pins = (f"verifiers=={version}", *_PINS_01X, *_SANDBOX_PINS)
    return (*pins, "prime-tunnel==0.1.4") if version in ("0.1.11", "0.1.14") else pins


def oracle_dir(version: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = os.environ.get("VF_CACHE_DIR")
    root = Path(cache).expanduser() if cache else tmp_path_factory.getbasetemp()
    return root / f"oracle-{version}"


def release_walk(version: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The release's public names (``release_walk.py``'s JSON), walked once per venv build."""
    venv = oracle_dir(version, tmp_path_factory)
    python = build_oracle(version, release_pins(version), venv)
    cached = venv / "release-walk.json"
    marker = (
        (venv / ".parity-pins").read_text()
        + "\n"
        + (Path(__file__).parents[1] / "drivers" / "release_walk.py").read_text()
    )
    stamp = venv / "release-walk.stamp"
    if cached.exists() and stamp.exists() and stamp.read_text() == marker:
        return json.loads(cached.read_text())
    workdir = tmp_path_factory.mktemp(f"walk-{version}")
    result = run_driver(python, "release_walk.py", {}, workdir, f"{version} walk",
                        JUDGE_API_KEY="EMPTY", VF_LOG_LEVEL="CRITICAL")  # fmt: skip
    cached.write_text(json.dumps(result))
    stamp.write_text(marker)
    return result
