"""``vf-install NAME``: ``pip install -e`` an environment package from ``./environments``.

    vf-install my-env               # pip install -e ./environments/my_env
    vf-install my-env --no-deps     # when its dependencies are already there

pip runs with the interpreter that runs this command (``sys.executable -m
pip``), so the environment lands in the same virtual environment as
verifiers, whichever ``pip`` is first on ``PATH``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from verifiers.cli.common import CLIParser, run_cli
from verifiers.errors import ConfigError, VerifiersError


def build_parser() -> argparse.ArgumentParser:
    p = CLIParser(prog="vf-install", description="Install an environment package in editable mode.")
    p.add_argument("name", help="environment id, e.g. my-env (folder my_env)")
    p.add_argument("--path", "-p", default="./environments", help="parent folder (default ./environments)")
    p.add_argument("--no-deps", action="store_true", help="do not install the package's dependencies")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``vf-install``; returns the exit status."""
    return run_cli(_run, argv)


def _run(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    folder = find_environment_folder(args.name, args.path)
    install_environment(folder, no_deps=args.no_deps)
    print(f"installed environment '{args.name}' from {folder}")
    return 0


def find_environment_folder(name: str, path: str | Path = "./environments") -> Path:
    """The package folder for ``name``: ``<path>/<name with - -> _>``, or ``<path>/<name>``."""
    parent = Path(path)
    candidates = [parent / name.replace("-", "_"), parent / name]
    for folder in candidates:
        if folder.is_dir():
            if not ((folder / "pyproject.toml").is_file() or (folder / "setup.py").is_file()):
                raise ConfigError(
                    f"{folder} has no pyproject.toml or setup.py, so pip cannot install it",
                    hint=f"recreate it with vf-init {name} --force",
                )
            return folder
    raise ConfigError(
        f"no environment folder {candidates[0]}",
        hint=f"create it with vf-init {name}, or point --path at the folder that holds it",
    )


def install_environment(folder: Path, no_deps: bool = False) -> None:
    """Run ``python -m pip install -e folder``; raise ``VerifiersError`` if pip fails."""
    cmd = [sys.executable, "-m", "pip", "install", "-e", str(folder.resolve())]
    if no_deps:
        cmd.append("--no-deps")
    print("running: " + " ".join(cmd), flush=True)
    # pip's own output goes straight to the terminal: it is the explanation
    # if something fails, and we add only one line.
    status = subprocess.call(cmd)
    if status != 0:
        raise VerifiersError(
            f"pip install -e {folder} failed with exit status {status}", hint="see pip's output above"
        )


if __name__ == "__main__":
    sys.exit(main())
