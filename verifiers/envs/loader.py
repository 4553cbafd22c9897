"""``vf.load_environment``: turn an environment id into an ``Environment``.

An environment is an installed Python module (usually its own package built
with ``vf-init`` / ``vf-install``) whose ``load_environment(**kwargs)`` returns a
``vf.Environment``. The id maps to the module name with ``-`` -> ``_``, so
``reverse-text`` imports ``reverse_text``. Hub-style ids, as guides and configs
written for an environment hub spell them (``primeintellect/reverse-text``,
``primeintellect/reverse-text@0.1.0``), resolve offline to the installed package of
that name: the ``owner/`` prefix is dropped, and a ``@version`` must match the
installed version (a different one is refused, never silently substituted).
The 0.1.x names of the bundled environments (``"vf-math-python"``, as the guides'
``vf-install`` line spells them) resolve to the environment
without the ``vf-`` prefix when no module of the prefixed name exists.
Nothing is downloaded.

The checks here exist to turn the common mistakes into one-line errors that say
what to do: an id that is not installed (often: created but never installed),
an argument the environment does not take (listing the ones it does), or a
loader that returns something else. Errors raised *inside* the environment's
own code are never hidden behind "not found".
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import keyword
import logging
import re
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from verifiers.errors import ConfigError, EnvironmentArgsError, EnvironmentNotFoundError

if TYPE_CHECKING:  # pragma: no cover
    from verifiers.envs.environment import Environment

LOCAL_ENVIRONMENTS_DIR = Path("environments")
"""Where ``vf-init`` puts new environments, relative to the working directory."""

_ACTIVATED_PTH: set[str] = set()
logger = logging.getLogger(__name__)

# owner/name@version: each part without '/' or '@'; the name itself is checked as a module name later.
_HUB_ID = re.compile(r"^(?:(?P<owner>[^/@\s]+)/)?(?P<name>[^/@\s]+)(?:@(?P<version>[^/@\s]+))?$")


def split_env_id(env_id: str) -> tuple[str | None, str, str | None]:
    """``(owner, name, version)`` of an id: ``primeintellect/reverse-text@0.1.0`` -> the three parts.

    A plain id (``reverse-text``) has neither owner nor version. An id that does
    not have this form is returned whole as the name, for the caller's own check
    to refuse.
    """
    text = env_id.strip()
    match = _HUB_ID.match(text)
    if match is None:
        return None, text, None
    return match["owner"], match["name"], match["version"]


def env_name(env_id: str) -> str:
    """The environment's own name in an id (``primeintellect/reverse-text@0.1.0`` -> ``reverse-text``)."""
    return split_env_id(env_id)[1]


def module_name_for(env_id: str) -> str:
    """The module name an environment id imports (``reverse-text`` or ``owner/reverse-text`` -> ``reverse_text``)."""
    return env_name(env_id).replace("-", "_")


LEGACY_PREFIX = "vf-"
"""The prefix of the 0.1.x bundled environments' package names (``"vf-math-python"``)."""


def legacy_alias(env_id: str) -> str | None:
    """The id without the 0.1.x ``vf-`` prefix (``"vf-math-python"`` -> ``"math-python"``), or None."""
    owner, name, version = split_env_id(env_id)
    for prefix in (LEGACY_PREFIX, LEGACY_PREFIX.replace("-", "_")):
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix) :] + (f"@{version}" if version else "")
    return None


def install_hint(env_id: str) -> str:
    """How to install the environment an id names (the fix in every "not installed" message)."""
    name = env_name(env_id)
    local = LOCAL_ENVIRONMENTS_DIR / name.replace("-", "_")
    if local.is_dir():
        return f"run vf-install {name}"
    return f"install its package (pip install {name}, or vf-install {name} for ./environments/), or create one with vf-init {name}"


def load_environment(env_id: str, **env_args: Any) -> Environment:
    """Import the environment module for ``env_id`` and call its ``load_environment(**env_args)``.

    Raises:
        EnvironmentNotFoundError: no module for ``env_id`` can be imported, or the
            module itself failed to import (e.g. a missing dependency, named).
        EnvironmentArgsError: ``env_args`` holds an argument the loader does not
            accept, or misses one it requires.
        ConfigError: the module has no ``load_environment``, or it returned
            something that is not a ``vf.Environment``.
    """
    module = _import_env_module(env_id)
    check_env_version(env_id)
    loader = getattr(module, "load_environment", None)
    if not callable(loader):
        raise ConfigError(
            f"environment module '{module.__name__}' has no load_environment function",
            hint="define `def load_environment(**kwargs) -> vf.Environment` in it",
        )
    check_env_args(env_id, loader, env_args)
    env = loader(**env_args)

    from verifiers.envs.environment import Environment

    if not isinstance(env, Environment):
        raise ConfigError(
            f"load_environment of '{env_id}' returned {type(env).__name__}, not a vf.Environment",
            hint="return an Environment such as vf.SingleTurnEnv(...) from it",
        )
    # 0.1.6+: the environment knows how it was loaded (scripts and reports read these).
    env.env_id, env.env_args = env_id, dict(env_args)
    return env


def check_env_version(env_id: str) -> None:
    """Refuse ``name@version`` when the installed package of that name has another version.

    ``@latest`` (or no version) takes what is installed. When the installed
    version cannot be read (a module on ``sys.path``, not a package), one
    warning says the version was not checked.
    """
    _, name, wanted = split_env_id(env_id)
    if wanted is None or wanted == "latest":
        return
    installed = installed_version(name)
    if installed is None:
        logger.warning(
            "environment '%s': no installed package named %s to compare with version %s; "
            "using the importable module %s as it is",
            env_id,
            name,
            wanted,
            module_name_for(env_id),
        )
        return
    if installed != wanted:
        raise EnvironmentNotFoundError(
            f"environment '{env_id}' asks for version {wanted}, but {name} {installed} is installed",
            hint=f"install that version (pip install {name}=={wanted}), or write the id as {name} to use {installed}",
        )


def installed_version(name: str) -> str | None:
    """The version of the installed distribution ``name`` (or its ``_`` spelling), or None."""
    for dist in dict.fromkeys((name, name.replace("-", "_"), name.replace("_", "-"))):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _import_env_module(env_id: str) -> ModuleType:
    """Import the module for ``env_id``, telling "not installed" apart from "broke while importing"."""
    module_name = module_name_for(env_id)
    if not module_name.isidentifier() or keyword.iskeyword(module_name):
        raise EnvironmentNotFoundError(
            f"'{env_id}' is not a valid environment id",
            hint="use letters, digits, '-' and '_', starting with a letter (e.g. reverse-text), "
            "optionally as owner/name or owner/name@version",
        )
    for attempt in range(2):
        try:
            return importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:
                # The module was found, but something it imports is missing: say
                # which, instead of claiming the environment does not exist.
                raise _import_failure(env_id, module_name, err) from err
            if attempt == 0:  # maybe installed after start-up: refresh the import system, retry once
                _activate_new_install(module_name)
                continue
            alias = legacy_alias(env_id)
            if alias is not None:  # "vf-math-python": the bundled math-python under its 0.1.x name
                try:
                    return _import_env_module(alias)
                except EnvironmentNotFoundError:
                    pass
            raise _not_found(env_id, module_name) from None
        except ImportError as err:
            raise _import_failure(env_id, module_name, err) from err
    raise AssertionError("unreachable")  # pragma: no cover


def _activate_new_install(module_name: str) -> None:
    """Make a package pip-installed after this interpreter started importable.

    ``vf-install`` in a notebook (``!vf-install my-env``) writes an editable
    install's ``__editable__.<name>-<version>.pth`` file, but ``.pth`` files are
    read only at interpreter start-up. Processing just that package's file, as
    ``site`` would have, lets ``load_environment`` find it without a restart.
    """
    import site
    import sys

    importlib.invalidate_caches()  # finders cache directory listings
    dirs = [*site.getsitepackages(), site.getusersitepackages()] if hasattr(site, "getsitepackages") else []
    for sitedir in dict.fromkeys(d for d in dirs if Path(d).is_dir()):
        for pth in sorted(Path(sitedir).glob(f"__editable__.{module_name}-*.pth")):
            if str(pth) in _ACTIVATED_PTH:  # never install the same finder twice
                continue
            _ACTIVATED_PTH.add(str(pth))
            for line in pth.read_text(encoding="utf-8").splitlines():
                line = line.strip()
                if line.startswith(("import ", "import\t")):
                    exec(line, {})  # what site.py does with such lines: installs the finder
                elif line and not line.startswith("#") and line not in sys.path:
                    sys.path.append(line)
    importlib.invalidate_caches()


def _not_found(env_id: str, module_name: str) -> EnvironmentNotFoundError:
    local = LOCAL_ENVIRONMENTS_DIR / module_name
    # Hub ids are resolved offline: say so, so nobody waits for a download that never happens.
    offline = " (hub ids resolve to installed packages only; nothing is downloaded)" if "/" in env_id else ""
    if local.is_dir():
        return EnvironmentNotFoundError(
            f"environment '{env_id}' is not installed (module '{module_name}' not importable), "
            f"but {local}/ exists",
            hint=install_hint(env_id),
        )
    return EnvironmentNotFoundError(
        f"environment '{env_id}' not found: no module named '{module_name}'{offline}",
        hint=install_hint(env_id),
    )


def _import_failure(env_id: str, module_name: str, err: ImportError) -> EnvironmentNotFoundError:
    missing = getattr(err, "name", None)
    if isinstance(err, ModuleNotFoundError) and missing:
        top = missing.split(".")[0]
        new = EnvironmentNotFoundError(
            f"environment '{env_id}' failed to import: its module '{module_name}' needs "
            f"'{missing}', which is not installed",
            hint=f"install the environment's dependencies (e.g. pip install {top}, or vf-install {env_name(env_id)})",
        )
    else:
        new = EnvironmentNotFoundError(
            f"environment '{env_id}' failed to import: {err}",
            hint=f"fix the import in module '{module_name}' or install what it needs",
        )
    # Keep ImportError's attributes so `except ModuleNotFoundError`-style
    # inspection (err.name) still tells which module was missing.
    new.name = missing
    return new


def check_env_args(env_id: str, loader: Any, env_args: dict[str, Any]) -> None:
    """Reject arguments ``loader`` does not accept, and required ones that are missing.

    A loader taking ``**kwargs`` accepts any argument name.
    """
    try:
        signature = inspect.signature(loader)
    except (TypeError, ValueError):  # builtins / C callables: nothing to check
        return
    params = signature.parameters.values()
    named = [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    if not takes_any:
        unknown = [name for name in env_args if name not in named]
        if unknown:
            accepted = ", ".join(named) if named else "none"
            raise EnvironmentArgsError(
                f"environment '{env_id}' got unknown argument(s): {', '.join(unknown)}; accepted: {accepted}",
                hint="fix the names in the environment arguments (vf-eval -a '{...}')",
            )
    missing = [
        p.name
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        and p.name not in env_args
    ]
    if missing:
        raise EnvironmentArgsError(
            f"environment '{env_id}' requires argument(s): {', '.join(missing)}",
            hint=f"""pass them as environment arguments, e.g. vf-eval ENV -a '{{"{missing[0]}": ...}}'""",
        )
    _check_arg_types(env_id, loader, env_args)


_TYPE_WORDS = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


def _simple_types(annotation: Any) -> tuple[type, ...] | None:
    """The plain types (bool, int, float, str, None) an annotation allows; None if it is anything richer."""
    import types
    import typing

    if annotation in _TYPE_WORDS or annotation is type(None):
        return (annotation,)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        parts = [_simple_types(a) for a in typing.get_args(annotation)]
        if any(p is None for p in parts):
            return None
        return tuple(t for p in parts for t in p)  # type: ignore[union-attr]
    return None


def _is_a(value: Any, tp: type) -> bool:
    if tp is type(None):
        return value is None
    if isinstance(value, bool):
        return tp is bool
    return isinstance(value, (int, float) if tp is float else tp)


def _check_arg_types(env_id: str, loader: Any, env_args: dict[str, Any]) -> None:
    """Reject a value whose type plainly contradicts the loader's annotation (``"5"`` for an ``int``).

    Only annotations made of bool/int/float/str/None are checked; an int is a valid
    float; a bool is not a valid int. Annotations that cannot be resolved are skipped.
    """
    import typing

    try:
        hints = typing.get_type_hints(loader)
    except Exception:  # noqa: BLE001 - an annotation we cannot resolve: nothing to check
        return
    for name, value in env_args.items():
        allowed = _simple_types(hints.get(name))
        if allowed is None:
            continue
        if not any(_is_a(value, tp) for tp in allowed):
            words = " or ".join(_TYPE_WORDS.get(tp, "None") for tp in allowed)
            raise EnvironmentArgsError(
                f"environment '{env_id}' argument {name} must be {words}, "
                f"got {value!r} ({type(value).__name__})",
                hint="fix its value in the environment arguments (vf-eval -a '{...}')",
            )
