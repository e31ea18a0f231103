"""The runtime's folders by role, in layers (docs/runtime.md): a module imports its own layer
and the layers below it, never one above; no module reaches itself through its imports; and a
module imports at its top, except the optional heavy dependencies, which are imported where
they are used so that every module imports without them. Checked on the installed sources,
imports inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

import refactx_index

from ..import_graph import import_circles

ROOT = Path(refactx_index.__path__[0])

# lowest first: the base (errors, the vocabulary), the tree, the fact constraint, what the model
# is told, the engine adapters, question answering, the fact server, the command
RUNTIME_LAYERS = {
    "errors": 0,
    "connection": 0,
    "vocab": 0,
    "tree": 1,
    "constraint": 2,
    "prompting": 3,
    "engines": 4,
    "qa": 5,
    "server": 6,
    "display": 7,
    "cli": 7,
}
# the command imports each subcommand's modules inside that subcommand, so that `refactx --help`
# and shell completion load none of them (numpy, psycopg, tokenizers, torch): see cli.py's doc
LAZY_COMMAND_MODULES = {"refactx_index.cli"}
# imported inside the functions that use them: the extras (generation, server, eval) and the
# engines that live in environments of their own
OPTIONAL = {"torch", "transformers", "vllm", "sglang", "xgrammar", "fastapi", "starlette", "uvicorn",
            "matplotlib", "tokenizers", "huggingface_hub", "safetensors", "gguf", "accelerate", "llguidance",
            "openai", "httpx"}


def _modules() -> dict[str, tuple[Path, bool]]:
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join(["refactx_index", *parts])] = (path, is_package)
    return modules


def _imports(name: str, path: Path, is_package: bool, modules) -> list[tuple[str, ast.AST, bool]]:
    """(runtime module imported, the statement, whether it is inside a function) for each
    import of a runtime module; ``from package import module`` reads as the module."""
    package = name.split(".") if is_package else name.split(".")[:-1]
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package[:len(package) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in child.names:
                    target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    if target in modules and target != name:
                        found.append((target, child, in_function))
            elif isinstance(child, ast.Import):
                found.extend((a.name, child, in_function) for a in child.names if a.name in modules)
            visit(child, inside)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1:
        return 0  # the package itself: it imports only the errors at its top
    assert parts[1] in RUNTIME_LAYERS, f"{module} is in no layer of RUNTIME_LAYERS"
    return RUNTIME_LAYERS[parts[1]]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: {t for t, _, _ in _imports(name, path, is_package, modules)}
            for name, (path, is_package) in modules.items()}


def test_every_runtime_module_is_in_a_layer():
    graph = _graph()
    assert {"refactx_index.tree.format", "refactx_index.constraint.matcher", "refactx_index.qa.ask",
            "refactx_index.engines.core", "refactx_index.server.app"} <= set(graph)
    for module in graph:
        _layer(module)


def test_runtime_layers_import_downwards_only():
    graph = _graph()
    upward = sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                    if _layer(b) > _layer(a) and a != "refactx_index")
    assert upward == [], "imports from a lower layer of the runtime to a higher one:\n" + "\n".join(upward)


def test_runtime_has_no_import_circle():
    graph = _graph()
    circles = import_circles(graph)
    assert circles == [], "import circles in the runtime:\n" + "\n".join(circles)


def _optional_runtime_modules() -> set[str]:
    """The runtime's modules that import an optional dependency at their top (the engine
    adapters), and those that import such a module at theirs."""
    modules = _modules()
    heavy, graph = set(), {}
    for name, (path, is_package) in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        top = [s for node in tree.body if not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test))
               for s in ([node] if isinstance(node, (ast.Import, ast.ImportFrom)) else
                         ast.walk(node) if isinstance(node, ast.Try) else [])]
        tops = {a.name.partition(".")[0] for s in top if isinstance(s, ast.Import) for a in s.names}
        tops |= {(s.module or "").partition(".")[0] for s in top if isinstance(s, ast.ImportFrom) and not s.level}
        if tops & OPTIONAL:
            heavy.add(name)
        graph[name] = {t for t, _, inside in _imports(name, path, is_package, modules) if not inside}
    while more := {name for name, deps in graph.items() if deps & heavy} - heavy:
        heavy |= more
    return heavy


def test_imports_inside_functions_are_of_optional_dependencies_only():
    """An import inside a function is of an optional heavy dependency (OPTIONAL) or of a module
    of the runtime that imports one at its top (an engine adapter); everything else, the
    runtime's own modules included, is imported at the module's top."""
    modules, optional = _modules(), _optional_runtime_modules()
    assert "refactx_index.engines.transformers" in optional
    inside = []
    for name, (path, is_package) in modules.items():
        if name in LAZY_COMMAND_MODULES:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for child in ast.walk(node):
                if isinstance(child, ast.Import):
                    tops = {a.name.partition(".")[0] for a in child.names}
                elif isinstance(child, ast.ImportFrom):
                    tops = {"refactx_index" if child.level else (child.module or "").partition(".")[0]}
                else:
                    continue
                if tops == {"refactx_index"}:
                    if all(t in optional for t, n, _ in _imports(name, path, is_package, modules) if n is child):
                        continue
                elif not tops - OPTIONAL:
                    continue
                inside.append(f"{path.relative_to(ROOT)}:{child.lineno}: {ast.unparse(child)}")
    assert sorted(set(inside)) == [], "imports inside functions that could be at the top:\n" + "\n".join(sorted(set(inside)))


def test_the_command_module_loads_nothing_heavy():
    """Importing the command (what `refactx --help` and shell completion do) imports none of
    its subcommands' dependencies, nor the standard library modules only they use."""
    import subprocess
    import sys

    heavy = ["numpy", "psycopg", "tokenizers", "torch", "transformers", "refactx_index.tree.pg",
             "refactx_index.qa.ask", "refactx_index.server.app",
             # the standard library's slower imports come with the subcommands that use them
             "typing", "logging", "json", "dataclasses", "inspect"]
    code = ("import sys, refactx_index.cli; refactx_index.cli.build_parser(); "
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert found.strip() == "[]"
