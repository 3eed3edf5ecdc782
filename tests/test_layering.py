"""The import graph of ml8s has no cycle at module level, TYPE_CHECKING and function-level imports included.

import-linter's ``acyclic_siblings`` contract (``make lint``) looks at siblings, package by package; this
test looks at every module of ml8s at once, so a cycle that crosses packages is caught too. The cycle
finder is tested on graphs with known cycles, so a passing run means "no cycle", not "nothing looked".
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest


def strongly_connected(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of more than one module, each sorted, sorted by first module.

    Iterative (no recursion limit on long import chains); edges to modules outside ``graph`` are ignored.
    """
    edges = {node: sorted(t for t in targets if t in graph) for node, targets in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, position = work.pop()
            if position == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            if position < len(edges[node]):
                work.append((node, position + 1))
                target = edges[node][position]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if work:  # done with node: hand its low-link to the module that imported it
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def cycle_in(graph: Mapping[str, Iterable[str]], component: list[str]) -> list[str]:
    """One concrete cycle through the component's first module, as ``[a, b, ..., a]`` (shortest, by BFS)."""
    members, start = set(component), component[0]
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for target in sorted(t for t in graph[node] if t in members):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"{component} is no strongly connected component")


def describe(graph: Mapping[str, Iterable[str]], components: list[list[str]]) -> str:
    return "\n".join(
        f"import cycle among {', '.join(c)}; for one: {' -> '.join(cycle_in(graph, c))}" for c in components
    )


def import_graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules it imports directly (TYPE_CHECKING blocks included), read by grimp."""
    graph = grimp.build_graph(package, cache_dir=None)
    return {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}


def test_ml8s_has_no_import_cycle() -> None:
    graph = import_graph("ml8s")
    assert {"ml8s.chain", "ml8s.pipeline", "ml8s.cli"} <= graph.keys() and len(graph) > 50  # all of ml8s was read
    cycles = strongly_connected(graph)
    assert not cycles, describe(graph, cycles)


def test_finder_reports_each_cycle_once() -> None:
    graph = {
        "a": {"b"},
        "b": {"c", "x"},
        "c": {"a"},
        "d": {"a", "e"},
        "e": {"d"},
        "f": {"g", "outside"},
        "g": set(),
        "x": set(),
    }
    assert strongly_connected(graph) == [["a", "b", "c"], ["d", "e"]]
    assert describe(graph, strongly_connected(graph)) == (
        "import cycle among a, b, c; for one: a -> b -> c -> a\nimport cycle among d, e; for one: d -> e -> d"
    )


def test_finder_on_acyclic_graphs() -> None:
    assert strongly_connected({}) == []
    assert strongly_connected({"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"a"}}) == []


def test_finder_on_a_long_chain_closed_at_the_end() -> None:
    """Deeper than Python's recursion limit: the finder is iterative."""
    names = [f"m{i:05d}" for i in range(5000)]
    chain = {name: {names[i + 1]} if i + 1 < len(names) else set() for i, name in enumerate(names)}
    assert strongly_connected(chain) == []
    chain[names[-1]] = {names[0]}
    assert strongly_connected(chain) == [names]


def test_a_type_checking_cycle_in_a_real_package_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cycle ml8s.chain once had: a runtime import one way, a TYPE_CHECKING import back."""
    package = tmp_path / "layering_probe"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "store.py").write_text("from layering_probe.commit import commit\n")
    (package / "commit.py").write_text(
        textwrap.dedent(
            """
            from __future__ import annotations
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from layering_probe.store import Store
            def commit(store: Store) -> None: ...
            """
        )
    )
    (package / "leaf.py").write_text("import layering_probe.commit\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = import_graph("layering_probe")
    cycles = strongly_connected(graph)
    assert cycles == [["layering_probe.commit", "layering_probe.store"]]
    assert "layering_probe.commit -> layering_probe.store -> layering_probe.commit" in describe(graph, cycles)
