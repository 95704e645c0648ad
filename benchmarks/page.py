"""Fill the results page's generated blocks from the runner's JSON files.

Every block of the page between a ``<!-- bench:NAME -->`` line and a ``<!-- /bench:NAME -->``
line is replaced by table ``NAME`` (a suite: ``headline``, ``ops``, ``mixers``, ...), built
from every ``*.json`` in ``--json DIR`` whose run included that suite, under one line naming
the GPU, the versions, the commit, the date and the command. A block without data is left as
it is (and named on stderr); the prose around the blocks is never touched.

    python -m mingru_benchmarks.page docs/benchmarks.md --json docs/benchmarks/h100
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mingru_benchmarks import tables

__all__ = ["fill", "fill_blocks", "main"]

BLOCK = re.compile(r"^<!-- bench:(?P<name>[\w-]+) -->\n(?P<body>.*?)^<!-- /bench:(?P=name) -->$",
                   re.M | re.S)


def fill_blocks(page: str, render: Callable[[str], list[str] | None]) -> tuple[str, list[str]]:
    """Each block's body replaced by ``render(name)``'s lines; a block ``render`` gives
    ``None`` is left as it is. Returns ``(new page, names of the blocks left)``."""
    missing: list[str] = []

    def replace(m: re.Match[str]) -> str:
        name = m["name"]
        body = render(name)
        if body is None:
            missing.append(name)
            return m[0]
        return f"<!-- bench:{name} -->\n" + "\n".join(body) + f"\n<!-- /bench:{name} -->"

    return BLOCK.sub(replace, page), missing


def fill(page: str, results: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """``(new page, names of the blocks left without data)``: block ``NAME`` gets table
    ``NAME`` of the results whose run included that suite."""

    def render(name: str) -> list[str] | None:
        runs = [r for r in results if name in r.get("suites", ())]
        if not runs:
            return None
        rows = [row for r in runs for row in r["rows"]]
        return [tables.stamp(runs), "", *tables.table(name, rows)]

    return fill_blocks(page, render)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mingru_benchmarks.page",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("page", help="the markdown page, rewritten in place")
    p.add_argument("--json", required=True, help="folder of the runner's JSON files")
    args = p.parse_args(argv)
    files = sorted(Path(args.json).glob("*.json"))
    if not files:
        print(f"{p.prog}: error: no *.json in {args.json}", file=sys.stderr)
        return 1
    page = Path(args.page)
    text, missing = fill(page.read_text(), [json.loads(f.read_text()) for f in files])
    page.write_text(text)
    if missing:
        print(f"no data for block(s): {', '.join(missing)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
