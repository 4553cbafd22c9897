"""What the vf-eval tests share: a working folder with reverse-text importable, and log handlers
dropped between tests."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

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
