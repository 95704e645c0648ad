"""Merge the ``bench.json`` of several ``mingru bench`` runs (e.g. one long suite split into
commands by ``--groups``, ``--shapes`` or ``--precisions``) into one ``bench.json`` +
``bench.md``.

Rows are concatenated in the order given; the model-level groups' speed-ups are recomputed
over the merged rows (so the expensive compile backends can run apart from the rest). The
first run's environment heads the report; every run's command, commit, date and duration are
kept under ``runs`` — merge only runs of one machine and one commit.

    python -m mingru_cli.bench_merge out-host out-mixers-fp32 out-train --out bench-all
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["main", "merge"]


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from several (the first one's environment and settings). The model-level
    groups' speed-ups are recomputed over the merged rows, so runs split by backend (e.g. the
    compile backends apart) still get their ratios."""
    from mingru_cli.bench import MODEL_GROUPS

    if not results:
        raise ValueError("nothing to merge")
    first = results[0]
    notes: dict[str, str] = {}
    groups: list[str] = []
    for r in results:
        for g, note in r.get("group_notes", {}).items():
            notes.setdefault(g, note)
        for g in r.get("settings", {}).get("groups", []):
            if g not in groups:
                groups.append(g)
    rows = [dict(row) for r in results for row in r["rows"]]
    for group, module in MODEL_GROUPS.items():
        module.speedups([row for row in rows if row.get("group") == group])
    return {
        "command": "; ".join(str(r.get("command")) for r in results),
        "environment": first["environment"],
        "settings": {**first["settings"], "groups": groups},
        "copy_bandwidth_GBps": next((r["copy_bandwidth_GBps"] for r in results
                                     if r.get("copy_bandwidth_GBps")), None),
        "seconds": round(sum(r.get("seconds") or 0 for r in results), 1),
        "group_notes": notes,
        "runs": [{"command": r.get("command"), "commit": r["environment"].get("commit"),
                  "date": r["environment"].get("date"), "seconds": r.get("seconds"),
                  "settings": r.get("settings")} for r in results],
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mingru_cli.bench_merge", description=__doc__)
    p.add_argument("inputs", nargs="+", help="bench output directories or bench.json files")
    p.add_argument("--out", required=True, help="directory for the merged bench.json/bench.md")
    args = p.parse_args(argv)
    from mingru_cli.bench import to_markdown

    results = []
    for item in args.inputs:
        path = Path(item)
        path = path / "bench.json" if path.is_dir() else path
        results.append(json.loads(path.read_text()))
    merged = merge(results)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(merged, indent=2, default=str) + "\n")
    (out / "bench.md").write_text(to_markdown(merged) + "\n")
    print(f"wrote {out / 'bench.json'}, {out / 'bench.md'} ({len(merged['rows'])} rows)",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
