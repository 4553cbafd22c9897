"""Helpers shared by the vf-* command-line tools (vf-eval, vf-init, vf-install, vf-setup, vf-models, ...).

Every CLI has the same contract for bad input: one line ``error: <message>``
on stderr and exit status 2, never a traceback. :func:`run_cli` enforces it
around a command's body, and :class:`CLIParser` makes argparse's own usage
errors follow the same shape. A traceback still appears for a real bug (any
exception that is not a :class:`~verifiers.errors.VerifiersError`), because
hiding those would make them impossible to report.

The second half resolves *where* a CLI sends model requests: ``-m`` aliases
from an endpoints file, the API key (a dummy one for a local server), and a
fail-fast reachability check.

Endpoints file: a Python file (default ``./configs/endpoints.py``) defining
``ENDPOINTS = {"alias": {"model": ..., "url": ..., "key": "ENV_VAR_NAME"}}``,
or a ``.toml`` / ``.json`` file whose top level is that mapping. Python was
kept as the default because that is what 0.1.x users already have; TOML and
JSON are there for people who prefer data to code. The guides' spelling works
too: ``{"default": {"base_url": ..., "api_key": ...}}`` (``base_url`` for ``url``;
``api_key`` is the key itself, ``key`` names the variable that holds it; ``model``
defaults to the alias). A ``default`` entry serves every ``-m`` that is no alias.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlparse

from verifiers.errors import ConfigError, ServerUnreachableError, VerifiersError

EXIT_OK = 0
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CLIParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors print ``error: ...`` and exit 2.

    argparse prints ``prog: error: msg``; the shared prefix lets scripts and
    tests recognise every CLI failure the same way.
    """

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def print_error(message: str) -> None:
    """Print one ``error:`` line on stderr (newlines folded so it stays one line)."""
    print("error: " + " ".join(str(message).split()), file=sys.stderr)


def run_cli(body: Callable[[Sequence[str] | None], int | None], argv: Sequence[str] | None = None) -> int:
    """Run a CLI body and turn its outcome into an exit status.

    ``VerifiersError`` -> ``error: msg`` on stderr and its ``exit_code`` (2);
    ``SystemExit`` (argparse, ``--help``) -> its code; Ctrl-C -> 130.
    Returning the status (instead of calling ``sys.exit``) lets tests call
    ``main([...])`` in-process; console scripts pass it to ``sys.exit``.
    """
    try:
        status = body(argv)
    except VerifiersError as err:
        print_error(str(err))
        return getattr(err, "exit_code", EXIT_USAGE)
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return EXIT_OK
        if isinstance(code, int):
            return code
        print_error(str(code))
        return EXIT_USAGE
    except KeyboardInterrupt:
        print_error("interrupted")
        return EXIT_INTERRUPTED
    return EXIT_OK if status is None else status


def run_parsed(
    build_parser: Callable[[], argparse.ArgumentParser],
    body: Callable[[argparse.Namespace], int | None],
    argv: Sequence[str] | None = None,
) -> int:
    """:func:`run_cli` for a command whose body takes the arguments ``build_parser()`` parsed."""
    return run_cli(lambda args: body(build_parser().parse_args(args)), argv)


def parse_json_arg(text: str | None, flag: str) -> dict[str, Any]:
    """Parse a JSON object given on the command line (``-a``, ``-S``).

    ``None`` or an empty string gives ``{}``. Invalid JSON raises a
    ``ConfigError`` naming the flag, the JSON error and where it is, with a
    caret under the offending character so shell-quoting mistakes are easy to see.
    """
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"{flag} is not valid JSON: {err.msg} at line {err.lineno} column {err.colno}: {_mark(text, err.pos)}",
            hint=f"""quote the whole object in single quotes, e.g. {flag} '{{"key": 1}}'""",
        ) from None
    if not isinstance(value, dict):
        raise ConfigError(
            f"{flag} must be a JSON object, got {type(value).__name__}: {text.strip()[:60]}",
            hint=f"""wrap the values in an object, e.g. {flag} '{{"key": 1}}'""",
        )
    return value


def _mark(text: str, pos: int, width: int = 40) -> str:
    """Show ``text`` around ``pos`` on one line, with ``>>>`` before the bad character."""
    flat = " ".join(text.split("\n"))
    start = max(0, pos - width)
    before = ("..." if start else "") + flat[start:pos]
    after = flat[pos : pos + width] + ("..." if pos + width < len(flat) else "")
    return f"{before}>>>{after}" if after else f"{before}>>>(end of input)"


# -- endpoints (model aliases, API keys, reachability) ---------------------------

DEFAULT_MODEL = "gpt-4.1-mini"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_KEY_VAR = "OPENAI_API_KEY"
DEFAULT_ENDPOINTS = Path("configs/endpoints.py")
_LOOPBACK_HOSTS = {"localhost", "::1", "0.0.0.0"}
_ENDPOINT_KEYS = {"model", "url", "base_url", "key", "api_key"}
DEFAULT_ALIAS = "default"  # the entry for any -m that is not an alias


@dataclass(frozen=True)
class Endpoint:
    """Where ``-m`` sends requests: the model name, base URL, and the API key's variable or value."""

    model: str
    base_url: str
    key_var: str
    api_key: str | None = None  # given in the endpoints file itself (wins over key_var unless -k is given)


def load_endpoints(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read an endpoints file (``.py`` with ``ENDPOINTS``, or ``.toml`` / ``.json``) and validate it."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"endpoints file {path} not found", hint="pass an existing file with -e")
    try:
        if path.suffix == ".py":
            import runpy

            endpoints = runpy.run_path(str(path)).get("ENDPOINTS")
            if endpoints is None:
                raise ConfigError(
                    f"endpoints file {path} defines no ENDPOINTS",
                    hint='add ENDPOINTS = {"alias": {"model": ..., "url": ..., "key": ...}}',
                )
        elif path.suffix == ".toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib

            endpoints = tomllib.loads(path.read_text())
        elif path.suffix == ".json":
            endpoints = json.loads(path.read_text())
        else:
            raise ConfigError(f"endpoints file {path} must end in .py, .toml or .json")
    except ConfigError:
        raise
    except Exception as err:  # a user's file: any failure to read it is bad input
        detail = " ".join(str(err).split())
        raise ConfigError(
            f"cannot read endpoints file {path}: {type(err).__name__}: {detail}", hint="fix the file"
        ) from None
    return _validate_endpoints(path, endpoints)


def _validate_endpoints(path: Path, endpoints: Any) -> dict[str, dict[str, Any]]:
    """Check every entry and return them with one spelling: ``{"model"?, "url", "key"? | "api_key"?}``.

    A broken file (not a mapping) fails at once; a broken *entry* fails only when it is used
    (``resolve_endpoint``), so one endpoint whose key is unset (``api_key=os.getenv("X")`` with
    ``$X`` unset: ``None``) does not break every other alias of the file. Such an entry is kept
    as ``{_ERROR_KEY: ConfigError}``, or with ``_UNSET_KEY`` for a ``None`` api_key.
    """
    example = '{"alias": {"model": "...", "url": "https://...", "key": "ENV_VAR"}}'
    if not isinstance(endpoints, dict):
        raise ConfigError(
            f"endpoints in {path} must be a mapping of alias to endpoint", hint=f"e.g. {example}"
        )
    out: dict[str, dict[str, Any]] = {}
    for alias, entry in endpoints.items():
        try:
            out[str(alias)] = _check_entry(path, str(alias), entry, example)
        except ConfigError as err:
            out[str(alias)] = {_ERROR_KEY: err}
    return out


_ERROR_KEY = "__error__"  # an entry that fails when used
_UNSET_KEY = "__api_key_unset__"  # api_key=None in the file: os.getenv(...) of an unset variable


def _check_entry(path: Path, alias: str, entry: Any, example: str) -> dict[str, Any]:
    fix = (
        "each endpoint has: url (or base_url), and optionally model (default: the alias) and "
        "key (the name of the env var holding the API key) or api_key (the key itself)"
    )
    if not isinstance(entry, dict):
        raise ConfigError(f"endpoint '{alias}' in {path} must be a mapping", hint=f"e.g. {example}")
    unknown = sorted(entry.keys() - _ENDPOINT_KEYS)
    if unknown:
        raise ConfigError(f"endpoint '{alias}' in {path} has unknown key(s) {', '.join(unknown)}", hint=fix)
    for a, b in (("url", "base_url"), ("key", "api_key")):
        if a in entry and b in entry:
            raise ConfigError(f"endpoint '{alias}' in {path} sets both {a} and {b}", hint=f"keep one: {fix}")
    if "url" not in entry and "base_url" not in entry:
        raise ConfigError(f"endpoint '{alias}' in {path} lacks url", hint=fix)
    entry = dict(entry)
    unset = "api_key" in entry and entry["api_key"] is None
    if unset:
        del entry["api_key"]
    bad = [k for k in sorted(entry) if not isinstance(entry[k], str) or not entry[k]]
    if bad:
        raise ConfigError(f"endpoint '{alias}' in {path}: {', '.join(bad)} must be non-empty strings")
    normal: dict[str, Any] = {("url" if k == "base_url" else k): v for k, v in entry.items()}
    if unset:
        normal[_UNSET_KEY] = (
            f"endpoint '{alias}' in {path} has api_key=None: the variable its os.getenv(...) reads is unset"
        )
    return normal


def resolve_endpoint(
    model: str | None, base_url: str | None, key_var: str | None, endpoints_path: str | None
) -> Endpoint:
    """The endpoint for ``-m``: an alias from the endpoints file, its ``default`` entry, or the name itself.

    ``model`` None means ``-m`` was not given: the ``default`` entry's model, else
    :data:`DEFAULT_MODEL`. An explicit ``-b`` / ``-k`` wins over the file.
    """
    path = Path(endpoints_path) if endpoints_path else DEFAULT_ENDPOINTS
    # The default file is optional; a file named with -e must exist.
    endpoints = load_endpoints(path) if endpoints_path or path.is_file() else {}
    entry = endpoints.get(model) if model is not None else None
    if entry is not None:
        _usable(entry)
        model = entry.get("model", model)
    else:
        entry = endpoints.get(DEFAULT_ALIAS, {})
        _usable(entry)
        model = model or entry.get("model") or DEFAULT_MODEL
    base_url = (base_url or entry.get("url") or DEFAULT_BASE_URL).rstrip("/")
    if urlparse(base_url).scheme not in ("http", "https") or not urlparse(base_url).netloc:
        raise ConfigError(
            f"base URL {base_url!r} is not an http(s) URL", hint="e.g. -b http://127.0.0.1:8000/v1"
        )
    api_key = None if key_var else entry.get("api_key")
    if not key_var and entry.get(_UNSET_KEY) and not is_loopback(base_url):
        raise ConfigError(entry[_UNSET_KEY], hint="export that variable, or name one with -k")
    return Endpoint(model, base_url, key_var or entry.get("key") or DEFAULT_KEY_VAR, api_key)


def _usable(entry: dict[str, Any]) -> None:
    """Raise the error of an entry that is broken (found when the file was read, raised when used)."""
    if _ERROR_KEY in entry:
        raise entry[_ERROR_KEY]


def is_loopback(url: str) -> bool:
    host = (urlparse(url).hostname or "").lower()
    return host in _LOOPBACK_HOSTS or host.startswith("127.")


def resolve_api_key(key_var: str, base_url: str) -> str:
    """The API key from ``$key_var``; a local server gets the dummy ``EMPTY`` when it is unset."""
    key = os.environ.get(key_var)
    if key:
        return key
    if is_loopback(base_url):
        return "EMPTY"
    raise ConfigError(
        f"environment variable {key_var} is not set (needed for {base_url})",
        hint=f"export {key_var}=<your key>, or name another variable with -k",
    )


def check_endpoint(base_url: str, api_key: str, key_var: str) -> None:
    """Fail fast, before any rollout, if nothing answers at ``base_url`` or the key is refused.

    One ``GET /models`` without retries: a refused connection or a 401 is a
    setup mistake worth one clear line, not hundreds of failed rollouts. Any
    other answer (a server without ``/models``) is fine.
    """
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=15.0)
    try:
        client.models.list()
    except openai.APITimeoutError:
        return  # slow, but there: let the real requests decide
    except openai.APIConnectionError:
        raise ServerUnreachableError(
            f"cannot connect to {base_url}",
            hint="start the server or fix -b/--api-base-url",
            url=base_url,
        ) from None
    except openai.AuthenticationError:
        raise ConfigError(
            f"{base_url} rejected the API key from ${key_var} (401)",
            hint="check the key, or pick the variable with -k",
        ) from None
    except openai.APIError:
        return
    finally:
        client.close()
