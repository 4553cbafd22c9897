"""The package's imports run one way: no cycle, and every package in its tier.

Read from the source with ``ast`` (nothing is imported). An import counts where it is
written: at module level, in a class body, or under ``if TYPE_CHECKING:`` (a real design
dependency even when it costs nothing at run time) is a *module-level* import; one inside
a function is *lazy*. The implicit import of a parent package is not counted.

- No cycle among module-level imports (``test_no_import_cycle``).
- Lazy imports defer a cost, they do not excuse a cycle: the graph of every import has
  none either, but for ``KNOWN_LAZY_CYCLES`` (being redesigned; the test fails once one is
  gone, so that the list only shrinks).
- ``TIERS`` orders the packages, lowest first. Every import, lazy or not, goes strictly
  down the tiers (``test_imports_go_down_the_tiers``): never up, and never sideways, between
  two packages of one tier (``verifiers.inference.server`` and ``verifiers.inference.client``,
  the two processes, share one tier so that neither imports the other). Inside one package
  (the longest ``TIERS`` prefix a module matches) imports are free, but for cycles.
- A package's ``__init__`` may import its own subpackages: it is their facade, above them
  (``verifiers`` itself, the top-level facade, has the tier just below the cli).
- Seen as packages (the ``TIERS`` prefixes), the graph has no cycle either
  (``test_no_package_cycle``); the tiers imply it, this names it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "verifiers"

# The tiers, lowest first: a module's package is the longest prefix below that it matches, its
# tier that prefix's place in this list. An import goes to a lower tier or stays in its package.
TIERS: list[tuple[str, ...]] = [
    # the rest of the package: what environments are made of, and the inference server's two sides
    ("verifiers.errors", "verifiers.data"),  # what fails; the bundled datasets (pure data)
    ("verifiers.failures",),  # why a rollout failed: kinds of errors
    ("verifiers.types",),
    ("verifiers.utils",),  # no domain: knows no environment, parser or rubric (nor compat)
    ("verifiers.compat",),  # the past: old paths, old names refused with a reason, old signatures
    ("verifiers.models",),
    ("verifiers.parsers",),
    ("verifiers.rubrics",),
    ("verifiers.tokenization",),
    ("verifiers.envs",),
    ("verifiers.inference",),  # what both processes share (transport, ...)
    ("verifiers.inference.server", "verifiers.inference.client"),  # the vLLM process; the trainer's side
    # training: config <- what crosses the stages <- the stages <- trainer.py <- rl
    ("verifiers.training.config",),
    ("verifiers.training.types", "verifiers.training.processes", "verifiers.training.shards"),
    ("verifiers.training.metrics",),  # names and sums of numbers
    ("verifiers.training.loss",),  # pure math: advantages, log-probs, losses
    ("verifiers.training.batch",),  # a generated batch made ready for the loss
    ("verifiers.training.weights",),  # weights -> server, and riding out its outages
    ("verifiers.training.generation",),  # prompts -> rollouts, ahead of training
    ("verifiers.training.lifecycle",),  # checkpoints, heartbeat, shutdown: around the stages
    ("verifiers.training.trainer",),  # wiring only
    ("verifiers.training.rl",),
    ("verifiers.training",),  # the package's __init__: its public names
    ("verifiers",),  # the top-level __init__ alone (FACADE): every public name
    ("verifiers.cli",),
]
FACADE = "verifiers"
"""The top-level ``__init__``: every public name, below the cli only (entry points may use it)."""

PREFIX_TIER: dict[str, int] = {prefix: t for t, tier in enumerate(TIERS) for prefix in tier}


# Being redesigned: the lead removes each entry as it is fixed (empty, and staying so).
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


def package(module: str) -> str:
    """The package a module belongs to: the longest ``TIERS`` prefix it matches (``""`` if none)."""
    if module == FACADE:
        return FACADE
    matches = [p for p in PREFIX_TIER if p != FACADE and (module == p or module.startswith(p + "."))]
    return max(matches, key=len) if matches else ""


def tier(module: str) -> int:
    return PREFIX_TIER[package(module)]


def _facade_of(imp: Import) -> bool:
    """A package's ``__init__`` importing its own subtree: its facade, above what it gathers."""
    path = MODULES.get(imp.importer)
    return path is not None and path.name == "__init__.py" and imp.imported.startswith(imp.importer + ".")


def _against_the_tiers(imp: Import) -> bool:
    a, b = package(imp.importer), package(imp.imported)
    return a != b and not _facade_of(imp) and tier(imp.imported) >= tier(imp.importer)


# -- the tests ----------------------------------------------------------------------------------


def test_the_walk_sees_the_imports_it_must():
    """Guards the parser: known imports of each kind are found, with the right kind."""
    by_pair = {(i.importer, i.imported): i for i in IMPORTS}
    eager = by_pair[("verifiers.training.trainer", "verifiers.training.weights.sync")]
    lazy = by_pair[("verifiers.training.generation.producer", "verifiers.training.loss.advantages")]
    assert not eager.lazy and lazy.lazy
    assert ("verifiers.cli.rl", "verifiers.cli.rl.plan") in by_pair  # `from pkg.mod import name`
    assert not any(i.importer == i.imported for i in IMPORTS)
    assert len(MODULES) > 100 and len(IMPORTS) > 300


def test_the_tiers_are_read_as_meant():
    """Guards ``package``/``tier``: the longest prefix wins, and a tier's packages are apart."""
    assert package("verifiers.training.loss.advantages") == "verifiers.training.loss"
    assert package("verifiers.training.trainer") == "verifiers.training.trainer"
    assert package("verifiers.training") == "verifiers.training"
    assert tier("verifiers.training.types") == tier("verifiers.training.processes")
    assert tier("verifiers.training.loss") < tier("verifiers.training.batch") < tier("verifiers.cli")
    sideways = Import("verifiers.training.types", "verifiers.training.processes", 1, False)
    assert _against_the_tiers(sideways)
    assert not _against_the_tiers(Import("verifiers.envs.tool", "verifiers.envs.environment", 1, False))


def test_every_module_has_a_package():
    """A new top-level package or module, or a loose module under training/, gets its tier (and
    its line in docs/architecture.md)."""
    loose = [m for m in MODULES if m != FACADE and not package(m)]
    loose += [
        m for m in MODULES if m.startswith("verifiers.training.") and package(m) == "verifiers.training"
    ]
    assert not loose, f"give these a tier in TIERS (a stage package for training/): {loose}"


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


def test_no_package_cycle():
    """Packages as nodes (``verifiers.utils``, ``verifiers.envs``, ``verifiers.training.batch``, ...),
    every import, lazy or not, as an edge."""
    edges = [
        Import(package(i.importer), package(i.imported), i.line, i.lazy)
        for i in IMPORTS
        if package(i.importer) != package(i.imported) and not _facade_of(i)
    ]
    cycles = _cycles(edges)
    assert not cycles, "\n".join(_explain(c, edges) for c in cycles)


def test_imports_go_down_the_tiers():
    breaks = {}
    for imp in IMPORTS:
        if _against_the_tiers(imp):
            breaks.setdefault((imp.importer, imp.imported), imp)
    excused = KNOWN_LAYER_BREAKS
    new = [str(i) for pair, i in sorted(breaks.items()) if pair not in excused]
    order = " <- ".join("/".join(p.removeprefix("verifiers.") for p in t) for t in TIERS)
    assert not new, f"imports up or sideways against the tiers ({order}):\n  " + "\n  ".join(new)
    gone = sorted(excused - set(breaks))
    assert not gone, f"fixed, remove from the exception sets: {gone}"


def test_the_known_exceptions_are_empty():
    """No exception anywhere: the layer breaks and lazy cycles lists stay empty."""
    assert not KNOWN_LAYER_BREAKS and not KNOWN_LAZY_CYCLES


def test_inference_and_the_rest_never_import_training_or_the_cli():
    """The packages below training, spelled out (the tier test covers them; this names the rule users rely on)."""
    first_training = PREFIX_TIER["verifiers.training.config"]
    for imp in IMPORTS:
        if imp.importer != FACADE and tier(imp.importer) < first_training:
            assert tier(imp.imported) < first_training, str(imp)
