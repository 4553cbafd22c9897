"""inference/ is split by process: ``server/`` runs in vLLM, ``client/`` in the trainer.

Neither imports the other (lazily or not), and nothing under ``verifiers.inference`` imports
training or the cli: what both processes need lives in ``verifiers.inference`` itself. Read
from the source (nothing is imported); every import counts, at module level or in a function.
tests/test_import_graph.py checks the package's layers as a whole.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "verifiers"
SERVER, CLIENT = "verifiers.inference.server", "verifiers.inference.client"


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int

    def __str__(self) -> str:
        return f"{self.importer} (line {self.line}) imports {self.imported}"


def _imports() -> list[Import]:
    found = []
    for path in sorted((PACKAGE / "inference").rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            found += [Import(module, n, node.lineno) for n in names if n.startswith("verifiers.")]
    return found


IMPORTS = _imports()


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_server_and_client_never_import_each_other():
    crossing = [
        str(i)
        for i in IMPORTS
        if (_under(i.importer, SERVER) and _under(i.imported, CLIENT))
        or (_under(i.importer, CLIENT) and _under(i.imported, SERVER))
    ]
    assert not crossing, "put what both sides need in verifiers/inference/ itself:\n  " + "\n  ".join(
        crossing
    )


def test_inference_imports_no_training_and_no_cli():
    wrong = [
        str(i)
        for i in IMPORTS
        if _under(i.importer, "verifiers.inference")
        and (_under(i.imported, "verifiers.training") or _under(i.imported, "verifiers.cli"))
    ]
    assert not wrong, "\n  ".join(wrong)


def test_each_route_is_one_module_level_function():
    """``build_router`` only registers :data:`ROUTES`; every handler is a function of routes.py."""
    source = PACKAGE / "inference" / "server" / "routes.py"
    tree = ast.parse(source.read_text(encoding="utf-8"))
    build = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "build_router")
    nested = [
        n.name
        for n in ast.walk(build)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n is not build
    ]
    assert not nested, f"handlers nested in build_router: {nested}"
    top = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    table = next(
        n for n in tree.body if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "ROUTES"
    )
    handlers = [e.elts[2].id for e in table.value.elts]
    assert len(handlers) == len(set(handlers)) == 20 and set(handlers) <= top


def test_the_0_2_inference_paths_still_import():
    """0.2's flat modules are compat entries (the same module objects, or for transport.py, which
    held both sides, its names); the two old module names that are packages now keep their names on
    the package, imported on first use."""
    import importlib

    import verifiers.inference.server.worker as worker
    from verifiers.compat import MOVED

    old = [p for p in MOVED if p.startswith("verifiers.inference.") and p.count(".") == 2]
    assert len(old) >= 12
    for path in old:
        assert importlib.import_module(path) is importlib.import_module(MOVED[path]), path
    # a --worker-extension-cls of 0.2 names the same class, so vf-vllm's subclass check passes
    assert (
        importlib.import_module("verifiers.inference.worker").WeightSyncExtension
        is worker.WeightSyncExtension
    )
    from verifiers.inference.client import ADMIN_HEADER, VLLMClient, is_server_lost
    from verifiers.inference.client.vllm_client import VLLMClient as moved
    from verifiers.inference.server import ADMIN_HEADER as server_header
    from verifiers.inference.server import (
        RouteError,
        Settings,
        State,
        Update,
        attach,
        build_router,
        check_admin,
        cleanup,
        is_loopback,
    )

    assert VLLMClient is moved and callable(is_server_lost) and ADMIN_HEADER == server_header
    # defined once, beside both sides (both import it)
    assigned = [
        str(path.relative_to(PACKAGE.parent))
        for path in sorted((PACKAGE / "inference").rglob("*.py"))
        if "\nADMIN_HEADER =" in path.read_text(encoding="utf-8")
    ]
    assert assigned == ["verifiers/inference/wire.py"], assigned
    # 0.2's transport.py held both sides: each of its names now comes from the side that runs it
    import verifiers.inference.transport as old_transport
    from verifiers.compat import REEXPORTED

    for name, source in REEXPORTED["verifiers.inference.transport"].items():
        assert getattr(old_transport, name) is getattr(importlib.import_module(source), name), name
    assert all((RouteError, Settings, State, Update, attach, build_router, check_admin, cleanup, is_loopback))
    from verifiers.training.weights.names import layer_of

    assert layer_of("model.layers.3.mlp.up_proj.weight") == "model.layers.3"
