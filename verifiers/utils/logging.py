"""Logging: one setup function, and `warn_once` so repeated failures log once, not per sample.

Also the small helpers 0.1.x code imports from ``verifiers.utils.logging_utils`` (an old path
served by ``verifiers.compat``): ``log_level``, ``quiet_verifiers``, ``log_once``,
``print_time`` and friends.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Iterator

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


LOGGER_NAME = "verifiers"
"""The name of the package's logger (0.1.10+'s ``logging_utils.LOGGER_NAME``)."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``timestamp`` (UTC, ISO 8601), ``level``, ``name``, ``message``,
    ``module``, ``function``, ``line`` and, for an exception, ``exception`` (0.1.11+'s keys)."""

    def format(self, record: logging.LogRecord) -> str:
        import json
        from datetime import datetime, timezone

        entry = {
            "timestamp": datetime.now(timezone.utc).isoformat(),
            "level": record.levelname,
            "name": record.name,
            "message": record.getMessage(),
            "module": record.module,
            "function": record.funcName,
            "line": record.lineno,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def _level(level: str | int) -> int:
    return logging.getLevelName(level.upper()) if isinstance(level, str) else level


def setup_logging(
    level: str | int | None = "INFO",
    log_format: str | None = None,
    date_format: str | None = None,
    log_file: str | None = None,
    log_file_level: str | int | None = None,
    console_logging: bool = True,
    file_logging: bool | None = None,
    json_logging: bool = False,
) -> None:
    """Configure the ``verifiers`` logger (idempotent: it replaces the handlers it added before).

    ``level=None`` turns its logging off. It writes to stderr unless ``console_logging=False``,
    and appends to ``log_file`` when one is given (0.1.10's behaviour) unless
    ``file_logging=False``; ``file_logging=True`` (0.1.12+) needs a ``log_file``
    (``ConfigError``). ``log_file_level`` is the file's own level (default ``level``).
    ``json_logging=True`` writes :class:`JsonFormatter` lines instead of ``log_format``, and
    gives the root logger the same JSON stderr handler, so environment modules' own loggers
    write JSON too (as 0.1.12+).
    """
    logger = logging.getLogger(LOGGER_NAME)
    for handler in [h for h in logger.handlers if getattr(h, "_verifiers", False)]:
        logger.removeHandler(handler)
        if not isinstance(handler, _StderrHandler):
            handler.close()
    logger.propagate = False
    if level is None:
        logger.setLevel(logging.CRITICAL + 1)
        return
    if file_logging and log_file is None:
        from verifiers.errors import ConfigError

        raise ConfigError("setup_logging(file_logging=True) needs log_file", hint="pass log_file='run.log'")
    level = _level(level)
    file_level = _level(log_file_level) if log_file_level is not None else level
    to_file = log_file is not None and file_logging is not False
    logger.setLevel(min(level, file_level) if to_file else level)
    formatter = (
        JsonFormatter()
        if json_logging
        else logging.Formatter(
            log_format or "%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt=date_format or "%H:%M:%S"
        )
    )
    handlers: list[logging.Handler] = [_StderrHandler()] if console_logging else []
    if to_file:
        # Each handler keeps its own level then (the logger's is the lower of the two). Without a
        # file the stderr handler has none: a module logger set lower itself still reaches it.
        for handler in handlers:
            handler.setLevel(level)
        handlers.append(logging.FileHandler(log_file, mode="a", encoding="utf-8"))
        handlers[-1].setLevel(file_level)
    for handler in handlers:
        handler._verifiers = True  # type: ignore[attr-defined]
        handler.setFormatter(formatter)
        logger.addHandler(handler)
    if json_logging:
        root = logging.getLogger()
        for handler in [h for h in root.handlers if isinstance(h.formatter, JsonFormatter)]:
            root.removeHandler(handler)
        root.setLevel(level)
        handler = _StderrHandler()
        handler.setFormatter(formatter)
        root.addHandler(handler)


@contextlib.contextmanager
def log_level(level: str | int) -> Iterator[None]:
    """Set the ``verifiers`` logger to ``level`` inside the ``with`` block, then restore it."""
    logger = logging.getLogger(LOGGER_NAME)
    previous = logger.level
    logger.setLevel(_level(level))
    try:
        yield
    finally:
        logger.setLevel(previous)


def quiet_verifiers() -> contextlib.AbstractContextManager[None]:
    """``log_level("WARNING")``: the ``verifiers`` logger keeps only warnings and errors inside the block."""
    return log_level("WARNING")


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


def log_once(logger: logging.Logger, level: int, msg: str) -> None:
    """Log ``msg`` at ``level`` the first time this logger logs it in this process (0.1.12+)."""
    warn_once(logger, f"log_once:{logger.name}:{msg}", "%s", msg, level=level)


def warning_once(logger: logging.Logger, msg: str) -> None:
    """``log_once(logger, logging.WARNING, msg)``."""
    log_once(logger, logging.WARNING, msg)


def print_time(time_s: float) -> str:
    """Seconds as short text: ``"1d 2h"``, ``"3h 5m"``, ``"2m 7s"``, ``"42s"``, ``"250ms"`` (0.1.9+'s)."""
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if time_s >= size:
            rest = (time_s % size) // sub_size
            return f"{time_s // size:.0f}{unit}" + (f" {rest:.0f}{sub}" if rest > 0 else "")
    if time_s < 1:
        return f"{time_s * 1e3:.0f}ms"
    return f"{time_s:.0f}s"


def print_size(num_bytes: float) -> str:
    """Bytes as short text: ``"1.5 GB"``, ``"2.0 MB"``, ``"3.1 KB"``, ``"12 bytes"`` (0.1.14's)."""
    for unit, size in (("GB", 1024**3), ("MB", 1024**2), ("KB", 1024)):
        if num_bytes >= size:
            return f"{num_bytes / size:.1f} {unit}"
    return f"{num_bytes:.0f} bytes"


def truncate(s: str, limit: int = 200) -> str:
    """``s`` cut to ``limit`` characters, with ``"..."`` appended when it was longer."""
    return s[:limit] + "..." if len(s) > limit else s
