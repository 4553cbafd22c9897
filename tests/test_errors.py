"""verifiers/errors.py: how a missing extra is installed.

``pip install "verifiers[rl]"`` (the guides' spelling) resolves on the public index to another
project, so the hint names this install's own source: the checkout of an editable install, else
the wheel built from it.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from verifiers.errors import MissingExtraError, install_extra_command

ROOT = Path(__file__).resolve().parents[1]


def test_missing_extra_names_the_checkout_not_the_public_name():
    line = str(MissingExtraError("MathRubric", "envs"))
    assert line == f"MathRubric needs the 'envs' extra (install it with: pip install -e '{ROOT}[envs]')"
    assert "'verifiers[" not in line


def test_installed_from_a_wheel_the_hint_names_the_wheel(tmp_path):
    pkg = tmp_path / "site" / "verifiers"
    pkg.mkdir(parents=True)
    shutil.copy(ROOT / "verifiers" / "errors.py", pkg / "errors.py")  # no setup.py beside it
    spec = importlib.util.spec_from_file_location("wheel_errors", pkg / "errors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    command = module.install_extra_command("rl")
    assert command.startswith("pip install '/path/to/verifiers-<version>-py3-none-any.whl[rl]'")
    assert install_extra_command("rl") == f"pip install -e '{ROOT}[rl]'"
