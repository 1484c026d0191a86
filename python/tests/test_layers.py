"""The package's layering (issue 29 item 6): no import circle among its modules, every import
counted (the ones inside functions too: a circle through a deferred import is still a circle,
only hidden).

The graph is read from the sources with ast, so a module added to the package is covered
without editing this file; only `if TYPE_CHECKING:` blocks are left out (never run).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parents[1] / "specgraph"


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _imports(path: Path) -> Set[str]:
    """The package's modules `path` imports, anywhere in it."""
    found: Set[str] = set()

    def visit(node: ast.AST) -> None:
        if _type_checking(node):
            return
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:  # from .x import y
                found.add(node.module.split(".")[0])
            elif node.level == 1:  # from . import x, y
                found.update(a.name.split(".")[0] for a in node.names)
            elif node.level == 0 and (node.module or "").startswith("specgraph."):
                found.add(node.module.split(".")[1])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[1] for a in node.names
                         if a.name.startswith("specgraph."))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text(), str(path)))
    return found


def import_graph(package: Path = PACKAGE) -> Dict[str, Set[str]]:
    modules = {p.stem for p in package.glob("*.py") if p.stem != "__init__"}
    return {m: _imports(package / f"{m}.py") & modules - {m} for m in sorted(modules)}


def circles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """One circle through each strongly connected set of modules (Tarjan), as a path."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    sets: List[List[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                sets.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sets


def test_the_walk_sees_a_circle_where_there_is_one(tmp_path):
    """The checker itself: two modules importing each other (one inside a function) are found."""
    (tmp_path / "a.py").write_text("from . import b\n")
    (tmp_path / "b.py").write_text("def f():\n    from .a import x\n    return x\n")
    (tmp_path / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                   "    from . import a\nfrom .b import f\n")
    graph = import_graph(tmp_path)
    assert graph == {"a": {"b"}, "b": {"a"}, "c": {"b"}}
    assert circles(graph) == [["a", "b"]]


def test_the_package_has_no_import_circle():
    graph = import_graph()
    assert {"ops", "buffers", "inputs", "verify", "metadata", "_torch_ops"} <= set(graph)
    found = circles(graph)
    assert found == [], "import circles: " + "; ".join(
        " <-> ".join(c) + " (" + ", ".join(f"{m} imports {sorted(graph[m] & set(c))}"
                                           for m in c) + ")" for c in found)
