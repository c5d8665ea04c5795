"""The layers of lockgate, and the check that keeps them (Flink keeps ArchUnit tests
for the same reason).

Every module of ``lockgate/`` belongs to one layer, found by the longest module
prefix in :data:`LAYERS`; a module may import modules of its own layer and of the
layers below it, never above. The check reads every ``import`` statement of every
module with :mod:`ast`: module-level, function-level and ``if TYPE_CHECKING:``
imports all count (a type-only import still ties the lower layer to the upper one's
names, and a later refactoring turns it into a runtime import). There is no exception
list: an import that must go upward means the code lives in the wrong layer.

No cycles either: no two modules may import each other, directly or through others,
counting the same deferred and type-only imports (a cycle of deferred imports works
today and breaks on the next refactoring that moves one of them to the top), again with
no exception list. Where an upper module builds objects of a lower one that need it back
(the API's stream classes), the lower one sees it through a protocol
(``lockgate/api/stream_protocols.py``).

``docs/architecture.md`` ("Layers") describes the same order.
"""

from __future__ import annotations

import ast
import pathlib
from typing import NamedTuple

import pytest

import lockgate

PACKAGE_ROOT = pathlib.Path(lockgate.__file__).parent

#: bottom to top; a layer is a list of module prefixes (longest prefix wins)
LAYERS: list[tuple[str, list[str]]] = [
    ("errors", ["lockgate.errors"]),
    # elements, batches, key groups and hashing, partitioning, clocks, durations
    ("core", ["lockgate.core"]),
    ("time", ["lockgate.time"]),
    # window assigners, the built-in window aggregates, session merging
    ("windowing", ["lockgate.windowing"]),
    # where state is written: the state backends upload through it, as Flink's do
    (
        "checkpoint-storage",
        [
            "lockgate.checkpoint.storage",
            "lockgate.checkpoint.fs_storage",
            "lockgate.checkpoint.storage_url",
            "lockgate.checkpoint.state_tree",
            "lockgate.checkpoint.storage_options",
            "lockgate.checkpoint.shared_registry",
            "lockgate.checkpoint.transfers",
            "lockgate.checkpoint.types",
            "lockgate.checkpoint.config",
        ],
    ),
    ("state", ["lockgate.state"]),
    ("graph", ["lockgate.graph"]),
    # barriers, coordinator, channel state, savepoint files, export
    ("checkpoint", ["lockgate.checkpoint"]),
    # what user functions and connectors see of a running subtask
    ("context", ["lockgate.runtime.context", "lockgate.runtime.metrics"]),
    ("connectors", ["lockgate.connectors"]),
    ("runtime", ["lockgate.runtime"]),
    ("job", ["lockgate.job"]),
    ("recovery", ["lockgate.recovery"]),
    ("savepoint", ["lockgate.savepoint"]),
    ("executor", ["lockgate.executor"]),
    # the autoscaler's rule and driver loop (the API carries its decisions out)
    ("autoscaling", ["lockgate.autoscaling"]),
    # the REST API, Prometheus /metrics and the dashboard a JobClient serves
    ("rest", ["lockgate.rest"]),
    ("api", ["lockgate.api"]),
    ("testing", ["lockgate.testing"]),
    ("entry", ["lockgate.cli", "lockgate"]),
]


class Import(NamedTuple):
    importer: str
    imported: str
    line: int
    type_checking: bool


def module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                inside.update(id(n) for n in ast.walk(stmt))
    return inside


def imports_of(path: pathlib.Path, root: pathlib.Path) -> list[Import]:
    """Every lockgate module ``path`` imports, at any depth of its syntax tree.
    ``from pkg import name`` counts as an import of ``pkg.name`` when that is a module."""
    importer = module_name(path, root)
    package = importer.split(".") if path.name == "__init__.py" else importer.split(".")[:-1]
    tree = ast.parse(path.read_text(), filename=str(path))
    type_checking = _type_checking_nodes(tree)
    found: list[Import] = []
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            modules = [f"{target}.{a.name}" for a in node.names]
            modules = [m for m in modules if _is_module(m, root)]
            # from . import module: an import of the module, not of the package's names
            targets = modules if len(modules) == len(node.names) else [target, *modules]
        for target in targets:
            if target == root.name or target.startswith(root.name + "."):
                found.append(Import(importer, target, node.lineno, id(node) in type_checking))
    return found


def _is_module(name: str, root: pathlib.Path) -> bool:
    rel = pathlib.Path(*name.split(".")[1:]) if "." in name else pathlib.Path()
    return (root / rel).with_suffix(".py").is_file() or (root / rel / "__init__.py").is_file()


def layer_of(module: str) -> int:
    """Index in :data:`LAYERS` of the layer ``module`` belongs to (longest prefix)."""
    best, best_len = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    if best < 0:
        raise AssertionError(f"{module} belongs to no layer: add its package to LAYERS")
    return best


def upward_imports(root: pathlib.Path) -> list[Import]:
    """The imports of the package at ``root`` that go from a layer to a higher one."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for imp in imports_of(path, root):
            if layer_of(imp.imported) > layer_of(imp.importer):
                found.append(imp)
    return found


def describe(imp: Import) -> str:
    return (
        f"{imp.importer}:{imp.line} imports {imp.imported}"
        f"{' (under TYPE_CHECKING)' if imp.type_checking else ''}: layer "
        f"{LAYERS[layer_of(imp.importer)][0]!r} may not import layer "
        f"{LAYERS[layer_of(imp.imported)][0]!r}"
    )


def test_no_module_imports_a_higher_layer() -> None:
    """Every import in lockgate/ goes to the same or a lower layer."""
    bad = upward_imports(PACKAGE_ROOT)
    assert not bad, (
        "imports against the layers of tests/unit/project/test_layers.py (docs/architecture.md, "
        "Layers); move the code down or depend the other way:\n"
        + "\n".join(describe(imp) for imp in bad)
    )


def import_graph(root: pathlib.Path) -> dict[str, set[str]]:
    """Module -> the lockgate modules it imports (any depth, deferred and type-only)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        graph.setdefault(module, set()).update(
            imp.imported for imp in imports_of(path, root) if imp.imported != module
        )
    return graph


def import_cycles(root: pathlib.Path) -> list[frozenset[str]]:
    """The strongly connected groups of two or more modules of the import graph."""
    graph = import_graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]  # Tarjan, without recursion
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        cycles.append(frozenset(group))
    return cycles


def describe_cycle(group: frozenset[str], root: pathlib.Path) -> str:
    graph = import_graph(root)
    edges = [f"{a} -> {b}" for a in sorted(group) for b in sorted(graph[a] & group)]
    return "; ".join(edges)


def test_no_import_cycles() -> None:
    """No module imports itself through others (deferred and type-only imports count),
    with no exception list."""
    new = import_cycles(PACKAGE_ROOT)
    assert not new, (
        "import cycles (move the shared part to a module both import, or depend one way):\n"
        + "\n".join(describe_cycle(c, PACKAGE_ROOT) for c in new)
    )


@pytest.mark.parametrize(
    "back",
    [
        "from .a import x\n",
        "def f():\n    from . import a\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import x\n",
    ],
)
def test_the_cycle_check_finds_a_cycle_however_it_is_imported(
    tmp_path: pathlib.Path, back: str
) -> None:
    root = tmp_path / "lockgate"
    for rel in ("__init__.py", "core/__init__.py", "core/c.py"):
        _write(root, rel, "")
    _write(root, "core/a.py", "from .b import y\n")
    _write(root, "core/b.py", "from .c import z\n")
    assert import_cycles(root) == []
    _write(root, "core/c.py", back)
    assert import_cycles(root) == [
        frozenset({"lockgate.core.a", "lockgate.core.b", "lockgate.core.c"})
    ]


def test_every_module_belongs_to_a_layer() -> None:
    for path in PACKAGE_ROOT.rglob("*.py"):
        layer_of(module_name(path, PACKAGE_ROOT))


def _write(root: pathlib.Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
    ("bad_import", "imported", "type_only"),
    [
        ("from ..runtime.task import StreamTask\n", "lockgate.runtime.task", False),
        ("from lockgate.runtime import task\n", "lockgate.runtime.task", False),
        ("import lockgate.executor.local\n", "lockgate.executor.local", False),
        ("def f():\n    from ..api import environment\n", "lockgate.api.environment", False),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from ..runtime.task import StreamTask\n",
            "lockgate.runtime.task",
            True,
        ),
    ],
)
def test_the_check_flags_a_wrong_import(
    tmp_path: pathlib.Path, bad_import: str, imported: str, type_only: bool
) -> None:
    """The test of the test: a core module importing upward, in any of the forms
    (relative, absolute, ``from pkg import module``, in a function, type-only), is
    reported; the same tree without it is clean."""
    root = tmp_path / "lockgate"
    for rel in (
        "__init__.py",
        "errors.py",
        "core/__init__.py",
        "runtime/__init__.py",
        "executor/__init__.py",
        "executor/local.py",
        "api/__init__.py",
        "api/environment.py",
    ):
        _write(root, rel, "")
    _write(root, "core/ok.py", "from ..errors import LockgateError\nfrom . import ok\n")
    _write(root, "runtime/task.py", "from ..core.ok import x\nimport lockgate.errors\n")
    assert upward_imports(root) == []

    _write(root, "core/bad.py", bad_import)
    found = [
        imp
        for imp in upward_imports(root)
        if imp.imported != "lockgate.runtime" and imp.imported != "lockgate.api"
    ]
    assert [(imp.importer, imp.imported, imp.type_checking) for imp in found] == [
        ("lockgate.core.bad", imported, type_only)
    ]
    assert "layer 'core' may not import layer" in describe(found[0])


def test_the_check_flags_a_wrong_import_added_to_the_real_package(tmp_path: pathlib.Path) -> None:
    """The same on a copy of lockgate/ itself: one upward import added to
    ``core/batch.py`` (inside a function, where it is easiest to overlook) is the one
    violation found."""
    import shutil

    root = tmp_path / "lockgate"
    shutil.copytree(PACKAGE_ROOT, root, ignore=shutil.ignore_patterns("__pycache__"))
    assert upward_imports(root) == []
    with open(root / "core" / "batch.py", "a") as f:
        f.write("\n\ndef _wrong():\n    from ..executor.local import LocalExecutor\n")
    found = upward_imports(root)
    assert [(imp.importer, imp.imported) for imp in found] == [
        ("lockgate.core.batch", "lockgate.executor.local")
    ]


#: the connector packages: each imports only the connector framework (the modules at
#: the top of ``lockgate.connectors``), the shared record formats (SHARED_FORMATS), its
#: own modules and the layers below, never another connector package
CONNECTOR_PACKAGES = (
    "builtin",
    "delta",
    "files",
    "iceberg",
    "kafka",
    "nats",
    "postgres",
    "redis",
)
#: record formats any connector may use (``formats/``; ``schema_registry/``, the Schema
#: Registry formats and their client); they import no connector package either
SHARED_FORMATS = ("formats", "schema_registry")


def connector_package_of(module: str) -> str | None:
    """The package under ``lockgate.connectors`` that ``module`` lives in (None for the
    framework's own modules and anything outside)."""
    parts = module.split(".")
    if parts[:2] != ["lockgate", "connectors"] or len(parts) < 3:
        return None
    if parts[2] in CONNECTOR_PACKAGES or parts[2] in SHARED_FORMATS:
        return parts[2]
    return None


def cross_connector_imports(root: pathlib.Path) -> list[Import]:
    """Imports from a connector package (or a shared format) into another connector
    package, or from a shared format into a connector."""
    wrong = []
    for path in sorted(root.rglob("*.py")):
        for imp in imports_of(path, root):
            mine = connector_package_of(imp.importer)
            theirs = connector_package_of(imp.imported)
            if mine is None or theirs is None or mine == theirs:
                continue
            if theirs in SHARED_FORMATS and mine in CONNECTOR_PACKAGES:
                continue
            if theirs in SHARED_FORMATS and mine in SHARED_FORMATS:
                continue
            wrong.append(imp)
    return wrong


def test_a_connector_package_imports_no_other_connector() -> None:
    """Issue 41, item 1: a connector package imports only the connector framework,
    ``formats/`` (and the Schema Registry formats) and the layers below."""
    wrong = cross_connector_imports(PACKAGE_ROOT)
    assert not wrong, "connector packages importing each other:\n" + "\n".join(
        f"  {i.importer} (line {i.line}) imports {i.imported}" for i in wrong
    )


def test_every_connector_folder_is_named_here() -> None:
    """A new connector package must be added to CONNECTOR_PACKAGES (so the rule above
    covers it)."""
    folders = {
        p.parent.name
        for p in (PACKAGE_ROOT / "connectors").glob("*/__init__.py")
        if p.parent.name not in SHARED_FORMATS
    }
    assert folders == set(CONNECTOR_PACKAGES)


def test_the_connector_check_flags_an_import_of_another_connector(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "lockgate"
    _write(root, "connectors/kafka/source.py", "from ..delta.sink import DeltaSink\n")
    _write(root, "connectors/delta/sink.py", "from ..formats.flat_json import x\n")
    _write(root, "connectors/formats/flat_json.py", "x = 1\n")
    wrong = cross_connector_imports(root)
    assert [(i.importer, i.imported) for i in wrong] == [
        ("lockgate.connectors.kafka.source", "lockgate.connectors.delta.sink")
    ]
