"""The package's shape: no import cycle in rota/, the size limits, and no store backend importing another's."""

from __future__ import annotations

import ast
import statistics
from collections.abc import Iterator
from pathlib import Path

ROTA = Path(__file__).resolve().parent.parent / "rota"
MAX_FUNCTION = 50
MAX_MODULE = 500


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROTA.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROTA.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, outside `if TYPE_CHECKING:` blocks."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for sub in child.orelse:
                yield from _runtime_imports(sub)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        yield from _runtime_imports(child)


def _resolve(name: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = name.split(".") if is_package else name.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(name: str, path: Path, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The rota modules an import statement loads (a module, or its package's __init__)."""
    if isinstance(node, ast.Import):
        candidates = [alias.name for alias in node.names]
    else:  # `from X import y`: the module X.y if there is one, else X itself
        base = _resolve(name, path.name == "__init__.py", node)
        candidates = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    found = set()
    for candidate in candidates:
        while candidate and candidate not in known:
            candidate = candidate.rpartition(".")[0]
        if candidate.startswith("rota") and candidate != name:
            found.add(candidate)
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        edges: set[str] = set()
        for node in _runtime_imports(tree):
            edges |= _targets(name, path, node, set(known))
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
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


def test_the_import_graph_sees_function_level_imports_and_skips_type_checking() -> None:
    graph = import_graph()
    assert "rota.worker.worker" in graph["rota.app"] or "rota.worker" in graph["rota.app"]  # inside App.worker
    assert "rota.app" not in graph["rota.metrics"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_in_rota() -> None:
    found = cycles(import_graph())
    worker = [c for c in found if any(m == "rota.worker" or m.startswith("rota.worker.") for m in c)]
    assert not worker, f"import cycles through rota.worker: {worker}"
    assert not found, f"import cycles in rota/: {found}"


def _functions(tree: ast.AST) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_every_module_of_rota_keeps_the_size_limits() -> None:
    """Issue 11: no module over 500 lines, no function over 50 (decorators included), the
    median function at most 7 lines and the 90th percentile at most 25."""
    too_long, sizes = [], []
    for path in sorted(ROTA.rglob("*.py")):
        text = path.read_text()
        name = path.relative_to(ROTA.parent)
        lines = len(text.splitlines())
        if lines > MAX_MODULE:
            too_long.append(f"{name}: {lines} lines (module limit {MAX_MODULE})")
        for fn in _functions(ast.parse(text)):
            start = min([fn.lineno, *(d.lineno for d in fn.decorator_list)])
            size = (fn.end_lineno or fn.lineno) - start + 1
            sizes.append(size)
            if size > MAX_FUNCTION:
                too_long.append(f"{name}:{fn.lineno} {fn.name}: {size} lines (function limit {MAX_FUNCTION})")
    assert not too_long, "\n".join(too_long)
    sizes.sort()
    assert statistics.median(sizes) <= 7, statistics.median(sizes)
    assert sizes[int(len(sizes) * 0.9)] <= 25, sizes[int(len(sizes) * 0.9)]


def test_the_worker_package_never_imports_the_app() -> None:
    graph = import_graph()
    for name, edges in graph.items():
        if name.startswith("rota.worker"):
            assert "rota.app" not in edges, name
    for path in (ROTA / "worker").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module not in ("app", "rota.app"), f"{path.name} imports the app (even for types)"


def backend_crossings(stores: Path) -> list[str]:
    """Each import (type-only ones too) in a backend's package, stores/<backend>/, of another
    backend's package: "file:line imports module". Backends: stores' packages but sqlstore."""
    backends = {p.name for p in stores.iterdir() if (p / "__init__.py").exists()} - {"sqlstore"}
    found = []
    for backend in sorted(backends):
        for path in sorted((stores / backend).rglob("*.py")):
            name = ".".join(path.relative_to(stores.parent.parent).with_suffix("").parts)
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom):
                    base = _resolve(name, path.name == "__init__.py", node)
                    targets = [base] + [f"{base}.{a.name}" for a in node.names] if base == "rota.stores" else [base]
                elif isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                else:
                    continue
                for target in targets:
                    parts = target.split(".")
                    if parts[:2] == ["rota", "stores"] and len(parts) > 2 and parts[2] in backends - {backend}:
                        found.append(f"{path.relative_to(stores.parent.parent)}:{node.lineno} imports {target}")
    return found


def test_the_backend_check_sees_every_way_to_import_another_backend(tmp_path: Path) -> None:
    stores = tmp_path / "rota" / "stores"
    for package in ("sqlstore", "a", "b", "a/sub"):
        (stores / package).mkdir(parents=True)
        (stores / package / "__init__.py").write_text("")
    (stores / "a" / "ok.py").write_text("from ..sqlstore import x\nfrom . import ok\nfrom ...stores.a import y\n")
    (stores / "a" / "sub" / "bad.py").write_text(
        "from ...b.store import s\nfrom ... import b\nimport rota.stores.b.flow\n"
        "if TYPE_CHECKING:\n    from rota.stores.b import t\n"
    )
    assert backend_crossings(stores) == [
        "rota/stores/a/sub/bad.py:1 imports rota.stores.b.store",
        "rota/stores/a/sub/bad.py:2 imports rota.stores.b",
        "rota/stores/a/sub/bad.py:3 imports rota.stores.b.flow",
        "rota/stores/a/sub/bad.py:5 imports rota.stores.b",
    ]


def test_no_store_backend_imports_another_backend() -> None:
    """Issue 42: a backend's package (rota/stores/<backend>/) holds its SQL, session and
    specifics; what two backends share sits in rota/stores/sqlstore/, never in one of them."""
    found = backend_crossings(ROTA / "stores")
    assert not found, "\n".join(found)
