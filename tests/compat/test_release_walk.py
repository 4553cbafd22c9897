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

from tests.compat.conftest import RELEASES, oracle_dir, release_walk
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


@pytest.mark.parametrize("version", RELEASES)
def test_every_name_of_the_releases_all_resolves(
    version: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The names of ``verifiers.__all__`` as the release's source lists them: the walk sees only those
    that import in the release's venv, and lazy ones needing an extra (``BrowserEnv``, ``GRPOTrainer``)
    do not."""
    import ast

    import verifiers
    from verifiers.compat.refused import name_refusal

    release_walk(version, tmp_path_factory)  # builds the venv
    source = next(
        oracle_dir(version, tmp_path_factory).glob("lib/python3*/site-packages/verifiers/__init__.py")
    )
    names: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text())):
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if (
            isinstance(target, ast.Name)
            and target.id == "__all__"
            and isinstance(node.value, (ast.List, ast.Tuple))
        ):
            names |= {e.value for e in node.value.elts if isinstance(e, ast.Constant)}
    assert names
    bad = []
    for name in sorted(names):
        if name_refusal("verifiers", name) is not None:
            continue
        try:
            getattr(verifiers, name)
        except Exception as e:  # noqa: BLE001 - a missing extra (MissingExtraError) still resolves
            if type(e).__name__ != "MissingExtraError":
                bad.append(f"verifiers.{name}: {type(e).__name__}: {e}")
    assert not bad, "\n".join(bad)
