"""``vf.ensure_keys``: check that the environment variables a module needs are set (0.1.10+).

Environment modules call it at the top of ``load_environment`` (a judge's API
key, a search service's key), so a missing secret fails at load time, naming
every missing variable, instead of in the middle of an evaluation.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from verifiers.errors import ConfigError

__all__ = ["MissingKeyError", "ensure_keys"]


class MissingKeyError(ConfigError):
    """Required environment variable(s) are unset or empty; ``keys`` lists them all."""

    def __init__(self, keys: list[str]):
        self.keys = list(keys)
        names = ", ".join(self.keys)
        super().__init__(
            f"missing required environment variable(s): {names}",
            hint=f"export {self.keys[0]}=... in the shell that runs verifiers (or add it to your env file)",
        )


def ensure_keys(keys: Iterable[str]) -> None:
    """Raise ``MissingKeyError`` naming every variable in ``keys`` that is unset or empty."""
    if isinstance(keys, str):  # a single name, not its characters
        keys = [keys]
    missing = [key for key in keys if not os.environ.get(key)]
    if missing:
        raise MissingKeyError(missing)
