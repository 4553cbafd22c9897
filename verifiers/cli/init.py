"""``vf-init NAME``: create an installable environment package from the templates.

    vf-init my-env                  # -> ./environments/my_env/{pyproject.toml, my_env.py, README.md}
    vf-install my-env               # then install it, and vf-eval my-env

The package is named ``NAME``; its single module is ``NAME`` with ``-`` -> ``_``,
which is what ``vf.load_environment("NAME")`` imports. An existing folder is
never overwritten unless ``--force`` is given.
"""

from __future__ import annotations

import argparse
import keyword
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from string import Template

from verifiers.cli.common import CLIParser, run_parsed
from verifiers.errors import ConfigError

TEMPLATES_DIR = Path(__file__).parent / "templates"
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
# Names that would shadow something every environment imports.
_RESERVED = {"verifiers", "datasets", "openai", "test", "tests"}


def build_parser() -> argparse.ArgumentParser:
    p = CLIParser(prog="vf-init", description="Create a new environment package.")
    p.add_argument("name", help="environment id, e.g. my-env (module my_env)")
    p.add_argument("--path", "-p", default="./environments", help="parent folder (default ./environments)")
    p.add_argument("--force", action="store_true", help="overwrite the files of an existing folder")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``vf-init``; returns the exit status."""
    return run_parsed(build_parser, _run, argv)


def _run(args: argparse.Namespace) -> int:
    folder = init_environment(args.name, args.path, force=args.force)
    print(f"created environment '{args.name}' in {folder}")
    print(f"next: vf-install {args.name} --path {args.path}   then: vf-eval {args.name}")
    return 0


def validate_name(name: str) -> str:
    """Check ``name`` can be a package name and its module name; return the module name."""
    if not _NAME.match(name):
        raise ConfigError(
            f"'{name}' is not a valid environment name",
            hint="use letters, digits, '-' and '_', starting with a letter (e.g. my-env)",
        )
    module = name.replace("-", "_")
    if keyword.iskeyword(module) or module in _RESERVED or module in sys.stdlib_module_names:
        raise ConfigError(
            f"'{name}' would create a module '{module}' that shadows an existing one",
            hint="pick a more specific name, e.g. my-" + name,
        )
    return module


def render_files(name: str) -> dict[str, str]:
    """File name -> content of the new package."""
    module = validate_name(name)
    values = {"name": name, "module": module, "title": name.replace("-", " ").replace("_", " ").title()}
    sources = {
        "pyproject.toml": "pyproject.toml.tmpl",
        f"{module}.py": "environment.py.tmpl",
        "README.md": "README.md.tmpl",
    }
    files = {}
    for target, template in sources.items():
        path = TEMPLATES_DIR / template
        if not path.is_file():
            raise ConfigError(f"vf-init template {path} is missing", hint="reinstall verifiers")
        files[target] = Template(path.read_text(encoding="utf-8")).substitute(values)
    return files


def init_environment(name: str, path: str | Path = "./environments", force: bool = False) -> Path:
    """Write the package for ``name`` under ``path``; return its folder.

    Raises ``ConfigError`` for an invalid name or an existing folder (unless ``force``).
    """
    files = render_files(name)
    folder = Path(path) / validate_name(name)
    if folder.exists() and not force:
        raise ConfigError(
            f"{folder} already exists", hint="pick another name, or pass --force to overwrite its files"
        )
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"{folder} exists and is not a folder", hint="remove it or pick another name")
    try:
        if folder.exists():  # --force: overwrite its files in place
            for filename, content in files.items():
                (folder / filename).write_text(content, encoding="utf-8")
        else:
            _write_new_folder(folder, files)
    except OSError as err:
        raise ConfigError(
            f"cannot write environment '{name}' into {folder}: {err.strerror or err}",
            hint="point --path at a writable folder with free space",
        ) from None
    return folder


def _write_new_folder(folder: Path, files: dict[str, str]) -> None:
    """Write ``files`` into a hidden sibling folder and rename it to ``folder`` at the end.

    On any failure nothing is left behind: neither a half-written package nor the
    parent folders this call created.
    """
    import shutil
    import uuid

    created = [p for p in (folder.parent, *folder.parent.parents) if not p.exists()]  # deepest first
    tmp = folder.parent / f".tmp-{folder.name}-{uuid.uuid4().hex[:8]}"
    try:
        tmp.mkdir(parents=True)
        for filename, content in files.items():
            (tmp / filename).write_text(content, encoding="utf-8")
        tmp.rename(folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        for parent in created:
            try:
                parent.rmdir()
            except OSError:
                break
        raise


if __name__ == "__main__":
    sys.exit(main())
