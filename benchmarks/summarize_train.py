"""Summarize `mingru train --out` results as markdown tables (one per run).

Usage: python benchmarks/summarize_train.py RUN_DIR/train_results.json [...]
"""

from __future__ import annotations

import json
import sys


def table(path: str) -> str:
    res = json.loads(open(path).read())
    cfg = res["config"]
    models = res["models"]
    lines = [
        f"`{res['command']}`",
        "",
        f"Task {res['task_description']}; chance {res['chance']:.3f}; trained at "
        f"T={cfg['train_len']} for {cfg['steps']} steps (batch {cfg['batch_size']}, lr "
        f"{cfg['lr']}, d_model {cfg['d_model']}, {cfg['layers']} layer(s)); seed {cfg['seed']}; "
        f"framework {cfg['framework']}; checkpoint chosen on T={cfg['val_len']}.",
        "",
        "| length | " + " | ".join(f"`{m['mixer']}`" for m in models) + " |",
        "|---|" + "---|" * len(models),
    ]
    for n in models[0]["accuracy"]:
        mark = " (train)" if int(n) == cfg["train_len"] else ""
        lines.append(f"| {n}{mark} | " + " | ".join(f"{m['accuracy'][n]:.3f}" for m in models)
                     + " |")
    lines.append("| train time (s) | " + " | ".join(f"{m['train_seconds']:.0f}" for m in models)
                 + " |")
    lines.append("| checkpoint step | " + " | ".join(str(m["selected_step"]) for m in models)
                 + " |")
    if cfg.get("curriculum"):  # the length each model's curriculum reached (from --curriculum)
        lines.append("| longest train length | "
                     + " | ".join(str(m["curve"][-1]["train_len"]) for m in models) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print("\n\n".join(table(p) for p in sys.argv[1:]))
