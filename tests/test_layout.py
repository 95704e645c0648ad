"""The import graph of the four first-party packages, read from their source with ``ast``.

Every ``import`` statement of every module under ``mingru/``, ``mingru_jax/``, ``kernels/``
(installed as ``mingru_kernels``) and ``mingru_cli/`` counts, including imports inside
functions (a lazy import is still a dependency) and in ``if TYPE_CHECKING:`` blocks (marked
as such in the failure messages); relative imports are resolved. The rules:

* no import cycle between first-party modules;
* the frontends are independent: ``mingru_jax`` never imports ``mingru``, ``mingru`` never
  imports ``mingru_jax``, neither imports ``mingru_cli`` (except the ``mingru/__main__.py``
  entry shim), and ``mingru_kernels`` imports neither frontend nor ``mingru_cli``; ``mingru``
  imports no jax/flax, ``mingru_jax`` imports torch only in ``mingru_jax.convert``;
* the benchmark harness ``mingru_benchmarks`` (from ``benchmarks/``) is imported by none of the
  library packages, and by ``mingru_cli`` only lazily, inside the ``bench`` command (so
  ``mingru --help`` stays framework-free); it imports ``mingru_cli`` only in its paper-run
  modules (``mingru_benchmarks.paper*``, which train peers with the CLI's data, loop and
  presets);
* ``mingru_kernels`` imports no framework (torch, jax, flax, jax_triton), even indirectly,
  and its pure-Python parts (the package itself, ``mingru_kernels.launch.*``, ``_spec``,
  ``_seam``, ``_compat``) import no triton either;
* nothing imports upward. Within a frontend the layers are, top to bottom: the package and
  its entry points, with the language model (``lm``, ``_generation``, ``hf``) → mixers, block,
  stack (and ``convert``) → ``scans`` → ``dispatch`` →
  ``_launch.*`` (beside them ``_eager.*``, ``_validate`` and ``_compat``, the one home of the
  frontend's uses of private internals) → ``mingru_kernels``.
  In particular a launcher never imports its frontend's ``dispatch``, ``scans`` or mixers.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Import name -> source folder (mingru_kernels is installed from kernels/).
PACKAGES = {"mingru": "mingru", "mingru_jax": "mingru_jax", "mingru_kernels": "kernels",
            "mingru_cli": "mingru_cli", "mingru_benchmarks": "benchmarks"}
FRONTENDS = ("mingru", "mingru_jax")
PAPER_RUNS = "mingru_benchmarks.paper"  # the harness's modules that may import mingru_cli
FRAMEWORKS = ("torch", "jax", "flax", "jax_triton")

# The layers of each frontend, top (high) to bottom; a module may import modules of its own
# frontend at its own layer or below, and mingru_kernels. Keys are module-name prefixes
# after "<frontend>." ("" is the package itself); the longest matching key wins.
LAYERS = {
    "": 5, "__main__": 5, "lm": 5, "_generation": 5, "hf": 5,
    "mixers": 4, "block": 4, "stack": 4, "convert": 4,
    "scans": 3, "cells": 3, "_sharding": 3, "_packed_sharding": 3,
    "dispatch": 2,
    "_launch": 1, "_eager": 1, "_validate": 1, "_packing": 1, "_compat": 1, "_step_fusion": 1,
    "_platform": 1, "_vma": 1,
}
LAYER_NAMES = {5: "package/entry/lm", 4: "mixers/block/stack", 3: "scans", 2: "dispatch",
               1: "_launch/_eager/_validate/_compat"}


class Import(NamedTuple):
    source: str  # the importing module
    target: str  # what it imports, fully qualified (a module, or a name inside one)
    line: int
    type_checking: bool  # inside ``if TYPE_CHECKING:``


def _module_files() -> dict[str, Path]:
    """First-party module name -> file, for every ``.py`` file of the four packages."""
    modules = {}
    for pkg, folder in PACKAGES.items():
        base = ROOT / folder
        for path in sorted(base.rglob("*.py")):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join([pkg, *parts])] = path
    return modules


MODULES = _module_files()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk(node: ast.AST, type_checking: bool = False) -> Iterator[tuple[ast.AST, bool]]:
    """Every node below ``node``, with whether it sits in an ``if TYPE_CHECKING:`` body."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            for stmt in child.body:
                yield stmt, True
                yield from _walk(stmt, True)
            for stmt in child.orelse:
                yield stmt, type_checking
                yield from _walk(stmt, type_checking)
            continue
        yield child, type_checking
        yield from _walk(child, type_checking)


def _imports(module: str) -> list[Import]:
    """What ``module`` imports. ``from P import n`` names ``P.n`` when that is a module (a
    submodule import), else ``P`` itself (``n`` is an attribute of ``P``)."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node, tc in _walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, node.lineno, tc) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                assert base and base[0], f"{path}:{node.lineno}: relative import beyond the top"
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module
            for alias in node.names:
                sub = f"{stem}.{alias.name}"
                found.append(Import(module, sub if sub in MODULES else stem, node.lineno, tc))
    return found


IMPORTS = [imp for module in MODULES for imp in _imports(module)]


def _first_party(name: str) -> str | None:
    """The first-party module ``name`` refers to (itself, or its longest module prefix), or
    ``None`` for a third-party name."""
    if name.split(".")[0] not in PACKAGES:
        return None
    while name not in MODULES and "." in name:
        name = name.rpartition(".")[0]
    return name if name in MODULES else None


def _graph() -> dict[str, dict[str, Import]]:
    """``graph[a][b]``: the first import of first-party module ``b`` by ``a`` (``a != b``)."""
    graph: dict[str, dict[str, Import]] = {m: {} for m in MODULES}
    for imp in IMPORTS:
        target = _first_party(imp.target)
        if target is not None and target != imp.source:
            graph[imp.source].setdefault(target, imp)
    return graph


GRAPH = _graph()


def _top(name: str) -> str:
    return name.split(".")[0]


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _where(imp: Import) -> str:
    tc = ", under TYPE_CHECKING" if imp.type_checking else ""
    return (f"{MODULES[imp.source].relative_to(ROOT)}:{imp.line} "
            f"({imp.source} imports {imp.target}{tc})")


def _layer(module: str) -> int:
    fe, _, rest = module.partition(".")
    keys = [k for k in LAYERS if k == "" and rest == "" or k and _within(rest, k)]
    assert keys, f"{module} has no layer: add its place to LAYERS in {Path(__file__).name}"
    return LAYERS[max(keys, key=len)]


def _find_cycle(graph: dict[str, dict[str, Import]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or ``None`` (iterative DFS)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(graph):
        if root in state:
            continue
        path, stack = [root], [iter(sorted(graph[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


def _reachable(start: str) -> dict[str, list[str]]:
    """Every first-party module reachable from ``start`` with one import chain to it."""
    chains = {start: [start]}
    todo = [start]
    while todo:
        cur = todo.pop()
        for nxt in sorted(GRAPH[cur]):
            if nxt not in chains:
                chains[nxt] = chains[cur] + [nxt]
                todo.append(nxt)
    return chains


def _third_party(module: str) -> dict[str, Import]:
    """Top-level third-party names ``module`` imports, with the import."""
    out: dict[str, Import] = {}
    for imp in IMPORTS:
        if imp.source == module and _top(imp.target) not in PACKAGES:
            out.setdefault(_top(imp.target), imp)
    return out


def _pure_python(module: str) -> bool:
    return module in ("mingru_kernels", "mingru_kernels._spec", "mingru_kernels._seam",
                      "mingru_kernels._compat") or (
        _within(module, "mingru_kernels.launch")
    )


# --------------------------------------------------------------------------- the parser


def test_the_parser_sees_every_package_and_every_kind_of_import():
    for pkg, folder in PACKAGES.items():
        assert any(_top(m) == pkg for m in MODULES), f"no module found under {folder}/"
    assert {"mingru_kernels.launch.switches", "mingru._launch.delta_rule",
            "mingru_jax._launch.delta_rule", "mingru_cli.cli"} <= set(MODULES)
    # Imports inside functions count (the launcher loaders import their module lazily) ...
    assert "mingru._launch.linear_scan" in GRAPH["mingru._launch"]
    # ... relative imports resolve, and a submodule import names the submodule only ...
    assert _first_party("mingru._launch._alloc.new_tensor") == "mingru._launch._alloc"
    assert "mingru_kernels.launch.linear_scan" in GRAPH["mingru_kernels.launch.switches"]
    assert _first_party("numpy") is None
    # ... and so do TYPE_CHECKING imports (the package's re-exports for static analysers).
    assert GRAPH["mingru"]["mingru.scans"].type_checking


# --------------------------------------------------------------------------- (a) cycles


def test_no_import_cycles():
    assert _find_cycle({"a": {"b": None}, "b": {"c": None}, "c": {"a": None}}) == [
        "a", "b", "c", "a"]  # the search finds a planted cycle
    cycle = _find_cycle(GRAPH)
    if cycle is not None:
        steps = [_where(GRAPH[a][b]) for a, b in zip(cycle, cycle[1:], strict=False)]
        pytest.fail("import cycle " + " -> ".join(cycle) + ":\n  " + "\n  ".join(steps))


# --------------------------------------------------------------------------- (b) packages


def _forbidden_package_imports(imp: Import) -> str | None:
    src, dst = _top(imp.source), _top(imp.target)
    if src == dst or dst not in PACKAGES:
        return None
    if src == "mingru_kernels":
        return "mingru_kernels imports no frontend, not mingru_cli, not mingru_benchmarks"
    if dst == "mingru_benchmarks" and src in FRONTENDS:
        return f"{src} never imports the benchmark harness"
    if dst == "mingru_cli":
        if imp.source == "mingru.__main__":
            return None  # ``python -m mingru`` is an entry shim for the command line
        if imp.source.startswith(PAPER_RUNS):
            return None  # the peers train with the CLI's own data, loop and presets
        if src == "mingru_benchmarks":
            return f"{imp.source} never imports mingru_cli (only {PAPER_RUNS}* modules do)"
        return f"{src} never imports mingru_cli"
    if src in FRONTENDS and dst in FRONTENDS:
        return f"{src} never imports {dst} (the frontends are independent)"
    return None


def test_frontends_and_kernels_are_independent():
    bad = [f"{_where(i)}: {why}" for i in IMPORTS if (why := _forbidden_package_imports(i))]
    assert not bad, "\n".join(bad)


def test_only_the_paper_runs_of_the_harness_import_the_cli():
    reuse = [i for i in IMPORTS if i.source.startswith(PAPER_RUNS) and _top(i.target) == "mingru_cli"]
    assert reuse  # the rule's exception is used: the paper runs train with the CLI's loop
    assert _forbidden_package_imports(Import("mingru_benchmarks.run", "mingru_cli.config", 1, False))
    assert _forbidden_package_imports(Import(PAPER_RUNS + "_lm", "mingru_cli.config", 1, False)) is None


def test_the_cli_imports_the_harness_only_inside_a_function():
    lazy, eager = [], []
    for module, path in MODULES.items():
        if _top(module) != "mingru_cli":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        inside = {id(n) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                  for n in ast.walk(f)}
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(_top(n) == "mingru_benchmarks" for n in names):
                (lazy if id(node) in inside else eager).append(f"{path.name}:{node.lineno}")
    assert not eager, f"mingru_cli imports mingru_benchmarks at module level: {eager}"
    assert lazy  # the rule has teeth: the bench command does import it


def test_each_frontend_imports_only_its_own_framework():
    bad = []
    for imp in IMPORTS:
        top = _top(imp.target)
        if _top(imp.source) == "mingru" and top in ("jax", "flax", "jax_triton"):
            bad.append(f"{_where(imp)}: mingru never imports {top}")
        if (_top(imp.source) == "mingru_jax" and top == "torch"
                and imp.source != "mingru_jax.convert"):
            bad.append(f"{_where(imp)}: only mingru_jax.convert may import torch")
    assert not bad, "\n".join(bad)


# --------------------------------------------------------------------------- (c) kernels


def test_kernels_import_no_framework_and_launch_metadata_no_triton():
    bad = []
    kernels = sorted(m for m in MODULES if _top(m) == "mingru_kernels")
    for module in kernels:
        for dep, chain in _reachable(module).items():
            for name, imp in _third_party(dep).items():
                via = "" if dep == module else " via " + " -> ".join(chain)
                if name in FRAMEWORKS:
                    bad.append(f"{_where(imp)}{via}: mingru_kernels imports no {name}")
                elif name == "triton" and _pure_python(module):
                    bad.append(f"{_where(imp)}{via}: {module} is pure Python (no triton)")
    assert not bad, "\n".join(bad)
    # The rule has teeth: the kernel modules do import triton, the metadata modules exist.
    assert "triton" in _third_party("mingru_kernels.linear_scan")
    assert sum(_pure_python(m) for m in kernels) >= 8


# --------------------------------------------------------------------------- (d) layers


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_nothing_imports_upward(frontend):
    bad = []
    for imp in IMPORTS:
        target = _first_party(imp.target)
        if _top(imp.source) != frontend or target is None or _top(target) != frontend:
            continue
        src, dst = _layer(imp.source), _layer(target)
        if dst > src:
            bad.append(f"{_where(imp)}: {LAYER_NAMES[src]} imports {LAYER_NAMES[dst]}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_launchers_never_import_dispatch_scans_or_mixers(frontend):
    """The rule above, spelled out for the launchers (``<frontend>._launch.*``)."""
    upward = [f"{frontend}.{m}" for m in ("dispatch", "scans", "mixers", "block", "stack")]
    bad = [
        _where(imp) for imp in IMPORTS
        if _within(imp.source, f"{frontend}._launch")
        and any(_within(imp.target, u) for u in upward)
    ]
    assert not bad, "a launcher imports upward:\n" + "\n".join(bad)


# --------------------------------------------------------------------------- (e) private internals

# Private attributes and modules of dependencies that only a package's ``_compat`` may touch
# (each use there is a declared hook with a version range: ``mingru_kernels._compat``).
PRIVATE_ATTRIBUTES = {"_data", "encodekey", "decodevalue", "knobs", "packed_metadata",
                      "get_or_create_triton_kernel", "triton_kernel_call_lib", "_assert_async"}
PRIVATE_MODULES = ("triton.knobs", "jax_triton.triton_lib")


def _private_uses(module: str) -> list[str]:
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        name = None
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_ATTRIBUTES:
            name = node.attr
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "hasattr", "setattr") and len(node.args) > 1
              and isinstance(node.args[1], ast.Constant) and node.args[1].value in
              PRIVATE_ATTRIBUTES):
            name = node.args[1].value
        elif isinstance(node, ast.ImportFrom) and node.module:
            targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            name = next((t for t in targets if t in PRIVATE_MODULES), None)
        elif isinstance(node, ast.Import):
            name = next((a.name for a in node.names if a.name in PRIVATE_MODULES), None)
        if name is not None:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    return found


def test_private_internals_are_used_only_in_compat_modules():
    bad = [use for module in MODULES if module.rpartition(".")[2] != "_compat"
           for use in _private_uses(module)]
    assert not bad, "private internals outside a _compat module:\n" + "\n".join(bad)
    # The rule has teeth: each frontend's _compat holds its hooks (mingru_kernels' holds only
    # the registry and the switch).
    for module in ("mingru._compat", "mingru_jax._compat"):
        assert _private_uses(module), module
