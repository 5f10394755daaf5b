"""The house's layout, read from the source: imports point down the layers, no import
cycles, project imports at module level, no function over 80 lines.

The layers, bottom first (docs/layout.md): a module may import its own layer and the
layers below it, never one above. Within a layer, files may import each other, but
never in a circle. Imports inside functions are allowed only for optional extras
(`OPTIONAL`): everything of the project is imported at the top of its module, so the
graph below is the whole graph.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("configs", "models", "sampling", "rl", "launch")
# bottom first; a module belongs to the longest prefix that names it
LAYERS = (
    ("configs",),
    ("models",),
    ("sampling",),
    ("rl.registry", "rl"),
    ("rl.rewards",),
    ("rl.algorithms",),
    ("rl.data",),
    ("rl.checkpoint",),
    ("rl.envs",),
    ("rl.train",),
    ("rl.analysis", "rl.sweeps"),
    ("launch",),
)
# third-party modules a function may import where it needs them: optional extras (and
# what only runs in a separate process)
OPTIONAL = ("matplotlib", "pyarrow", "tensorboard", "tensorflow_datasets", "sentencepiece",
            "math_verify", "resource", "libtpu")
MAX_FUNCTION_LINES = 80


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, pathlib.Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            out[_module_name(path)] = path
    return out


SOURCES = _sources()


def _resolve(name: str) -> str | None:
    """The project module an import names (`rl.rewards.spec.CORRECT` -> `rl.rewards.spec`),
    None when it is not the project's."""
    while name:
        if name in SOURCES:
            return name
        name = name.rpartition(".")[0]
    return None


def _imports(path: pathlib.Path):
    """(imported module or name, line, inside a function) for every import of a file."""
    tree = ast.parse(path.read_text(), str(path))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}

    def in_function(node) -> bool:
        while node in parents:
            node = parents[node]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                return True
        return False

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, in_function(node)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                yield f"{node.module}.{alias.name}", node.lineno, in_function(node)


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in SOURCES}
    for name, path in SOURCES.items():
        for imported, _, _ in _imports(path):
            target = _resolve(imported)
            if target is not None and target != name:
                graph[name].add(target)
    return graph


def layer(module: str) -> int:
    """The index in LAYERS of the layer `module` belongs to (its longest prefix)."""
    best, found = -1, None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, found = len(prefix), i
    assert found is not None, f"{module} is in no layer: add it to LAYERS"
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_layer():
    for name in SOURCES:
        layer(name)


def test_no_import_cycles():
    assert cycles(_graph()) == []


def test_imports_point_down():
    upward = [f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)})"
              for a, targets in _graph().items() for b in sorted(targets)
              if layer(b) > layer(a)]
    assert upward == []


def test_project_imports_are_at_module_level():
    local = [f"{SOURCES[name].relative_to(ROOT)}:{line} imports {imported}"
             for name, path in SOURCES.items() for imported, line, inside in _imports(path)
             if inside and (_resolve(imported) is not None
                            or not imported.startswith(OPTIONAL))]
    assert local == []


def test_configs_are_data():
    """Config files import ml_collections and each other, no project code."""
    for name, path in SOURCES.items():
        if name.split(".")[0] != "configs":
            continue
        for imported, line, _ in _imports(path):
            target = _resolve(imported)
            assert target is None or target.startswith("configs"), (path, line, imported)


def test_no_function_over_80_lines():
    long = []
    for name, path in SOURCES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} "
                                f"({lines} lines)")
    assert long == []


@pytest.mark.parametrize("graph,want", [
    ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
])
def test_cycle_finder(graph, want):
    assert cycles(graph) == want


def test_layers_order_the_wings():
    assert layer("rl.train.trainer") > layer("rl.checkpoint.loop") > layer("rl.data.sources")
    assert layer("rl.registry") < layer("rl.rewards.spec") < layer("rl.algorithms.losses")
    assert layer("launch.train") == len(LAYERS) - 1 and layer("configs.base") == 0
