"""How the library calls its own functions, read from its source with ``ast``.

Two rules hold in every module of ``mingru/``, ``mingru_jax/``, ``kernels/`` (installed as
``mingru_kernels``) and ``mingru_cli/``, outside Triton kernel bodies (functions decorated with
``triton.jit``: device code, written in Triton's own idiom):

* no boolean literal is passed positionally: ``f(x, True)`` says nothing at the call site, while
  ``f(x, causal=True)`` does;
* a call of a first-party function, method or class passes at most three arguments by position;
  the rest go by keyword, so a reader never counts parameters to know what an argument means.

A third holds in the PyTorch launchers (``mingru/_launch/``): every kernel launch
(``kernel[grid](...)``) passes every argument by keyword, under the kernel's own parameter
names, with no positional argument and no ``*args`` splat (``**named`` splats of dicts keyed
by parameter name are fine). The JAX launchers pass arrays by position, as jax-triton requires.

A call is first-party when its name (``f(...)`` or ``obj.f(...)``) is the name of a function,
method or class defined in these packages and it is not an attribute of a name imported from a
third-party module (``torch.f``, ``jnp.f``). Left alone, since their arguments cannot be passed
by keyword:

* kernel launches (``kernel[grid](...)``, not calls of a name) under the two rules above: the
  kernel's arguments, bound by Triton (the PyTorch ones fall under the third rule);
* variadic functions (every definition of the name takes ``*args``), e.g. ``dispatch.call(op,
  eager, *args)``, which forwards an op's own arguments unchanged to its eager twin or launcher;
* in a module, the names it binds to ``jax.custom_vjp`` / ``custom_vmap`` wrappers (a def
  decorated with, or a name assigned from, ``custom_vjp``, ``custom_vmap``, ``batched`` or
  ``batched_by_map``): they take ``*args`` only;
* the ``_compat`` modules of the frontends, whose launch cache mirrors Triton's positional
  kernel arguments.

``torch.library`` custom ops are not called by name in the library (``dual_entry`` and the
backward formulas call them through parameters), so no rule names them.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("mingru", "mingru_jax", "kernels", "mingru_cli")
FIRST_PARTY = ("mingru", "mingru_jax", "mingru_kernels", "mingru_cli", "mingru_benchmarks")
MAX_POSITIONAL = 3
# Where kernel launches pass every argument by keyword.
KEYWORD_LAUNCHES = "mingru/_launch/"

# Modules left as they are: their launch cache keys and replays Triton's positional kernel
# arguments, and the calls around it follow Triton's own launch path.
EXEMPT_FILES = {"mingru/_compat.py", "mingru_jax/_compat.py"}
# Decorators / wrappers whose result takes positional arguments only (``*args``).
POSITIONAL_WRAPPERS = ("custom_vjp", "custom_vmap", "batched")
# Builtins and container methods that take no keyword arguments at all: ``getattr``,
# ``dict.get`` / ``pop`` / ``setdefault``, ``ContextVar.set`` (jax's ``.at[i].set`` shares the
# name). A boolean default there cannot be named.
NO_KEYWORDS = {"getattr", "get", "pop", "setdefault", "set"}


class Call(NamedTuple):
    where: str  # file:line
    name: str
    problem: str


def _files() -> list[Path]:
    return [path for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))]


def _is_triton_kernel(node: ast.AST) -> bool:
    """A function whose decorators include ``triton.jit`` / ``jit`` (bare or called)."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return False
    for decorator in node.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", "")
        if name == "jit":
            return True
    return False


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """Every node below ``node``, skipping Triton kernel bodies."""
    for child in ast.iter_child_nodes(node):
        if _is_triton_kernel(child):
            continue
        yield child
        yield from _walk(child)


@functools.cache
def _trees() -> dict[Path, ast.Module]:
    """Every package source, parsed once per process, when a test first asks (not at
    collection, where every test worker would pay it)."""
    return {path: ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for path in _files()}



class _Definitions(NamedTuple):
    names: set[str]
    variadic: set[str]


@functools.cache
def _definitions() -> _Definitions:
    """The names of every function, method and class the packages define (Triton kernels
    excluded), and those of them that are variadic: every definition takes ``*args``."""
    names, fixed = set(), set()
    for tree in _trees().values():
        for node in _walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
                if node.args.vararg is None:
                    fixed.add(node.name)
            elif isinstance(node, ast.ClassDef):
                names.add(node.name)
                fixed.add(node.name)
    return _Definitions(names, names - fixed)



def _third_party_names(tree: ast.Module) -> set[str]:
    """Names a module binds by importing from outside the first-party packages."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] not in FIRST_PARTY:
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] not in FIRST_PARTY:
                names.update(alias.asname or alias.name for alias in node.names)
    return names


def _is_wrapper(node: ast.expr) -> bool:
    return any(wrapper in ast.unparse(node) for wrapper in POSITIONAL_WRAPPERS)


def _wrapped_names(tree: ast.Module) -> set[str]:
    """Names a module binds to positional-only wrappers (see :data:`POSITIONAL_WRAPPERS`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(_is_wrapper(decorator) for decorator in node.decorator_list):
                names.add(node.name)
        elif (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
              and _is_wrapper(node.value.func)):
            names.update(target.id for target in node.targets if isinstance(target, ast.Name))
    return names


def _root(node: ast.expr) -> str | None:
    """The name an attribute chain starts from (``torch`` for ``torch.nn.functional.pad``)."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _short_name(call: ast.Call) -> str | None:
    """``f`` for ``f(...)`` and ``obj.f(...)``; ``None`` for any other callee."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None  # kernel[grid](...), f(...)(...)


def _called_name(call: ast.Call, third_party: set[str]) -> str | None:
    """The first-party name ``call`` calls, or ``None``."""
    name = _short_name(call)
    if name is None or name not in _definitions().names:
        return None
    root = call.func.id if isinstance(call.func, ast.Name) else _root(call.func.value)
    return None if root in third_party else name


def _positional_bools(call: ast.Call) -> list[bool]:
    if _short_name(call) in NO_KEYWORDS:
        return []
    return [arg.value for arg in call.args
            if isinstance(arg, ast.Constant) and isinstance(arg.value, bool)]


def _too_positional(call: ast.Call, third_party: set[str], wrapped: set[str]) -> str | None:
    """The first-party name ``call`` calls with more than :data:`MAX_POSITIONAL` positional
    arguments, unless the rules above let it."""
    name = _called_name(call, third_party)
    if name is None or name in _definitions().variadic or name in wrapped:
        return None
    return name if len(call.args) > MAX_POSITIONAL else None


def _violations() -> list[Call]:
    found = []
    for path, tree in _trees().items():
        relative = path.relative_to(ROOT).as_posix()
        if relative in EXEMPT_FILES:
            continue
        third_party, wrapped = _third_party_names(tree), _wrapped_names(tree)
        for node in _walk(tree):
            if not isinstance(node, ast.Call):
                continue
            where, label = f"{relative}:{node.lineno}", ast.unparse(node.func)
            for value in _positional_bools(node):
                found.append(Call(where, label, f"positional {value} (pass it by keyword)"))
            if _too_positional(node, third_party, wrapped):
                found.append(Call(where, label, f"{len(node.args)} positional arguments "
                                                f"(at most {MAX_POSITIONAL}; the rest by keyword)"))
    return found


def test_the_scan_sees_the_packages():
    """The walk reads every package and knows its definitions (guards against an empty scan)."""
    assert len(_trees()) > 100
    assert {"MinGRU", "parallel_scan_log", "linear_recurrence"} <= _definitions().names


def test_the_checks_catch_bad_calls():
    """The rules fire on a positional boolean and on four positional first-party arguments, and
    spare third-party, variadic and wrapped callees."""
    tree = ast.parse(
        "import torch\n"
        "f(x, True)\n"
        "getattr(x, 'y', True)\n"
        "MinGRU(1, 2, 3, 4)\n"
        "torch.MinGRU(1, 2, 3, 4)\n"
        "project(x, 1, 2, 3)\n"
        "_op = common.custom_vjp(g)\n"
        "_op(1, 2, 3, 4)\n"
    )
    third_party, wrapped = _third_party_names(tree), _wrapped_names(tree)
    calls = [node for node in _walk(tree) if isinstance(node, ast.Call)
             and _short_name(node) != "custom_vjp"]
    assert _positional_bools(calls[0]) == [True]
    assert _positional_bools(calls[1]) == []
    assert _too_positional(calls[2], third_party, wrapped) == "MinGRU"
    assert _too_positional(calls[3], third_party, wrapped) is None
    assert "project" in _definitions().variadic and _too_positional(calls[4], third_party, wrapped) is None
    assert "_op" in _definitions().names and _too_positional(calls[5], third_party, wrapped) is None


def test_calls_pass_flags_and_trailing_arguments_by_keyword():
    violations = _violations()
    assert not violations, f"{len(violations)} calls break the call style:\n" + "\n".join(
        f"  {v.where}: {v.name}(...): {v.problem}" for v in violations)


def _positional_launches(tree: ast.Module, relative: str) -> list[Call]:
    """The kernel launches (``kernel[grid](...)``: a call of a subscript) in ``tree`` that
    pass an argument by position or splat ``*args``."""
    return [Call(f"{relative}:{node.lineno}", ast.unparse(node.func),
                 f"{len(node.args)} positional or *-splatted arguments (pass each by keyword)")
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) and node.args]


def _launch_trees() -> dict[str, ast.Module]:
    return {relative: tree for path, tree in _trees().items()
            if (relative := path.relative_to(ROOT).as_posix()).startswith(KEYWORD_LAUNCHES)}


def test_the_launch_check_catches_positional_launches():
    """The launch rule fires on a positional argument and on a ``*`` splat, and spares launches
    by keyword (``**`` splats included) and calls of anything but a subscript."""
    tree = ast.parse(
        "kernel[grid](x, y_ptr=y)\n"
        "kernels.scan_kernel[(n,)](*pointers, MODE=0)\n"
        "kernel[grid](x_ptr=x, **sizes, MODE=0)\n"
        "make(x)(y)\n"
        "table[key].run(x, y)\n"
    )
    found = _positional_launches(tree, "snippet.py")
    assert [(call.where, call.name) for call in found] == [
        ("snippet.py:1", "kernel[grid]"), ("snippet.py:2", "kernels.scan_kernel[n,]")]


def test_pytorch_launches_pass_every_argument_by_keyword():
    trees = _launch_trees()
    launches = sum(isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)
                   for tree in trees.values() for node in ast.walk(tree))
    assert launches >= 20, f"only {launches} launches found under {KEYWORD_LAUNCHES}"
    violations = [call for relative, tree in trees.items()
                  for call in _positional_launches(tree, relative)]
    assert not violations, f"{len(violations)} launches pass arguments by position:\n" + "\n".join(
        f"  {v.where}: {v.name}(...): {v.problem}" for v in violations)
