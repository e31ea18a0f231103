"""Circles in a module import graph, for the layer tests of both packages."""

from __future__ import annotations

from typing import Mapping, Set


def import_circles(graph: Mapping[str, Set[str]]) -> list[str]:
    """Each import circle of ``graph`` (module -> modules it imports) as ``a -> b -> a``, found by
    one depth-first walk: an import back to a module still open closes a circle."""
    circles: list[str] = []
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == "open":
                circles.append(" -> ".join([*path[path.index(dep):], dep]))
            elif dep not in state:
                visit(dep, [*path, dep])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return circles
