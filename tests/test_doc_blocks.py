"""Every ```python block of the README, the tutorials and the how-to guides is a complete
program: pasted alone into a fresh file, it runs on a CPU machine with both frontends
installed.

Each block is one test case, named ``<page>:<line of its opening fence>``, run as
``python block.py`` in a fresh subprocess from an empty folder, with ``MINGRU_SCAN`` and
``TRITON_INTERPRET`` unset (the session sets the latter for the kernel tests; a user's CPU
machine has neither) and one OpenMP thread. The session's ``XLA_FLAGS`` (XLA's backend
optimisation turned down: compile time is the cost of these tiny programs) pass through. A
block that needs more says so on its first line:

* ``# needs a CUDA GPU``: marked ``gpu`` (skipped without a CUDA device, by ``conftest``).
* Blocks that reach no GPU (PyTorch on CPU tensors: no ``cuda`` and no JAX, whose default
  device is the GPU there) are marked ``host``: skipped on a GPU machine, where they would
  run as the CPU suite runs them.
* ``# run with: torchrun --nproc-per-node N FILE``: run under ``torch.distributed.run`` with
  ``N`` local processes (``--standalone``: a free rendezvous port, so parallel test workers
  never collide). On a CPU the block picks the ``gloo`` backend itself; a few gloo processes
  start in seconds, so the block really runs rather than only being compiled.

A JAX block that needs several devices sets
``XLA_FLAGS=--xla_force_host_platform_device_count=N`` in its own first lines, as a user on a
CPU would. A block is skipped when a module it imports (or the framework its first-party
import needs) is not installed, so this file also behaves in a venv with one framework.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs" / "tutorials").glob("*.md")),
    *sorted((ROOT / "docs" / "how-to").glob("*.md")),
]
# Pages whose blocks are not run yet, with the reason (relative to the repository root).
EXCLUDED = {
    "docs/how-to/run-benchmarks.md": "being rewritten around the benchmark harness",
}
# What a first-party import needs installed besides itself (the frontends import their
# framework lazily enough that find_spec alone would not tell).
NEEDS = {
    "mingru": ("torch",),
    "mingru_cli.train": ("torch",),
    "mingru_jax": ("jax", "flax"),
}
TIMEOUT_S = 120
GPU_LINE = "# needs a CUDA GPU"
TORCHRUN_LINE = re.compile(r"# run with: torchrun (?P<args>.+) FILE")
FENCE_OPEN = re.compile(r"^(?P<indent>\s*)```python\s*$")
FENCE_CLOSE = re.compile(r"^\s*```\s*$")


class Block(NamedTuple):
    page: str  # relative to the repository root
    line: int  # of the opening fence
    source: str


def _blocks(page: Path) -> list[Block]:
    """The ```python blocks of ``page``, dedented by their fence's indentation (a block inside
    an admonition or a list item is indented)."""
    name = page.relative_to(ROOT).as_posix()
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opened = FENCE_OPEN.match(lines[i])
        i += 1
        if not opened:
            continue
        start, indent, body = i, len(opened["indent"]), []
        while i < len(lines) and not FENCE_CLOSE.match(lines[i]):
            body.append(lines[i][indent:])
            i += 1
        if i == len(lines):
            raise ValueError(f"{name}:{start}: unclosed ```python fence")
        i += 1
        blocks.append(Block(name, start, "\n".join(body) + "\n"))
    return blocks


def _imports(source: str) -> set[str]:
    """The absolute modules the block imports (``import a.b`` gives ``a.b``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _missing(source: str) -> list[str]:
    """The modules the block needs that are not installed."""
    needed: set[str] = set()
    for module in _imports(source):
        needed.add(module.split(".")[0])
        for prefix, extra in NEEDS.items():
            if module == prefix or module.startswith(prefix + "."):
                needed.update(extra)
    return sorted(name for name in needed if not _installed(name))


def _cases() -> list:
    cases = []
    for page in PAGES:
        for block in _blocks(page):
            # Each block is a fresh interpreter that imports its frameworks and compiles its own
            # kernels and graphs (up to a minute on a loaded GPU machine): started first there.
            marks = [pytest.mark.slow]
            first = block.source.splitlines()[0].strip() if block.source.strip() else ""
            if block.page in EXCLUDED:
                marks.append(pytest.mark.skip(reason=EXCLUDED[block.page]))
            elif missing := _missing(block.source):
                marks.append(pytest.mark.skip(reason=f"needs {', '.join(missing)}"))
            if first == GPU_LINE:
                marks.append(pytest.mark.gpu)
            elif _host_only(block.source):
                marks.append(pytest.mark.host)
            cases.append(pytest.param(block, id=f"{block.page}:{block.line}", marks=marks))
    return cases


def _host_only(source: str) -> bool:
    """Whether a block can only run on the host: PyTorch on CPU tensors, no JAX."""
    return "cuda" not in source and "jax" not in source


def _command(block: Block, path: Path) -> list[str]:
    first = block.source.splitlines()[0].strip()
    if torchrun := TORCHRUN_LINE.fullmatch(first):
        args = shlex.split(torchrun["args"])
        return [sys.executable, "-m", "torch.distributed.run", "--standalone", *args, str(path)]
    return [sys.executable, str(path)]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("MINGRU_SCAN", None)
    env.pop("TRITON_INTERPRET", None)
    # The test workers share the cores: torch's intra-op threads would spin against each
    # other on these tiny tensors (several times the CPU time). torchrun sets the same.
    env["OMP_NUM_THREADS"] = "1"
    return env


def test_pages_exist():
    assert all(page.is_file() for page in PAGES)
    for name in EXCLUDED:
        assert (ROOT / name).is_file(), f"EXCLUDED names a missing page: {name}"


@pytest.mark.parametrize("block", _cases())
def test_block_runs_alone(block: Block, tmp_path: Path):
    path = tmp_path / "doc_block.py"
    path.write_text(block.source, encoding="utf-8")
    try:
        done = subprocess.run(_command(block, path), cwd=tmp_path, env=_env(),
                              capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{block.page}:{block.line} ran longer than {TIMEOUT_S} s")
    if (done.returncode < 0 and not done.stdout
            and "xla_force_host_platform_device_count" in block.source):
        # As in tests/jax/test_sequence_parallel.py: jaxlib 0.11.2's CPU compiler segfaults
        # compiling the first sharded program on a CPU mesh; jax 0.10.2 runs the block.
        pytest.xfail(f"the block died by signal {-done.returncode} before any output: XLA's "
                     "CPU compiler on a host-device mesh, not this library")
    assert done.returncode == 0, (
        f"{block.page}:{block.line} exited with {done.returncode}\n"
        f"--- stdout ---\n{done.stdout[-3000:]}\n--- stderr ---\n{done.stderr[-3000:]}"
    )
