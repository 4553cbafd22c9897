"""What the CLI tests share: for vf-eval, a working folder with reverse-text importable and log
handlers dropped between tests; for vf-rl, vf-train and vf-setup, a vf-rl config file and one process
as a user starts it (a module asks for that with ``pytestmark``)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

from tests.doubles.configs import RL_CONFIG as CONFIG

REVERSE_TEXT_DIR = Path(__file__).resolve().parents[2] / "environments" / "reverse_text"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """Run in a temp folder with the bundled reverse-text environment importable and no API key set."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(REVERSE_TEXT_DIR))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    yield tmp_path
    sys.modules.pop("reverse_text", None)


@pytest.fixture
def fresh_log_handler():
    """vf-eval installs a stderr log handler bound to the stream of the moment; under capsys
    that stream is closed after the test, so drop the handler between tests."""
    yield
    logger = logging.getLogger("verifiers")
    for handler in [h for h in logger.handlers if getattr(h, "_verifiers", False)]:
        logger.removeHandler(handler)


@pytest.fixture
def config_file(tmp_path):
    """A vf-rl config (tests/doubles/configs.py) written to a file, as vf-rl and vf-train read it."""
    path = tmp_path / "cfg.toml"
    path.write_text(CONFIG)
    return path


@pytest.fixture
def one_process(monkeypatch):
    """No launcher's rank variables: vf-rl runs here as a user starts it, one process, no GPU pinned."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("RANK", raising=False)
