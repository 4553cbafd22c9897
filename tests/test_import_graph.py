"""The package's imports run one way: no cycle, and training's stages in their order.

Read from the source with ``ast`` (nothing is imported). An import counts where it is
written: at module level, in a class body, or under ``if TYPE_CHECKING:`` (a real design
dependency even when it costs nothing at run time) is a *module-level* import; one inside
a function is *lazy*. The implicit import of a parent package is not counted.

- No cycle among module-level imports (``test_no_import_cycle``).
- Lazy imports defer a cost, they do not excuse a cycle: the graph of every import has
  none either, but for ``KNOWN_LAZY_CYCLES`` (being redesigned; the test fails once one is
  gone, so that the list only shrinks).
- Every import, lazy or not, goes down the layers or stays in its layer
  (``test_imports_follow_the_layers``): the rest of the package <- training's config <- its
  stages <- trainer.py <- rl <- cli, with the exceptions in ``ALLOWED``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "verifiers"

# (module prefix, layer); the longest prefix that matches wins. Everything else in
# verifiers/ (types, errors, envs, parsers, rubrics, tokenization, inference, utils, models,
# compat, ...) is layer 0: it never imports training or the cli.
LAYERS: dict[str, int] = {
    "verifiers.training.config": 1,
    "verifiers.training.generation": 2,
    "verifiers.training.batch": 2,
    "verifiers.training.loss": 2,
    "verifiers.training.weights": 2,
    "verifiers.training.lifecycle": 2,
    "verifiers.training.metrics": 2,
    "verifiers.training.trainer": 3,
    "verifiers.training.rl": 4,
    "verifiers.training": 4,  # the package's __init__: its public names, from every layer
    "verifiers.cli": 5,
}
FACADE = "verifiers"
"""The top-level ``__init__``: every public name, so the layer of the cli (entry points may use it)."""
FACADE_LAYER = 5

# (importer prefix, imported module): a dependency that crosses the layers on purpose.
ALLOWED: dict[tuple[str, str], str] = {}

# Being redesigned in this change (issue 24): the lead removes each entry as it is fixed.
KNOWN_LAYER_BREAKS: set[tuple[str, str]] = set()
KNOWN_LAZY_CYCLES: list[set[str]] = []


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    lazy: bool

    def __str__(self) -> str:
        where = self.importer.replace(".", "/")
        kind = "lazy import" if self.lazy else "import"
        return f"{where} (line {self.line}): {kind} of {self.imported}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _owner(dotted: str) -> str:
    """The module a dotted name lives in: itself if it is a module, else its longest module prefix."""
    while dotted and dotted not in MODULES:
        dotted = dotted.rpartition(".")[0]
    return dotted


def _imports(module: str, path: Path) -> Iterator[Import]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def walk(node: ast.AST, lazy: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            targets: list[str] = []
            if isinstance(child, ast.Import):
                targets = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.rsplit(".", child.level - 1)[0] if child.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                # `from pkg import mod` imports the module pkg.mod; `from mod import name`, mod.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in child.names]
            for target in targets:
                owner = _owner(target) if target.split(".")[0] == "verifiers" else ""
                if owner and owner != module:
                    yield Import(module, owner, child.lineno, inner)
            yield from walk(child, inner)

    yield from walk(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)


IMPORTS: list[Import] = [imp for m, p in MODULES.items() for imp in _imports(m, p)]


def _cycles(edges: list[Import]) -> list[list[str]]:
    """Each strongly connected component of more than one module, as a sorted list (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        graph.setdefault(e.importer, set()).add(e.imported)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _explain(cycle: list[str], edges: list[Import]) -> str:
    inside = list(dict.fromkeys(str(e) for e in edges if e.importer in cycle and e.imported in cycle))
    return "cycle among " + ", ".join(cycle) + ":\n  " + "\n  ".join(inside)


def layer(module: str) -> int:
    if module == FACADE:
        return FACADE_LAYER
    matches = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    return LAYERS[max(matches, key=len)] if matches else 0


# -- the tests ----------------------------------------------------------------------------------


def test_the_walk_sees_the_imports_it_must():
    """Guards the parser: known imports of each kind are found, with the right kind."""
    by_pair = {(i.importer, i.imported): i for i in IMPORTS}
    eager = by_pair[("verifiers.training.trainer", "verifiers.training.weights.sync")]
    lazy = by_pair[("verifiers.cli.vllm", "verifiers.inference.server.main")]
    assert not eager.lazy and lazy.lazy
    assert ("verifiers.cli.rl", "verifiers.cli.rl.plan") in by_pair  # `from pkg.mod import name`
    assert not any(i.importer == i.imported for i in IMPORTS)
    assert len(MODULES) > 100 and len(IMPORTS) > 300


def test_no_import_cycle():
    module_level = [i for i in IMPORTS if not i.lazy]
    cycles = _cycles(module_level)
    assert not cycles, "\n".join(_explain(c, module_level) for c in cycles)


def test_no_import_cycle_even_through_lazy_imports():
    cycles = _cycles(IMPORTS)
    new = [c for c in cycles if set(c) not in KNOWN_LAZY_CYCLES]
    assert not new, "\n".join(_explain(c, IMPORTS) for c in new)
    gone = [sorted(k) for k in KNOWN_LAZY_CYCLES if sorted(k) not in cycles]
    assert not gone, f"no longer a cycle, remove from KNOWN_LAZY_CYCLES: {gone}"


def test_every_training_module_is_in_a_stage():
    """A new module under training/ goes into a stage package (or is trainer.py), so it has a layer."""
    loose = [
        m
        for m in MODULES
        if m.startswith("verifiers.training.")
        and max((p for p in LAYERS if m == p or m.startswith(p + ".")), key=len) == "verifiers.training"
    ]
    assert not loose, (
        f"put these in a stage package of verifiers/training/ (and in docs/architecture.md): {loose}"
    )


def test_imports_follow_the_layers():
    breaks = {}
    for imp in IMPORTS:
        if layer(imp.imported) <= layer(imp.importer):
            continue
        if any(imp.importer.startswith(p) and imp.imported == m for p, m in ALLOWED):
            continue
        breaks.setdefault((imp.importer, imp.imported), imp)
    new = [str(i) for pair, i in sorted(breaks.items()) if pair not in KNOWN_LAYER_BREAKS]
    assert not new, (
        "imports against the layers (the rest <- training.config <- training stages <- trainer <- rl <- cli):\n  "
        + "\n  ".join(new)
    )
    gone = sorted(KNOWN_LAYER_BREAKS - set(breaks))
    assert not gone, f"fixed, remove from KNOWN_LAYER_BREAKS: {gone}"


def test_inference_and_the_rest_never_import_training_or_the_cli():
    """The layer-0 packages, spelled out (the layer test covers them; this names the rule users rely on)."""
    for imp in IMPORTS:
        if layer(imp.importer) == 0 and imp.imported != "verifiers.training.weights.names":
            assert layer(imp.imported) == 0, str(imp)
