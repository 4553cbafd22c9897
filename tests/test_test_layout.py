"""The tests' own layout: no test module imports another; what several share lives in tests/doubles/.

Read with ``ast`` (nothing is imported). A test module (``test_*.py``) is run by pytest, never
imported: what test modules share is a double or helper in ``tests/doubles/`` (one module per
concept, each saying what it stands in for and which tier uses it), a fixture in the nearest
``conftest.py``, a program in ``tests/drivers/``, or a tier's own data (``tests/parity/``,
``tests/contract/``, ``tests/compat/``, ``tests/fixtures/``).

- ``test_no_test_module_imports_another``: no import of a test module, lazy or not, from any
  file under tests/; nor in the Python a test hands to a child process (``import tests.x`` or
  ``from tests.x import ...`` inside a string), but for the module importing itself.
- ``test_doubles_import_only_doubles``: tests/doubles/ sits below the tests and imports nothing
  else from them.
- ``test_each_double_says_what_it_stands_in_for_and_its_tier``: each has a docstring naming a tier.
- ``test_no_fixture_is_defined_twice``: no fixture with the same name, decorators and body in
  two files (one copy goes to the nearest common conftest.py).
"""

from __future__ import annotations

import ast
import collections
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
DOUBLES = TESTS / "doubles"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


FILES: dict[str, Path] = {module_name(p): p for p in sorted(TESTS.rglob("*.py"))}


def is_test_module(module: str) -> bool:
    return module.rpartition(".")[2].startswith("test_")


def _resolve(base: str, names: list[str]) -> list[str]:
    """``from base import a, b``: the modules imported (``base.a`` where that is a file, else ``base``)."""
    return [f"{base}.{n}" if f"{base}.{n}" in FILES else base for n in names]


def imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """(imported tests module, line) for each import statement of ``path``, lazy ones included."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            targets = _resolve(base, [alias.name for alias in node.names])
        else:
            continue
        for target in targets:
            if target.split(".")[0] == "tests":
                yield target, node.lineno


# An import statement at the start of a line of a child's source held in a string.
CHILD_IMPORT = re.compile(
    r"^[ \t]*(?:from[ \t]+(tests(?:\.\w+)+)[ \t]+import[ \t]+([\w, \t]+)|import[ \t]+(tests(?:\.\w+)+))", re.M
)


def child_imports(path: Path) -> Iterator[tuple[str, int]]:
    """(imported tests module, line) for each import in a string constant (a child's source)."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            for m in CHILD_IMPORT.finditer(node.value):
                if m.group(1):
                    names = [n.strip() for n in m.group(2).split(",") if n.strip()]
                    targets = _resolve(m.group(1), names)
                else:
                    targets = [m.group(3)]
                for target in targets:
                    yield target, node.lineno


def test_no_test_module_imports_another():
    found = [
        f"{path.relative_to(ROOT)} (line {line}): {how} {target}"
        for module, path in FILES.items()
        for how, found_imports in (
            ("imports", imports(module, path)),
            ("a child imports", child_imports(path)),
        )
        for target, line in found_imports
        if is_test_module(target) and target != module
    ]
    assert not found, (
        "a test module imported elsewhere (move what is shared to tests/doubles/ or a conftest.py):\n"
        + "\n".join(found)
    )


def test_doubles_import_only_doubles():
    found = [
        f"{path.relative_to(ROOT)} (line {line}): imports {target}"
        for module, path in FILES.items()
        if path.is_relative_to(DOUBLES)
        for target, line in imports(module, path)
        if not (target == "tests.doubles" or target.startswith("tests.doubles."))
    ]
    assert not found, "\n".join(found)


def test_each_double_says_what_it_stands_in_for_and_its_tier():
    doubles = [p for p in sorted(DOUBLES.glob("*.py")) if p.name != "__init__.py"]
    assert doubles
    missing = [
        p.name
        for p in doubles
        if "tier" not in (ast.get_docstring(ast.parse(p.read_text(encoding="utf-8"))) or "").lower()
    ]
    assert not missing, (
        f"a double's docstring must say what it stands in for and which tier uses it: {missing}"
    )


def test_no_fixture_is_defined_twice():
    copies: dict[tuple[str, str, str], list[str]] = collections.defaultdict(list)
    for path in FILES.values():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            decorators = [ast.unparse(d) for d in node.decorator_list]
            if any("fixture" in d for d in decorators):
                body = ast.unparse(ast.Module(body=node.body, type_ignores=[]))
                copies[(node.name, "\n".join(decorators), body)].append(str(path.relative_to(ROOT)))
    twice = {key[0]: paths for key, paths in copies.items() if len(paths) > 1}
    assert not twice, f"the same fixture in several files (keep one, in the nearest conftest.py): {twice}"
