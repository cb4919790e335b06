"""No import circles in the coordinator core, nor in any other package of the project (small modules, no import circles);
and protocol/ imports nothing of coordinator_server/ (its layer).

Every module of `coordinator_server/` is parsed with `ast`; every import counts — at module level, inside a
function, or under `if TYPE_CHECKING:` (a type-only import back is still an arrow back). An arrow goes to
the module named by the import: `from pkg import name` points at `pkg.name` when that is a module, else at
`pkg` (its `__init__`). Parent packages that Python initialises on the way are not arrows of their own.

The circle is broken by protocols the parts define (offsets, admin, the delayed operations); the last test
checks that the façade, GroupCoordinator (and its classic group manager), still provides every member they declare.
"""
from __future__ import annotations

import ast
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator_server.group.admin import AdminGroups
from coordinator_server.group.coordinator import GroupConfig, GroupCoordinator
from coordinator_server.group.delayed import RebalanceCallbacks
from coordinator_server.group.offsets import OffsetGroups
from coordinator_server.purgatory import Timer
from tests.compiled_build import source_of

PACKAGE = "coordinator_server"
REPO = Path(__file__).resolve().parents[2]
# The project's other packages, each checked for circles of its own.
OTHER_PACKAGES = ("protocol", "pipeline", "benchmarks")

Graph = dict[str, set[str]]


def module_names(package: str = PACKAGE) -> dict[str, Path]:
    modules = {}
    for path in sorted((REPO / package).rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
        return
    if node.level:
        # A package's own __init__ is its base for `from . import x`; a plain module's base is its package.
        base = module.split(".")
        if not is_package:
            base.pop()
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    for alias in node.names:
        submodule = f"{target}.{alias.name}"
        yield submodule if submodule in known else target


def arrows(modules: dict[str, Path]) -> Iterator[tuple[str, str]]:
    """Every import between `modules` (name -> file), as (importer, imported)."""
    known = set(modules)
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _imported(name, path.name == "__init__.py", node, known):
                    if target in known and target != name:
                        yield name, target


def import_graph(package: str = PACKAGE) -> Graph:
    modules = module_names(package)
    graph: Graph = {name: set() for name in modules}
    for name, target in arrows(modules):
        graph[name].add(target)
    return graph


def knots(graph: Graph) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return components


def cycles(graph: Graph) -> list[list[str]]:
    """One cycle through each knot."""
    return [_cycle_in(graph, knot) for knot in knots(graph)]


def _cycle_in(graph: Graph, component: set[str]) -> list[str]:
    """A shortest way back to the component's first module (breadth first inside the component)."""
    start = min(component)
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if w not in previous:
                    previous[w] = v
                    following.append(w)
        frontier = following
    raise AssertionError(f"no cycle in the component {sorted(component)}")


def describe(graph: Graph) -> str:
    """Each knot's shortest cycle, and the other modules caught in the same knot."""
    lines = []
    for knot in knots(graph):
        cycle = _cycle_in(graph, knot)
        lines.append(" -> ".join(cycle))
        rest = sorted(knot - set(cycle))
        if rest:
            lines.append(f"  (same knot: {', '.join(rest)})")
    return "\n".join(lines)


def test_the_group_core_has_no_import_cycle() -> None:
    graph = import_graph()
    group = {name for name in graph if name.startswith(f"{PACKAGE}.group.")}
    core = {name: graph[name] & group for name in group}
    assert not cycles(core), f"import cycles in {PACKAGE}.group:\n{describe(core)}"


def test_the_whole_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert not cycles(graph), f"import cycles in {PACKAGE}:\n{describe(graph)}"


@pytest.mark.parametrize("package", OTHER_PACKAGES)
def test_the_other_packages_have_no_import_cycle(package: str) -> None:
    graph = import_graph(package)
    assert graph, f"no modules found in {package}/"
    assert not cycles(graph), f"import cycles in {package}:\n{describe(graph)}"


def test_protocol_imports_nothing_of_the_coordinator() -> None:
    """protocol/ is bytes and message classes: turning them into the core's inputs and back is
    coordinator_server/net/'s (docs/architecture.md, the request path). Every import counts, as above."""
    offending = []
    for name, path in module_names("protocol").items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if not getattr(node, "level", 0):
                    offending += [f"{name} imports {t}" for t in targets if t.split(".")[0] == PACKAGE]
    assert not offending, offending


def test_the_cycle_finder_finds_a_type_checking_arrow_back() -> None:
    # The finder itself must be able to fail: a type-only import back is a cycle.
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\n"
    tree = ast.parse(source)
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    known = {"p.a", "p.b"}
    targets = {t for node in imports for t in _imported("p.b", False, node, known) if t in known}
    assert targets == {"p.a"}
    assert cycles({"p.a": {"p.b"}, "p.b": targets}) == [["p.a", "p.b", "p.a"]]
    assert cycles({"p.a": {"p.b"}, "p.b": set()}) == []


def test_relative_imports_resolve_from_a_package_init_and_from_a_module() -> None:
    known = {"p", "p.q", "p.q.r", "p.s"}
    from_init = ast.parse("from . import r\nfrom .. import s\n").body
    from_module = ast.parse("from . import r\nfrom ..s import x\n").body
    assert [t for n in from_init for t in _imported("p.q", True, n, known)] == ["p.q.r", "p.s"]  # type: ignore[arg-type]
    assert [t for n in from_module for t in _imported("p.q.m", False, n, known)] == ["p.q.r", "p.s"]  # type: ignore[arg-type]


# -- the narrow interfaces ---------------------------------------------------------------------------


def _protocol_members(protocol: type) -> dict[str, list[str] | None]:
    """What the protocol declares: a method's parameter names after self, None for a property. Read from
    its source: a Protocol in a module compiled by mypyc (setup.py) keeps no members at run time."""
    source = source_of(Path(sys.modules[protocol.__module__].__file__ or ""))
    [cls] = [n for n in ast.parse(source.read_text()).body if isinstance(n, ast.ClassDef) and n.name == protocol.__name__]
    members: dict[str, list[str] | None] = {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            a = node.args
            params = [p.arg for p in [*a.posonlyargs, *a.args][1:] + ([a.vararg] if a.vararg else []) + a.kwonlyargs
                      + ([a.kwarg] if a.kwarg else [])]
            members[node.name] = None if any(getattr(d, "id", None) == "property" for d in node.decorator_list) else params
    return members


@pytest.mark.parametrize("protocol", [OffsetGroups, AdminGroups, RebalanceCallbacks], ids=lambda p: p.__name__)
def test_the_facade_provides_what_each_part_asks_for(protocol: type) -> None:
    # mypy checks this statically (`make lint`); this keeps it checked where only pytest runs. The delayed
    # operations call back into the classic group manager, the other parts into the façade.
    facade = GroupCoordinator(GroupConfig(), 1, Timer(0))
    coordinator = facade.classic if protocol is RebalanceCallbacks else facade
    members = _protocol_members(protocol)
    assert members, f"{protocol.__name__} declares nothing"
    for name, wanted in members.items():
        provided = getattr(coordinator, name)  # an AttributeError names what is missing
        if wanted is not None:
            assert callable(provided), f"GroupCoordinator.{name} is not callable"
            assert list(inspect.signature(provided).parameters) == wanted, f"GroupCoordinator.{name}{wanted}"
