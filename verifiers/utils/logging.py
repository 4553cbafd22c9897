"""Logging: one setup function, and `warn_once` so repeated failures log once, not per sample."""

from __future__ import annotations

import logging
import sys
import threading

_seen: set[str] = set()


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is at the time of the write.

    A handler that kept the stream of its creation would write to a closed file
    once a test harness (or a notebook) swaps ``sys.stderr``.
    """

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler.__init__ assigns it; ignore
        pass


_seen_lock = threading.Lock()


def setup_logging(
    level: str | int = "INFO", log_format: str | None = None, date_format: str | None = None
) -> None:
    """Configure the ``verifiers`` logger to write to stderr (idempotent)."""
    logger = logging.getLogger("verifiers")
    if isinstance(level, str):
        level = logging.getLevelName(level.upper())
    logger.setLevel(level)
    if not any(getattr(h, "_verifiers", False) for h in logger.handlers):
        handler = _StderrHandler()
        handler._verifiers = True  # type: ignore[attr-defined]
        handler.setFormatter(
            logging.Formatter(
                log_format or "%(asctime)s %(levelname)s %(name)s: %(message)s",
                datefmt=date_format or "%H:%M:%S",
            )
        )
        logger.addHandler(handler)
    logger.propagate = False


def warn_once(logger: logging.Logger, key: str, message: str, *args, level: int = logging.WARNING) -> bool:
    """Log ``message`` the first time ``key`` is seen in this process; return whether it logged.

    Failures that repeat per sample (a reward function that raises, a server that
    rejects token parameters) are logged once, and counted in metrics instead.
    """
    with _seen_lock:
        if key in _seen:
            return False
        _seen.add(key)
    logger.log(level, message, *args)
    return True


def reset_warn_once() -> None:
    """Forget which keys were logged (for tests)."""
    with _seen_lock:
        _seen.clear()
