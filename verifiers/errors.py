"""Every typed error of verifiers, in one place.

Each error carries a one-line message that names the problem and, where one
exists, the fix (``hint``). The CLIs print ``error: <message>`` and exit 2 for
any :class:`VerifiersError` raised by bad input, never a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class VerifiersError(Exception):
    """Base class. ``str(err)`` is one line: the problem, then the fix."""

    exit_code = 2

    def __init__(self, message: str, hint: str | None = None):
        self.message = message
        self.hint = hint
        super().__init__(f"{message} ({hint})" if hint else message)


class ConfigError(VerifiersError, ValueError):
    """A configuration value (dataclass field, TOML key, CLI flag) is invalid."""


class ConfigTypeError(ConfigError, TypeError):
    """An argument has the wrong type where upstream raised ``TypeError`` (code catching that keeps working)."""


class TemplateKeyError(ConfigError, KeyError):
    """A template names a field nobody fills (``str.format``'s ``KeyError``, upstream's class)."""

    def __str__(self) -> str:  # KeyError's own __str__ would quote the whole line
        return Exception.__str__(self)


class TemplateIndexError(ConfigError, IndexError):
    """A template has a positional field (``{0}``, ``{}``): ``str.format``'s ``IndexError``."""


class DatasetFormatError(ConfigError):
    """A dataset lacks the columns an environment needs (e.g. neither `prompt` nor `question`)."""


class EnvironmentNotFoundError(VerifiersError, ImportError):
    """`load_environment` could not import the module for an environment id."""


class EnvironmentArgsError(ConfigError, TypeError):
    """An environment was given an argument its `load_environment` does not accept."""


def install_extra_command(extra: str) -> str:
    """The pip command that adds ``extra`` to this install. Never the bare ``verifiers[extra]``:
    on the public index that name is another project. From a checkout (an editable install,
    setup.py beside the package) the checkout itself; otherwise the wheel built from it."""
    from pathlib import Path  # (pathlib only: this module stays import-light)

    root = Path(__file__).resolve().parent.parent
    if (root / "setup.py").is_file():
        return f"pip install -e '{root}[{extra}]'"
    return f"pip install '/path/to/verifiers-<version>-py3-none-any.whl[{extra}]' (the wheel of this project)"


class MissingExtraError(VerifiersError, ImportError):
    """An optional dependency is missing; the message names the pip extra to install."""

    def __init__(self, feature: str, extra: str, cause: BaseException | None = None):
        detail = f": {cause}" if cause else ""
        super().__init__(
            f"{feature} needs the '{extra}' extra{detail}",
            hint=f"install it with: {install_extra_command(extra)}",
        )
        self.extra = extra


class MissingPackageError(MissingExtraError):
    """A third-party package an environment class wraps (gymnasium, textarena, ...) is not installed."""

    def __init__(self, feature: str, package: str):
        VerifiersError.__init__(
            self,
            f"{feature} needs the '{package}' package, which is not installed",
            hint=f"pip install {package}",
        )
        self.extra = package


class ToolError(VerifiersError):
    """A tool call ended the rollout (0.1.8+'s ``stop_errors``); the cause is chained."""


class ToolParseError(ToolError):
    """A tool call's arguments could not be read, and the error type is in ``stop_errors``."""


class ToolCallError(ToolError):
    """A tool raised an error whose type is in ``stop_errors``."""


class SandboxError(VerifiersError):
    """The code sandbox itself failed (not the code it ran)."""


class ServerError(VerifiersError):
    """The inference server answered with an error, or could not be reached."""

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        url: str | None = None,
        status: int | None = None,
        body: str | None = None,
    ):
        parts = [message]
        if url:
            parts.append(f"url={url}")
        if status is not None:
            parts.append(f"status={status}")
        if body:
            parts.append(f"body={body[:300]!r}")
        super().__init__(" ".join(parts), hint)
        self.url, self.status, self.body = url, status, body


class ServerUnreachableError(ServerError):
    """Nothing answered at the server's address (connection refused, DNS, ...)."""


class ServerTimeoutError(ServerError):
    """The server did not become ready, or did not answer, within the time limit."""


class PromptTooLongError(ServerError):
    """The prompt (e.g. a long multi-turn history) no longer fits the model's context window."""


class WeightSyncError(ServerError):
    """A weight or adapter update failed; ``stage`` names the step that failed."""

    def __init__(self, stage: str, message: str, **kw):
        super().__init__(f"weight sync failed at stage '{stage}': {message}", **kw)
        self.stage = stage


class GenerationError(VerifiersError):
    """Rollout generation failed in the background generator; the cause is chained."""


class CheckpointError(VerifiersError):
    """A checkpoint could not be written (disk full, read-only, no permission). The half-written
    folder is removed (or left without its completeness mark); the last complete one is intact."""

    def __init__(self, message: str, hint: str | None = None, *, errno: int | None = None):
        super().__init__(message, hint)
        self.errno = errno


class RankFailedError(VerifiersError):
    """Another process failed while this one waited for it; the message is that failure's line."""


class StopRequested(Exception):
    """A stop signal arrived while the trainer waited for a batch: ``GRPOTrainer.train`` catches it,
    saves the last completed step and raises :class:`TrainingStopped` (never seen outside it)."""


class TrainingStopped(SystemExit):
    """``GRPOTrainer.train`` stopped early on SIGINT or SIGTERM, after saving a checkpoint of the
    last completed step. A ``SystemExit`` with status 128 + the signal (SIGINT 130, SIGTERM 143),
    so a script that does not catch it exits with the status shells and launchers expect."""

    def __init__(self, signum: int, step: int, checkpoint: str | None):
        super().__init__(128 + int(signum))
        self.signum, self.step, self.checkpoint = int(signum), step, checkpoint


def nearest(name: str, candidates: Iterable[str], cutoff: float = 0.6) -> str | None:
    """The candidate closest to ``name`` (difflib ratio >= ``cutoff``), for "did you mean" hints; or None."""
    match = difflib.get_close_matches(name, list(candidates), n=1, cutoff=cutoff)
    return match[0] if match else None
