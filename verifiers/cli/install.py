"""``vf-install NAME``: ``pip install -e`` an environment package from ``./environments``.

    vf-install my-env               # pip install -e ./environments/my_env
    vf-install my-env --no-deps     # when its dependencies are already there
    vf-install primeintellect/reverse-text   # hub-style id: the folder of that name
    vf-install math-python --from-repo       # a bundled one only (0.1.x names "vf-math-python" too)

Hub-style ids (``owner/name``, ``owner/name@version``) name the same folder as
``name``: nothing is downloaded. Without a folder, the bundled environments of a
source checkout are looked at next; an environment that is already installed is
reported as such (exit 0), and anything else fails with the command that installs it.

``--from-repo`` (the guides' way to install "an existing Environment from this
repo") looks only at the environments bundled with verifiers, i.e. the
``environments/`` folder of the source checkout this verifiers runs from, and takes
their 0.1.x names (``"vf-math-python"`` is ``math-python``). Nothing is downloaded:
an installation without that folder (a wheel) fails in one line that says so.

pip runs with the interpreter that runs this command (``sys.executable -m
pip``), so the environment lands in the same virtual environment as
verifiers, whichever ``pip`` is first on ``PATH``. Its output goes to a log file
(``$TMPDIR/vf-install-<folder>.log``); the console gets one line as pip starts, one
every 15 s while it runs, one when it ends, and the log's last lines if it fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from verifiers.cli.common import CLIParser, run_parsed
from verifiers.cli.progress import Heartbeat
from verifiers.envs.loader import (
    check_env_version,
    env_name,
    installed_version,
    legacy_alias,
    module_name_for,
    split_env_id,
)
from verifiers.errors import ConfigError, VerifiersError

DEFAULT_PATH = "./environments"
LOG_TAIL_LINES = 20  # of pip's output, printed when it fails
# The environments shipped beside the package in a source checkout (absent in a wheel install).
BUNDLED_DIR = Path(__file__).resolve().parents[2] / "environments"


class FolderNotFoundError(ConfigError):
    """No package folder for the environment (as opposed to a folder pip cannot install)."""


def build_parser() -> argparse.ArgumentParser:
    p = CLIParser(prog="vf-install", description="Install an environment package in editable mode.")
    p.add_argument("name", help="environment id, e.g. my-env (folder my_env) or owner/my-env[@version]")
    p.add_argument("--path", "-p", default=None, help=f"parent folder (default {DEFAULT_PATH})")
    p.add_argument("--no-deps", action="store_true", help="do not install the package's dependencies")
    p.add_argument(
        "--from-repo",
        action="store_true",
        help="install one of the environments bundled with verifiers (its checkout's environments/ "
        "folder), by name or 0.1.x name ('vf-math-python'); nothing is downloaded",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``vf-install``; returns the exit status."""
    return run_parsed(build_parser, _run, argv)


def _run(args: argparse.Namespace) -> int:
    if args.from_repo:
        if args.path is not None:
            raise ConfigError("--from-repo and --path name two places", hint="give one of them")
        folder = bundled_environment_folder(args.name)
        check_folder_version(args.name, folder)
        install_environment(folder, no_deps=args.no_deps)
        print(f"installed environment '{args.name}' from {folder}")
        return 0
    try:
        folder = find_environment_folder(args.name, args.path)
    except FolderNotFoundError:
        if args.path is None and _already_installed(args.name):
            return 0
        raise
    check_folder_version(args.name, folder)
    install_environment(folder, no_deps=args.no_deps)
    print(f"installed environment '{args.name}' from {folder}")
    return 0


def _already_installed(env_id: str) -> bool:
    """Say so and return True when ``env_id``'s module is importable already (version checked)."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module_name_for(env_id)) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return False
    check_env_version(env_id)
    name = env_name(env_id)
    version = installed_version(name)
    print(
        f"environment '{env_id}' is already installed ({name}{' ' + version if version else ''}); nothing to do"
    )
    return True


def find_environment_folder(env_id: str, path: str | Path | None = None) -> Path:
    """The package folder for ``env_id``: ``<path>/<name with - -> _>``, or ``<path>/<name>``.

    ``env_id`` may be hub-style (``owner/name@version``): only ``name`` counts. With
    no ``path``, ``./environments`` and then the checkout's bundled environments are searched.
    """
    name = env_name(env_id)
    if not name or "/" in name:
        raise ConfigError(
            f"'{env_id}' is not an environment id", hint="write it as name, owner/name or owner/name@version"
        )
    parents = [Path(path)] if path is not None else [Path(DEFAULT_PATH), BUNDLED_DIR]
    candidates = [
        p / n for p in dict.fromkeys(parents) for n in dict.fromkeys((name.replace("-", "_"), name))
    ]
    for folder in candidates:
        if folder.is_dir():
            if not ((folder / "pyproject.toml").is_file() or (folder / "setup.py").is_file()):
                raise ConfigError(
                    f"{folder} has no pyproject.toml or setup.py, so pip cannot install it",
                    hint=f"recreate it with vf-init {name} --force",
                )
            return folder
    if "/" in env_id:  # a hub id: there is no hub to fetch from
        raise FolderNotFoundError(
            f"environment '{env_id}' is neither installed nor in {candidates[0].parent}/ "
            "(hub ids resolve offline; nothing is downloaded)",
            hint=f"pip install {name}, or put its package folder at {candidates[0]}",
        )
    raise FolderNotFoundError(
        f"no environment folder {candidates[0]}",
        hint=f"create it with vf-init {name}, or point --path at the folder that holds it",
    )


def bundled_environment_folder(env_id: str, bundled: Path | None = None) -> Path:
    """The folder of a bundled environment (``--from-repo``), by name or 0.1.x name (``vf-NAME``)."""
    bundled = BUNDLED_DIR if bundled is None else bundled
    if not bundled.is_dir():
        raise FolderNotFoundError(
            f"--from-repo installs from the environments/ folder of a verifiers source checkout, and this "
            f"installation has none ({bundled}); nothing is downloaded",
            hint=f"run vf-install from a clone of the verifiers repository, or pip install {env_name(env_id)}",
        )
    names = [env_id] + ([alias] if (alias := legacy_alias(env_id)) else [])
    for name in names:
        try:
            return find_environment_folder(name, bundled)
        except FolderNotFoundError:
            continue
    available = sorted(
        p.name.replace("_", "-") for p in bundled.iterdir() if (p / "pyproject.toml").is_file()
    )
    raise FolderNotFoundError(
        f"no bundled environment '{env_id}' in {bundled}",
        hint=f"use one of: {', '.join(available)}",
    )


def check_folder_version(env_id: str, folder: Path) -> None:
    """Refuse ``owner/name@version`` when the folder's package declares another version."""
    wanted = split_env_id(env_id)[2]
    pyproject = folder / "pyproject.toml"
    if wanted in (None, "latest") or not pyproject.is_file():
        return
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        version = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("version")
    except tomllib.TOMLDecodeError:
        return  # pip reports the broken file itself
    if version is not None and str(version) != wanted:
        raise ConfigError(
            f"environment '{env_id}' asks for version {wanted}, but {folder} holds version {version}",
            hint=f"write the id as {env_name(env_id)} to install {version}, or put version {wanted} there",
        )


def install_log_path(folder: Path) -> Path:
    """Where pip's output for ``folder`` goes: the temp folder, one file per environment, replaced
    by the next install of it."""
    return Path(tempfile.gettempdir()) / f"vf-install-{folder.resolve().name}.log"


def install_environment(folder: Path, no_deps: bool = False) -> None:
    """Run ``python -m pip install -e folder``; raise ``VerifiersError`` if pip fails.

    Prints a line when pip starts, one every 15 s while it runs and one when it ends;
    pip's own output goes to :func:`install_log_path`, whose last lines are printed
    if it fails (they are the explanation; the error line names the file).
    """
    cmd = [sys.executable, "-m", "pip", "install", "-e", str(folder.resolve())]
    if no_deps:
        cmd.append("--no-deps")
    log_path = install_log_path(folder)
    print(f"[vf-install] pip install -e {folder}{' --no-deps' if no_deps else ''} (pip's output: {log_path})")
    sys.stdout.flush()

    def still(seconds: float) -> None:
        print(f"[vf-install]   still installing ({seconds:.0f} s)", flush=True)

    with log_path.open("w", encoding="utf-8") as log, Heartbeat(still) as beat:
        log.write("running: " + " ".join(cmd) + "\n")
        log.flush()
        status = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT)
    seconds = beat.elapsed
    if status != 0:
        print(f"[vf-install] pip failed after {seconds:.1f} s; last lines of {log_path}:")
        lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        print("\n".join("    " + line for line in lines[-LOG_TAIL_LINES:]), flush=True)
        raise VerifiersError(
            f"pip install -e {folder} failed with exit status {status}",
            hint=f"pip's last lines are above; its full output: {log_path}",
        )
    print(f"[vf-install] pip done in {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
