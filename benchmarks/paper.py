"""The paper's runs with their peers, ``python -m mingru_benchmarks.paper <command>``: each
peer trained on exactly ``mingru train``'s data, with its loop and its measurements, so its
numbers sit beside ours.

* ``gpt`` — a byte-level GPT-2 (transformers) against ``mingru train --task lm --data FILE``:
  validation loss and bits per byte on the same validation bytes, tokens per second, both
  trained for the same time (:mod:`mingru_benchmarks.paper_lm`). ``--ours`` runs our
  ``MinGRULM`` through ``mingru train`` with the same rules. Writes ``DIR/gpt.json`` (or
  ``DIR/ours.json``, and ``mingru train``'s files in ``DIR/ours``) and prints the table of
  the runs in ``DIR``.
* ``peer-selective-copy`` — lucidrains' ``minGRU-pytorch`` in the paper's selective-copying
  model against ours, time to a validation accuracy (:mod:`mingru_benchmarks.paper_copy`).
  Writes ``DIR/peer-selective-copy.json`` (or ``DIR/ours-selective-copy.json`` with
  ``--ours``) and prints the table of the runs in ``DIR``. The training state is saved in
  ``DIR/peer-run`` (``DIR/ours-run``): ``--job-minutes M`` (or ``--stop-after N`` steps) ends
  a job with it saved, and the same command with ``--resume`` goes on from there, its times
  carried over, so a run longer than one job is split into several.
* ``page PAGE --json DIR`` — fills the page's ``<!-- bench:paper-lm -->``,
  ``<!-- bench:paper-lm-sample -->`` (our model's sample) and ``<!-- bench:paper-copy-peer -->``
  blocks with the runs in ``DIR`` (GPU, versions, commit, date and commands above each), as
  :mod:`mingru_benchmarks.page` fills the results page; a block without runs is left as it is.

``--precision fp32|bf16`` (as ``mingru train``'s) sets the forward's compute precision of
whichever side runs; give both sides of a comparison the same. Every run is deterministic given
``--seed`` (on one device). The parser is pure Python; torch,
transformers and the peer are imported when a command runs.

Example:
    $ python -m mingru_benchmarks.paper gpt --data input.txt --d-model 384 --layers 6 \\
        --heads 6 --train-len 256 --max-minutes 10 --out runs/shakespeare
    $ python -m mingru_benchmarks.paper gpt --ours --data input.txt --d-model 384 \\
        --layers 12 --train-len 256 --max-minutes 10 --out runs/shakespeare
    $ python -m mingru_benchmarks.paper peer-selective-copy --out runs/copy --job-minutes 9
    $ python -m mingru_benchmarks.paper peer-selective-copy --out runs/copy --job-minutes 9 --resume
    $ python -m mingru_benchmarks.paper peer-selective-copy --ours --out runs/copy
    $ python -m mingru_benchmarks.paper page docs/results/paper.md --json runs/shakespeare
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mingru_benchmarks.run import environment
from mingru_cli.config import PRECISIONS

__all__ = ["build_parser", "copy_markdown", "copy_table", "lm_markdown", "lm_sample", "lm_table",
           "main"]

PROG = "python -m mingru_benchmarks.paper"
LM_FILES = {"ours": "ours.json", "gpt2": "gpt.json"}
COPY_FILES = {"ours": "ours-selective-copy.json", "peer": "peer-selective-copy.json"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage block
        raise ValueError(message)


def _common(p: argparse.ArgumentParser) -> None:
    """The flags of both commands; a flag named after a ``TrainConfig`` field sets it."""
    p.add_argument("--out", required=True, metavar="DIR", help="folder of the JSON files")
    p.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default: cuda if any)")
    p.add_argument("--seed", type=int, help="data, initialisation and dropout (default 0)")
    p.add_argument("--max-minutes", type=float, metavar="M",
                   help="training-step time, evaluation excluded: gpt sets --steps from a "
                        "timing probe to fill it; peer-selective-copy stops once past it "
                        "(checked at evaluation points)")
    p.add_argument("--threads", type=int, help="CPU threads (default 1; 0: torch's default)")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument("--ours", action="store_true",
                   help="run our model through the same rules instead of the peer")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="compute precision of the forward, as in mingru train, for whichever "
                        "side runs: give both sides the same (default fp32)")
    for flag, kind in (("--steps", int), ("--eval-every", int), ("--train-len", int),
                       ("--d-model", int), ("--layers", int), ("--batch-size", int),
                       ("--grad-accum", int), ("--lr", float), ("--weight-decay", float),
                       ("--dropout", float), ("--mixer-expansion", int),
                       ("--mlp-expansion", int), ("--eval-batch-size", int)):
        p.add_argument(flag, type=kind, help="as in mingru train")


def build_parser() -> argparse.ArgumentParser:
    """The commands and their flags (pure Python)."""
    p = _Parser(prog=PROG, description="Train the paper's peers with mingru train's data, loop "
                "and measurements; write JSON and print them beside ours.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    gpt = sub.add_parser("gpt", help="transformers' GPT-2 against mingru train --task lm")
    _common(gpt)
    gpt.add_argument("--data", required=True, help="the text file (as mingru train --data)")
    gpt.add_argument("--heads", type=int, help="attention heads (default d_model / 64, ≥ 1)")
    gpt.add_argument("--params", type=int, metavar="N",
                     help="size the GPT's d_model (a multiple of --head-dim) to N parameters "
                          "in all, at --layers (instead of --d-model)")
    gpt.add_argument("--head-dim", type=int, default=64, help="with --params (default 64)")
    gpt.add_argument("--val-stride", type=int, metavar="S",
                     help="bytes between the GPT's validation windows (default train_len / 2)")
    gpt.add_argument("--probe-steps", type=int, default=50,
                     help="timed steps of the probe that sets --steps from --max-minutes")
    gpt.add_argument("--mixer", help="--ours: mixer spec (default log)")
    gpt.add_argument("--sample-tokens", type=int, default=500,
                     help="--ours: bytes generated from the kept weights at the end (default 500)")
    gpt.add_argument("--lr-schedule", dest="schedule", choices=("cosine", "constant"))
    gpt.add_argument("--clip-norm", dest="grad_clip", type=float)
    gpt.add_argument("--val-fraction", type=float)
    gpt.add_argument("--val-bytes", type=int, help="bytes per evaluation point (0: all)")
    copy = sub.add_parser("peer-selective-copy",
                          help="minGRU-pytorch against ours: time to a selective-copy accuracy")
    _common(copy)
    copy.add_argument("--target-accuracy", type=float, default=0.99,
                      help="stop at this validation token accuracy (default 0.99)")
    copy.add_argument("--eval-size", type=int, help="validation sequences (preset: 12800)")
    copy.add_argument("--warmup-steps", type=int, default=3,
                      help="untimed steps on a thrown-away copy first (default 3)")
    copy.add_argument("--job-minutes", type=float, metavar="M",
                      help="end this job after M minutes of wall time, its training state saved "
                           "in DIR/ours-run or DIR/peer-run; --resume goes on from there")
    copy.add_argument("--stop-after", dest="job_steps", type=int, metavar="N",
                      help="end this job after N steps, saved as with --job-minutes")
    copy.add_argument("--resume", dest="resume_saved", action="store_true",
                      help="continue this side's run saved in --out (the same flags; "
                           "--max-minutes and --job-minutes may change)")
    page = sub.add_parser("page", help="fill a page's paper blocks from the runs' JSON")
    page.add_argument("page", help="the markdown page, rewritten in place")
    page.add_argument("--json", required=True, metavar="DIR",
                      help="the folder the runs wrote (their --out)")
    return p


_CONTROL = {"command", "out", "device", "max_minutes", "threads", "no_progress", "ours", "data",
            "heads", "params", "head_dim", "val_stride", "probe_steps", "mixer",
            "target_accuracy", "warmup_steps", "job_minutes", "job_steps", "resume_saved"}


# Configuration fields the selective-copy run does not read, left out of its JSON.
_NOT_FOR_COPY = ("eval_lens", "out", "progress", "verbose", "resume", "data", "val_fraction",
                 "val_bytes", "sample_tokens", "mqar_pairs", "mqar_keys", "mqar_values",
                 "save_every", "stop_after", "max_minutes")


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    """The ``TrainConfig`` fields the command line gives (flags left out are not in it)."""
    given = {k: v for k, v in vars(args).items() if k not in _CONTROL and v is not None}
    if given.get("val_bytes") == 0:
        given["val_bytes"] = None
    threads = args.threads if args.threads is not None else 1
    return {**given, "device": args.device, "threads": threads or None,
            "progress": not args.no_progress}


def _write(out: Path, name: str, result: dict[str, Any]) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    return path


def _runs(out: Path, files: dict[str, str]) -> list[dict[str, Any]]:
    return [json.loads((out / f).read_text()) for f in files.values() if (out / f).is_file()]


def run_gpt_command(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """``gpt``: the GPT (or, with ``--ours``, our model) on ``--data``; its summary."""
    from mingru_cli.config import TrainConfig

    out = Path(args.out)
    fields = _fields(args)
    cfg = TrainConfig(task="lm", data=args.data, mixers=[args.mixer or "log"],
                      out=str(out / "ours"), **fields)
    minutes = None if cfg.steps is not None else args.max_minutes
    if cfg.steps is not None and args.max_minutes is not None:
        raise ValueError("give --steps or --max-minutes, not both: --max-minutes sets --steps "
                         "from a timing probe")
    from mingru_benchmarks import paper_lm

    if args.ours:
        if args.params is not None or args.heads is not None:
            raise ValueError("--params and --heads size the GPT; --ours takes --d-model, "
                             "--layers and --mlp-expansion")
        result = paper_lm.run_ours(cfg, minutes=minutes, probe=args.probe_steps, command=command)
    else:
        from mingru_cli import train

        layers = cfg.resolved().layers  # the --task lm default when not given
        if args.params is not None:
            cfg.d_model = paper_lm.gpt_width_for(args.params, layers=layers,
                                                 train_len=cfg.train_len, head_dim=args.head_dim)
        heads = args.heads or (cfg.d_model // args.head_dim if args.params is not None
                               else max(1, cfg.d_model // 64))
        cfg = dataclasses.replace(cfg, layers=layers, out=str(out))
        with train.session(cfg):
            result, _ = paper_lm.run_gpt(cfg, heads=heads, stride=args.val_stride or max(
                1, cfg.train_len // 2), minutes=minutes, probe=args.probe_steps)
    result.update(command=command, environment=environment(result["config"]["device"]))
    name = LM_FILES["ours" if args.ours else "gpt2"]
    print(lm_table(_runs(out, {k: v for k, v in LM_FILES.items() if v != name}) + [result]))
    print(f"wrote {_write(out, name, result)}")
    return result


def run_copy_command(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """``peer-selective-copy``: the peer's model (or ours) to ``--target-accuracy``."""
    from mingru_benchmarks import paper_copy
    from mingru_cli import train
    from mingru_cli._checkpoint import RunCheckpoint
    from mingru_cli._train_common import build_task
    from mingru_cli.config import preset_config

    started = time.monotonic()  # --job-minutes counts from here
    fields = _fields(args)
    if not args.ours:
        paper_copy.peer_module()  # a missing package fails before any work
    if not 0 < args.target_accuracy <= 1:
        raise ValueError(f"--target-accuracy must be in (0, 1]; got {args.target_accuracy}")
    if args.job_minutes is not None and not 0 < args.job_minutes < float("inf"):
        raise ValueError(f"--job-minutes must be a finite number > 0; got {args.job_minutes}")
    side = "ours" if args.ours else "peer"
    saved = str(Path(args.out) / f"{side}-run")
    cfg = preset_config("paper-selective-copy", **fields, out=saved,
                        resume=saved if args.resume_saved else None, max_minutes=args.job_minutes,
                        stop_after=args.job_steps)
    cfg = dataclasses.replace(cfg, val_len=cfg.train_len, eval_lens=[cfg.train_len]).resolved()
    with train.session(cfg):
        checkpoint = RunCheckpoint(cfg, started)  # a resumed run's flags are checked here
        task = build_task(cfg)
        counts = paper_copy.parameter_counts(cfg, task)
        val = paper_copy.validation_set(task, cfg)
        record = paper_copy.time_to_target(cfg, task, val, ours=args.ours,
                                           target=args.target_accuracy,
                                           max_minutes=args.max_minutes,
                                           warmup=args.warmup_steps, checkpoint=checkpoint)
    if record["paused_at_step"] is not None:
        print(f"paused {side} at step {record['paused_at_step']} (saved in {saved}); continue "
              "with the same command and --resume")
    config = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in _NOT_FOR_COPY}
    result = {"model": "ours" if args.ours else "peer", "params": counts,
              "max_minutes": args.max_minutes, "warmup_steps": args.warmup_steps, **record,
              "validation": {"sequences": int(val.tokens.shape[0]), "length": cfg.val_len,
                             "scored_tokens": int(val.mask.sum())},
              "config": config, "command": command, "environment": environment(cfg.device)}
    name = COPY_FILES[result["model"]]
    out = Path(args.out)
    print(copy_table(_runs(out, {k: v for k, v in COPY_FILES.items() if v != name}) + [result]))
    print(f"wrote {_write(out, name, result)}")
    return result


def run_page_command(args: argparse.Namespace, command: str) -> list[str]:
    """``page``: fill ``args.page``'s paper blocks from the runs in ``args.json``; the names of
    the blocks left without runs."""
    from mingru_benchmarks import page, tables

    folder, path = Path(args.json), Path(args.page)
    if not folder.is_dir():
        raise ValueError(f"--json {folder}: no such folder")
    if not path.is_file():
        raise ValueError(f"{path}: no such page")
    blocks = {"paper-lm": (LM_FILES, lm_markdown),
              "paper-lm-sample": ({"ours": LM_FILES["ours"]}, lm_sample),
              "paper-copy-peer": (COPY_FILES, copy_markdown)}

    def render(name: str) -> list[str] | None:
        if name not in blocks:
            return None
        files, content = blocks[name]
        runs = _runs(folder, files)
        lines = content(runs) if runs else []
        return [tables.stamp(runs), "", *lines] if lines else None

    text, missing = page.fill_blocks(path.read_text(), render)
    path.write_text(text)
    if missing:
        print(f"no runs for block(s): {', '.join(missing)}", file=sys.stderr)
    return missing


Column = tuple[str, Callable[[dict[str, Any]], str]]

LM_COLUMNS: tuple[Column, ...] = (
    ("model", lambda r: r["model"]),
    ("parameters (all / non-embedding)",
     lambda r: f"{r['params']['total']:,} / {r['params']['non_embedding']:,}"),
    ("steps", lambda r: f"{r['steps']:,}"),
    ("training wall s", lambda r: f"{r['train_seconds']:.1f}"),
    ("ms/step", lambda r: f"{1e3 * r['step_seconds'] / max(1, r['steps']):.2f}"),
    ("tokens/s", lambda r: f"{r['tokens_per_second']:,.0f}"),
    ("val loss (nats/byte)", lambda r: f"{r['val_loss']:.4f}"),
    ("val bpb", lambda r: f"{r['val_bpb']:.4f}"),
    ("kept step", lambda r: str(r["selected_step"])),
    ("precision", lambda r: _precision(r)),
    ("seed", lambda r: str(r["config"].get("seed"))),
)
"""The language-model table: a header and a cell per run (:func:`lm_table`, :func:`lm_markdown`)."""

COPY_COLUMNS: tuple[Column, ...] = (
    ("model", lambda r: r["model"]),
    ("parameters", lambda r: f"{r['params'][r['model']]['total']:,}"),
    ("target", lambda r: f"{r['target_accuracy']:.3f}"),
    ("reached at step", lambda r: "—" if r["step_at_target"] is None else str(r["step_at_target"])),
    ("trained steps / s", lambda r: f"{r['steps']:,} / {r['train_seconds']:.0f}"
                                    + (" (paused)" if r.get("paused_at_step") is not None else "")),
    ("s to target", lambda r: _seconds(r["seconds_to_target"])),
    ("with evaluation", lambda r: _seconds(r["seconds_to_target_with_eval"])),
    ("ms/step", lambda r: f"{1e3 * r['seconds_per_step']:.2f}"),
    ("best accuracy", lambda r: f"{r['best_val_acc'] or 0:.4f}"),
    ("precision", lambda r: _precision(r)),
    ("seed", lambda r: str(r["config"].get("seed"))),
)
"""The selective-copy table; its headline is the training time to the target, evaluation
excluded."""


def _markdown(columns: tuple[Column, ...], runs: list[dict[str, Any]]) -> list[str]:
    rows = [[cell(r) for _, cell in columns] for r in runs]
    return ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns),
            *("| " + " | ".join(row) + " |" for row in rows)]


def _plain(columns: tuple[Column, ...], runs: list[dict[str, Any]]) -> str:
    """Aligned columns: the first to the left, numbers to the right."""
    table = [[h for h, _ in columns], *([cell(r) for _, cell in columns] for r in runs)]
    widths = [max(len(row[i]) for row in table) for i in range(len(columns))]
    return "\n".join("  ".join(text.ljust(w) if i == 0 else text.rjust(w)
                               for i, (text, w) in enumerate(zip(row, widths, strict=True)))
                     for row in table)


def lm_markdown(runs: list[dict[str, Any]]) -> list[str]:
    """The language-model runs as the page's markdown table (:data:`LM_COLUMNS`)."""
    return _markdown(LM_COLUMNS, runs)


def copy_markdown(runs: list[dict[str, Any]]) -> list[str]:
    """The selective-copy runs as the page's markdown table (:data:`COPY_COLUMNS`)."""
    return _markdown(COPY_COLUMNS, runs)


def lm_sample(runs: list[dict[str, Any]]) -> list[str]:
    """Our language model's sample as the page shows it: the prompt (from the validation
    split) and what the kept weights generated after it, in one text block; none when no run
    holds a sample."""
    sample = next((r["sample"] for r in runs if r.get("sample")), None)
    if sample is None:
        return []
    settings = ", ".join(f"{k} {sample[k]}" for k in ("temperature", "top_p", "top_k", "seed")
                         if sample.get(k) is not None)
    # Control characters (a generated carriage return, say) would not survive the page: each
    # shows as U+FFFD, as bytes that are not UTF-8 already do.
    shown = "".join(c if c.isprintable() or c in "\n\t" else "\ufffd"
                    for c in sample["prompt"] + sample["text"])
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall("`+", shown)), default=0))
    return [f"Prompt: the first {len(sample['prompt'])} characters of the validation split; "
            f"then {len(sample['text'])} generated ({settings}; characters that are not "
            "printable text shown as \ufffd).", "", f"{fence}text", shown, fence]


def lm_table(runs: list[dict[str, Any]]) -> str:
    """The language-model runs side by side, as printed after a run (:data:`LM_COLUMNS`)."""
    return _plain(LM_COLUMNS, runs)


def copy_table(runs: list[dict[str, Any]]) -> str:
    """The selective-copy runs side by side, as printed after a run (:data:`COPY_COLUMNS`)."""
    return _plain(COPY_COLUMNS, runs)


def _precision(run: dict[str, Any]) -> str:
    """A run's compute precision (``fp32`` where its JSON has none: the default)."""
    return run["config"].get("precision", "fp32")


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the command; errors are one line on stderr (exit status 1)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {"gpt": run_gpt_command, "peer-selective-copy": run_copy_command,
                "page": run_page_command}
    try:
        args = build_parser().parse_args(argv)
        commands[args.command](args, f"{PROG} {shlex.join(argv)}")
        return 0
    except (ValueError, RuntimeError) as exc:  # flags, devices, missing packages
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
