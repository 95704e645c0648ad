"""The expressivity ladder, ``python -m mingru_benchmarks.ladder OUT [--gpu] [--minutes M]``:
every run is one ``mingru train`` command, its results in ``OUT/<run>/`` (``train_results.json``
and ``train_accuracy.png``; tables with ``python benchmarks/summarize_train.py
OUT/*/train_results.json``).

* the CPU ladder (the default; recorded in ``docs/results/ladder.md``): trained at T = 64,
  evaluated at 64, 256 and 1024;
* ``--gpu``: parity, S3, S5 and MQAR, every mixer, three seeds, trained at T = 256 and
  evaluated at 256, 1024 and 4096.

The ladder runs in jobs: a run whose results are in ``OUT`` is skipped, and a run saved part
way is resumed (``mingru train --resume``). ``--minutes M`` ends this job after about M
minutes of wall time, the run in progress saved; the same command goes on from there. So a
ladder longer than one job is split into several.

Example:
    $ python -m mingru_benchmarks.ladder runs/ladder --gpu --minutes 9   # repeat until done
    $ python benchmarks/summarize_train.py runs/ladder/*/train_results.json
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["RESULTS", "cpu_runs", "gpu_runs", "main", "run_ladder"]

RESULTS = "train_results.json"
# A job stops before a run that would start with less than this left: starting a run costs
# its data and first compiles before any step.
MIN_SECONDS = 30.0


def gpu_runs() -> dict[str, list[str]]:
    """The GPU ladder: ``{run name: mingru train arguments}``."""
    lengths = ["--device", "cuda", "--train-len", "256", "--val-len", "256",
               "--eval-lens", "256,1024,4096"]
    mixers = ("log", "signed", "rotation", "givens", "delta")
    every = [flag for mixer in mixers for flag in ("--mixer", mixer)]
    # Recall needs two layers: MinGRU first (it carries the key to the value), then the memory.
    recall = [flag for mixer in mixers for flag in ("--mixer", f"log,{mixer}")]
    # S5 in one layer needs each token's transition to be a group element: up to four
    # reflections (delta's nh), and more of SO(8) than three Givens rounds reach. The
    # defaults stay for the other tasks (docs/explanation/scan-math.md, "What the transition
    # buys"). S5 is learned at T = 4 but not from T = 16 up, so its runs start at 4 and double
    # the length as each is learned; 256 sequences a step cost a launch-bound GPU what 32 do.
    s5_capable = ["--mixer-kwargs", '{"givens": {"rounds": 8}, "delta": {"nh": 4}}',
                  "--curriculum", "4", "--batch-size", "256"]
    runs: dict[str, list[str]] = {}
    for seed in ("0", "1", "2"):
        common = [*lengths, "--seed", seed]
        runs[f"gpu-parity-seed{seed}"] = ["--task", "parity", "--steps", "1000", *every, *common]
        runs[f"gpu-s3-seed{seed}"] = ["--task", "s3", "--steps", "2000", *every, *common]
        runs[f"gpu-s5-seed{seed}"] = ["--task", "s5", "--steps", "8000", *every, *s5_capable,
                                      *common]
        runs[f"gpu-mqar-seed{seed}"] = ["--task", "mqar", "--layers", "2", "--steps", "2000",
                                        *recall, *common]
    return runs


def cpu_runs() -> dict[str, list[str]]:
    """The CPU ladder recorded in ``docs/results/ladder.md``."""
    runs = {f"parity-seed{s}": ["--seed", str(s)] for s in range(3)}  # SignedMinGRU vs MinGRU
    runs["parity-jax-seed0"] = ["--framework", "jax", "--seed", "0"]  # through Flax
    runs["s3-seed0"] = ["--task", "s3", "--mixer", "givens", "--mixer", "rotation", "--mixer",
                        "log", "--seed", "0"]
    runs["s3-seed1"] = ["--task", "s3", "--mixer", "givens", "--mixer", "signed,givens",
                        "--seed", "1"]
    runs["s5-seed0"] = ["--task", "s5", "--seed", "0"]
    runs["s5-2layer-seed0"] = ["--task", "s5", "--mixer", "givens", "--layers", "2", "--steps",
                               "3000", "--seed", "0"]
    runs["mqar-seed0"] = ["--task", "mqar", "--seed", "0"]  # MinGRU + DeltaMinGRU vs two MinGRU
    return runs


def run_ladder(out: Path, runs: dict[str, list[str]], *, minutes: float | None = None,
               train: Callable[[list[str]], int] | None = None) -> list[str]:
    """Run each of ``runs`` not yet done in ``out`` (resuming one saved part way), until
    ``minutes`` of wall time are spent; the names of the runs left to do (empty: all done).
    ``train(argv) -> exit status`` runs ``mingru train`` (default: in a new process)."""
    if train is None:
        def train(argv: list[str]) -> int:  # a process per run: each starts with a free GPU
            return subprocess.run([sys.executable, "-m", "mingru", "train", *argv]).returncode
    deadline = None if minutes is None else time.monotonic() + 60.0 * minutes
    for name, arguments in runs.items():
        folder = out / name
        if (folder / RESULTS).is_file():
            continue
        budget: list[str] = []
        if deadline is not None:
            left = deadline - time.monotonic()
            if left < MIN_SECONDS:
                break
            budget = ["--max-minutes", f"{left / 60:.3f}"]
        saved = (folder / "checkpoint" / "train_state.json").is_file()
        # A resumed job takes the run's flags from its checkpoint, but its device is the job's.
        argv = (["--resume", str(folder), *_device(arguments)] if saved
                else [*arguments, "--out", str(folder)])
        status = train(["--no-progress", *argv, *budget])
        if status != 0:
            raise RuntimeError(f"run {name} failed (exit status {status}): "
                               f"mingru train {' '.join(argv)}")
        if not (folder / RESULTS).is_file():  # paused on the budget, saved
            break
    return [name for name in runs if not (out / name / RESULTS).is_file()]


def _device(arguments: list[str]) -> list[str]:
    """The ``--device`` flag among a run's ``arguments`` (none: the job's default)."""
    at = arguments.index("--device") if "--device" in arguments else -1
    return arguments[at : at + 2] if at >= 0 else []


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the ladder; exit status 0 whether it finished or paused."""
    p = argparse.ArgumentParser(prog="python -m mingru_benchmarks.ladder",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("out", help="folder of the runs (one subfolder each)")
    p.add_argument("--gpu", action="store_true", help="the GPU ladder (default: the CPU one)")
    p.add_argument("--minutes", type=float, metavar="M",
                   help="end this job after about M minutes, the run in progress saved")
    p.add_argument("--only", help="comma-separated run names (default: all)")
    args = p.parse_args(argv)
    if args.minutes is not None and not args.minutes > 0:
        p.error(f"--minutes must be > 0; got {args.minutes}")
    runs = gpu_runs() if args.gpu else cpu_runs()
    if args.only:
        names = args.only.split(",")
        unknown = [n for n in names if n not in runs]
        if unknown:
            p.error(f"--only: no run named {', '.join(unknown)}; runs: {', '.join(runs)}")
        runs = {n: runs[n] for n in names}
    try:
        left = run_ladder(Path(args.out), runs, minutes=args.minutes)
    except RuntimeError as exc:
        print(f"{p.prog}: error: {exc}", file=sys.stderr)
        return 1
    if left:
        print(f"{len(left)} of {len(runs)} runs left ({', '.join(left)}); run the same command "
              "again to go on")
    else:
        print(f"all {len(runs)} runs done in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
