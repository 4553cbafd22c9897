"""Every public name of every verifiers 0.1.x release resolves here, or is refused by name.

Its own tier (`pytest -m release_walk`): each release's venv is built from PyPI on first use (``conftest.release_walk``) and
its walk cached beside it; the checks of our side (``names.problems``) take a second or two.
The number of names checked per release is printed and written to ``release-walk-counts.json``
under ``$VF_CACHE_DIR`` (or the test's temp dir).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.compat.conftest import RELEASES, release_walk
from tests.compat.names import problems

# Its own tier (`pytest -m release_walk`; CI runs it after the contract tier): it builds a venv per
# release from PyPI on first use.
pytestmark = pytest.mark.release_walk

COUNTS: dict[str, int] = {}


@pytest.mark.parametrize("version", RELEASES)
def test_every_public_name_resolves(version: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    walk = release_walk(version, tmp_path_factory)
    checked, bad = 0, []
    for module, entry in sorted(walk["modules"].items()):
        n, lines = problems(module, entry["names"])
        checked += n
        bad += lines
    COUNTS[version] = checked
    root = Path(os.environ.get("VF_CACHE_DIR") or tmp_path_factory.getbasetemp())
    counts = root / "release-walk-counts.json"
    previous = json.loads(counts.read_text()) if counts.exists() else {}
    counts.write_text(json.dumps({**previous, version: checked}, indent=1, sort_keys=True))
    print(f"verifiers {version}: {checked} public names checked, {len(bad)} neither resolved nor refused")
    assert not bad, f"{version}: {len(bad)} names neither resolve nor are refused:\n" + "\n".join(bad)
