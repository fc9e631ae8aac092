"""The core's import graph, read with ``ast``: every import counts.

Used by ``tests/test_layers.py`` and runnable alone (``python tests/layering.py``) to print the
graph between *units* (the top-level modules and sub-packages of ``kf_trainer_core``), its
cycles and the imports that run against the layer order.

An import counts wherever it stands: at module level, inside a function (a lazy import defers
cost, it does not change direction) and under ``if TYPE_CHECKING:``. Relative imports are
resolved against the importing module, and ``from package import name`` counts as an import of
``package.name`` when that is a module of the tree.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
CORE = SRC / "kf_trainer_core"
PACKAGE = "kf_trainer_core"


@dataclass(frozen=True)
class Import:
    """One import statement of one module, resolved to a module of the tree."""

    source: str  # the importing module, dotted
    target: str  # the imported module, dotted
    line: int
    lazy: bool  # inside a function (or class body), not at module level
    type_only: bool  # under ``if TYPE_CHECKING:``


def module_name(path: Path, root: Path, package: str = PACKAGE) -> str:
    """The dotted name of the module at ``path`` in the package rooted at ``root``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([package, *parts])


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute module named by ``from <level dots><name> import ...`` in ``module``."""
    if level == 0:
        return name or ""
    base = module.split(".")
    if not is_package:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([name] if name else [])])


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(
    source: str, module: str, is_package: bool, modules: Iterable[str], package: str = PACKAGE
) -> list[Import]:
    """Every import of the tree's own modules in one module's source text."""
    known = set(modules)
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool, type_only: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node.lineno, lazy, type_only)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                add(sub if sub in known else base, node.lineno, lazy, type_only)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                visit(stmt, lazy, True)
            for stmt in node.orelse:
                visit(stmt, lazy, type_only)
            return
        inner = lazy or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner, type_only)

    def add(target: str, line: int, lazy: bool, type_only: bool) -> None:
        if target == package or target.startswith(package + "."):
            found.append(Import(module, target, line, lazy, type_only))

    visit(ast.parse(source), False, False)
    return found


def read_tree(core: Path = CORE, package: str = PACKAGE) -> dict[str, tuple[Path, bool]]:
    """Every module of the tree: dotted name -> (file, is a package)."""
    return {
        module_name(path, core, package): (path, path.name == "__init__.py")
        for path in sorted(core.rglob("*.py"))
    }


def all_imports(core: Path = CORE, package: str = PACKAGE) -> list[Import]:
    """Every import between the tree's modules."""
    tree = read_tree(core, package)
    found: list[Import] = []
    for module, (path, is_package) in tree.items():
        found.extend(imports_of(path.read_text(), module, is_package, tree, package))
    return found


def unit(module: str, depth: int = 1, package: str = PACKAGE) -> str:
    """The unit a module belongs to: its first ``depth`` names below the package."""
    parts = module.split(".")
    return ".".join(parts[1 : 1 + depth]) if len(parts) > 1 else "__init__"


def unit_graph(imports: Iterable[Import], depth: int = 1) -> dict[str, set[str]]:
    """Edges between units (an import inside one unit is no edge)."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        a, b = unit(imp.source, depth), unit(imp.target, depth)
        graph.setdefault(a, set())
        graph.setdefault(b, set())
        if a != b and a != "__init__" and b != "__init__":
            graph[a].add(b)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def strong(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                strong(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strong(node)
    return found


#: The layer contract, bottom first: a unit may import only the units before it (and
#: itself). ``docs/architecture.md`` draws it. A unit is a top-level module or package of
#: ``kf_trainer_core``, or a named sub-package (``backends.local``).
LAYERS: tuple[str, ...] = (
    "report",  # runs inside the job's pods: standard library only
    "checkpoints",  # likewise
    "base",  # pure helpers: time, untrusted job output, marks, extras, loop offload; the
    # errors every layer raises (base/errors.py)
    "k8s",  # Kubernetes' and Trainer's facts and rules; the calls and the drivers
    "fields",  # the spec's vocabulary: model base, field checks, names, Retention
    "config",  # backend configuration
    "spec",  # the SDK-facing spec models, function capture, volumes, checkpoints option
    "manifest",  # spec -> TrainJob manifest: builder, runtimes, lineage, selectors
    "cluster",  # what the cluster says: status, failures, Kueue, cost, results; the errors
    # about a job's outcome (cluster/errors.py)
    "errors",  # the public errors module: base/errors.py and cluster/errors.py, re-exported
    "programs",  # the client's logic as programs; informer, pod batches
    "emulation",  # the Kubernetes API both the local backend and the test bed serve
    "backends",  # the package itself (its docstring); its backends follow
    "backends.kubernetes",  # the transports over the kubernetes clients
    "backends.local",  # the local backend (pods as processes; local/container: as containers)
    "client",  # TrainerClient / AsyncTrainerClient
    "tasks",  # what orchestrator tasks share
    "cli",  # kf-trainer
    "testing",  # the test bed (never imported by the product)
)
#: Units that import nothing of the suite (they run in the job's pods).
STANDALONE: frozenset[str] = frozenset({"report", "checkpoints"})


def layer_unit(module: str, layers: Iterable[str] = LAYERS) -> str:
    """The unit of ``layers`` a module belongs to (the longest one that contains it)."""
    rest = module.split(".", 1)[1] if "." in module else ""
    best = ""
    for name in layers:
        if (rest == name or rest.startswith(name + ".")) and len(name) > len(best):
            best = name
    return best or (rest.split(".")[0] if rest else "__init__")


def upward_imports(imports: Iterable[Import], layers: tuple[str, ...] = LAYERS) -> list[str]:
    """Every import that runs against the layer order (or leaves a standalone unit, or
    names a unit the contract does not place), one line each: where, what, and why."""
    rank = {name: i for i, name in enumerate(layers)}
    problems = []
    for imp in imports:
        a, b = layer_unit(imp.source, layers), layer_unit(imp.target, layers)
        if a == b or a == "__init__" or b == "__init__":
            continue
        kind = "TYPE_CHECKING " if imp.type_only else "lazy " if imp.lazy else ""
        where = f"{imp.source}:{imp.line} {kind}imports {imp.target}"
        if a not in rank or b not in rank:
            problems.append(f"{where}: unit {a if a not in rank else b!r} has no layer")
        elif a in STANDALONE:
            problems.append(f"{where}: {a} runs in the job's pods and imports nothing")
        elif rank[b] > rank[a]:
            problems.append(f"{where}: {a} is below {b}")
    return problems


def layer_graph(imports: Iterable[Import], layers: tuple[str, ...] = LAYERS) -> dict[str, set[str]]:
    """Edges between the contract's units."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        a, b = layer_unit(imp.source, layers), layer_unit(imp.target, layers)
        graph.setdefault(a, set())
        graph.setdefault(b, set())
        if a != b and "__init__" not in (a, b):
            graph[a].add(b)
    return graph


def module_graph(imports: Iterable[Import]) -> dict[str, set[str]]:
    """Edges between modules."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        graph.setdefault(imp.source, set())
        graph.setdefault(imp.target, set())
        if imp.source != imp.target:
            graph[imp.source].add(imp.target)
    return graph


#: The orchestrator adapters: they sit on the core and import only its public faces.
ADAPTERS: tuple[str, ...] = ("kf_trainer_airflow", "kf_trainer_prefect", "kf_trainer_kfp")
#: The core's public faces (``docs/architecture.md``): the client, the spec, the backend
#: configuration, the errors, what orchestrator tasks share (``tasks``, with its
#: modules: it names the rest of the core an adapter needs), and the pod-side helpers.
#: ``kf_trainer_core.testing`` is for tests only.
PUBLIC_FACES: frozenset[str] = frozenset(
    f"{PACKAGE}.{face}"
    for face in ("client", "spec", "config", "errors", "tasks", "report", "checkpoints")
)
#: Faces whose modules are public too.
OPEN_FACES: tuple[str, ...] = (f"{PACKAGE}.tasks",)


def adapter_imports(
    src: Path = SRC, adapters: Iterable[str] = ADAPTERS, core: Path = CORE
) -> list[Import]:
    """Every import of the core in the adapters' modules."""
    known = read_tree(core)
    found: list[Import] = []
    for adapter in adapters:
        for path in sorted((src / adapter).rglob("*.py")):
            module = module_name(path, src / adapter, adapter)
            found.extend(
                imports_of(path.read_text(), module, path.name == "__init__.py", known, PACKAGE)
            )
    return found


def private_imports(imports: Iterable[Import]) -> list[str]:
    """Every import of the core by an adapter that is not of a public face, one line
    each: where, what, and why."""
    problems = []
    for imp in imports:
        target = imp.target
        if target in PUBLIC_FACES or target.startswith(tuple(f"{f}." for f in OPEN_FACES)):
            continue
        kind = "TYPE_CHECKING " if imp.type_only else "lazy " if imp.lazy else ""
        problems.append(f"{imp.source}:{imp.line} {kind}imports {target}: not a public face")
    return problems


def main() -> None:
    imports = all_imports()
    graph = unit_graph(imports)
    print(f"modules: {len(read_tree())}, imports: {len(imports)}")
    lazy = [i for i in imports if i.lazy]
    print(f"lazy imports: {len(lazy)}, TYPE_CHECKING imports: {sum(i.type_only for i in imports)}")
    for name in sorted(graph):
        print(f"  {name} -> {', '.join(sorted(graph[name]))}")
    unit_cycles = cycles(graph)
    print(
        f"unit cycles: {len(unit_cycles)} components, units in cycles: "
        f"{sum(len(c) for c in unit_cycles)}"
    )
    for component in unit_cycles:
        print("  SCC:", " ".join(component))
    layered = layer_graph(imports)
    print(f"layer-unit cycles: {cycles(layered)}")
    problems = upward_imports(imports)
    print(f"upward imports: {len(problems)}")
    for line in problems:
        print("  ", line)
    mod_cycles = cycles(module_graph(imports))
    print(
        f"module cycles: {len(mod_cycles)} components, sizes "
        f"{sorted((len(c) for c in mod_cycles), reverse=True)}"
    )
    private = private_imports(adapter_imports())
    print(f"adapter imports of the core's insides: {len(private)}")
    for line in private:
        print("  ", line)


if __name__ == "__main__":
    main()
