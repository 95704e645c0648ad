"""The flags of ``mingru train`` and the :class:`~mingru_cli.config.TrainConfig` they make.

Pure Python (no torch, no jax): ``--help`` and the configuration need neither. Every flag that
sets a configuration field defaults to ``None`` ("not given"), so that a ``--preset`` supplies
the values the command line leaves out and ``--resume`` can tell a changed flag from an
omitted one.

Example:
    >>> from mingru_cli.cli import build_parser
    >>> args = build_parser().parse_args(["train", "--preset", "paper-selective-copy",
    ...                                   "--steps", "100"])
    >>> cfg = train_config(args)
    >>> cfg.task, cfg.steps, cfg.lr
    ('selective-copy', 100, 0.0003)
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from mingru_cli.config import (
    CURRICULUM_ACCURACY,
    MIXER_NAMES,
    PRECISIONS,
    PRESETS,
    SCHEDULES,
    TASK_DEFAULTS,
    TASKS,
    TrainConfig,
    preset_config,
)

__all__ = ["add_train_parser", "train_config"]

# On --resume these come from this command line (or their defaults), not from the saved run,
# which gives every other field unless the command line sets it (--steps, --save-every).
_FROM_COMMAND_LINE = ("device", "threads", "out", "progress", "verbose", "resume", "stop_after",
                      "max_minutes")


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _json_dict(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}: {exc}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


_DESCRIPTION = (
    "Train embedding → MinGRUStack → linear head on a synthetic task at --train-len and "
    "evaluate at --eval-lens (accuracy per token and per sequence). Each --mixer trains its "
    "own model on the same data. --task lm --data FILE --out DIR trains a byte-level MinGRULM "
    "on a text file (windows of --seq-len bytes; validation loss and bits per byte on its last "
    "--val-fraction, up to --val-bytes of it at each evaluation and all of it at the end) and "
    "saves the weights of the lowest validation loss there (save_pretrained, train.json, "
    "train_loss.png). "
    "Long runs: with --out DIR the training state (weights, optimizer, data position, random "
    "state, best validation point) is saved in DIR/checkpoint every --save-every steps and at "
    "the end; --resume DIR continues it with the result of an uninterrupted run. The "
    "learning-rate schedule is set by the run's total --steps, so to split a run into jobs give "
    "the full --steps to the first job and end each job with --stop-after N or --max-minutes "
    "M, e.g. `mingru train --preset paper-selective-copy --out DIR --max-minutes 9`, then "
    "`mingru train --resume DIR --max-minutes 9` until it reports the results. --resume with "
    "a larger --steps extends a run: the schedule is then that of the new total from the "
    "saved step on (the constant schedule is unchanged; the cosine one rises to its value in "
    "the longer run), so only an unchanged --steps equals one uninterrupted run."
)


def add_train_parser(sub: argparse._SubParsersAction, func: Callable[..., int]) -> None:
    """Add the ``train`` subcommand (calling ``func(args)``) to ``sub``."""
    d = TrainConfig()
    defaults = "; ".join(f"{t}: {' vs '.join(v['mixers'])}, {v.get('layers', 1)} layer(s), "
                         f"{v['steps']} steps" for t, v in TASK_DEFAULTS.items())
    p = sub.add_parser(
        "train", help="train on a synthetic state-tracking task and report accuracy per length",
        description=f"{_DESCRIPTION} Default mixers per task: {defaults}.",
    )
    p.add_argument("--preset", choices=tuple(PRESETS),
                   help="a whole configuration; flags given with it override its values. "
                        "paper-selective-copy: the minGRU paper's selective copying run (3 "
                        "layers, d_model 64, mixer expansion 6, no MLP, dropout 0.1, batch 64 as 2×32, 400k steps "
                        "at a constant lr 3e-4, weight decay 0.05, clip 1, learned h0; 4096 "
                        "data positions, 16 tokens of 16; validation every 1000 steps; "
                        "evaluation on 200 batches of 64; float32: add --precision bf16 for about "
                        "half the GPU time)")
    p.add_argument("--task", choices=TASKS, help=f"task (default: {d.task})")
    p.add_argument("--mixer", action="append", dest="mixers", metavar="SPEC",
                   help=f"mixer name ({'|'.join(MIXER_NAMES)}) or a comma-separated list, one "
                        "per layer (e.g. signed,givens); repeat to compare several models")
    p.add_argument("--framework", choices=("torch", "jax"), help="default torch")
    p.add_argument("--layers", type=int, help="layers per model (default 1; 2 for mqar)")
    p.add_argument("--d-model", type=int, help=f"default {d.d_model}")
    p.add_argument("--mlp-expansion", type=int,
                   help=f"MLP width factor in each block (0 = no MLP; default {d.mlp_expansion})")
    p.add_argument("--mixer-expansion", type=int, metavar="N",
                   help="widen each mixer's state to N · d-model, projected back to d-model "
                        f"after the mixer (not for delta; default {d.mixer_expansion})")
    p.add_argument("--mixer-kwargs", type=_json_dict,
                   help='JSON mixer arguments, e.g. \'{"block_size": 4}\' (keyed by mixer name '
                        "for a per-layer list)")
    p.add_argument("--dropout", type=float,
                   help="dropout on each block's mixer and MLP outputs, while training (default 0)")
    p.add_argument("--learnable-h0", action=argparse.BooleanOptionalAction,
                   help="learn the initial state of the log and signed mixers (default off)")
    p.add_argument("--steps", type=int, help="training steps, the run's total (default per task)")
    p.add_argument("--batch-size", type=int,
                   help=f"sequences per optimizer step (default {d.batch_size})")
    p.add_argument("--grad-accum", type=int,
                   help="micro-batches per step: each of --batch-size / N sequences, gradients "
                        "averaged (default 1)")
    p.add_argument("--lr", type=float, help=f"peak learning rate of AdamW (default {d.lr})")
    p.add_argument("--lr-schedule", dest="schedule", choices=SCHEDULES,
                   help=f"cosine: {d.warmup * 100:g}%% linear warm-up, then cosine decay to 10%% of "
                        "--lr; constant: --lr throughout (default cosine)")
    p.add_argument("--weight-decay", type=float, help="AdamW's decoupled weight decay (default 0)")
    p.add_argument("--clip-norm", dest="grad_clip", type=float, metavar="NORM",
                   help=f"clip the gradients' global norm to this (0: off; default {d.grad_clip})")
    p.add_argument("--train-len", "--seq-len", dest="train_len", type=int,
                   help="training sequence length (--task lm: window of bytes; --task "
                        "selective-copy: the data positions before the queries; default 64)")
    p.add_argument("--curriculum", type=int, metavar="START",
                   help="train at START tokens a sequence first, doubling the length up to "
                        "--train-len each time the running training accuracy reaches "
                        f"{CURRICULUM_ACCURACY} (default: --train-len from the start)")
    p.add_argument("--eval-lens", type=_int_list,
                   help="comma-separated evaluation lengths (default 64,256,1024)")
    p.add_argument("--val-len", type=int,
                   help="keep the checkpoint with the best accuracy at this length "
                        "(default 128; 0 = keep the final weights)")
    p.add_argument("--eval-every", type=int, help="validation interval in steps (default steps/20)")
    p.add_argument("--eval-size", type=int,
                   help=f"sequences per evaluation length and in the validation set (not for "
                        f"--task lm: see --val-bytes; default {d.eval_size})")
    p.add_argument("--eval-batch-size", type=int,
                   help=f"sequences per forward pass when evaluating (--task lm: the validation "
                        f"split's stretches, each read from a fresh state; default "
                        f"{d.eval_batch_size})")
    p.add_argument("--seed", type=int, help=f"default {d.seed}")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="the forward's compute precision: fp32, or bf16 (torch: bf16 autocast; "
                        "jax: the modules' bfloat16 dtype), the weights, the optimizer and the "
                        "loss (from the logits) staying float32; about half the step time of "
                        "fp32 on a recent GPU, slower than fp32 on the CPU; checkpoints hold "
                        f"float32 weights either way (default {d.precision})")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default cuda when the framework sees a "
                                     "GPU); a device that is not there is an error")
    p.add_argument("--threads", type=int,
                   help="CPU threads for torch (default 1: fastest for these small models; "
                        "0 = torch's default)")
    p.add_argument("--mqar-pairs", type=int, help=f"default {d.mqar_pairs}")
    p.add_argument("--mqar-keys", type=int, help=f"default {d.mqar_keys}")
    p.add_argument("--mqar-values", type=int, help=f"default {d.mqar_values}")
    p.add_argument("--copy-tokens", type=int,
                   help=f"--task selective-copy: tokens to copy (default {d.copy_tokens})")
    p.add_argument("--copy-vocab", type=int,
                   help="--task selective-copy: vocabulary; tokens to copy are 1 … N-2, the "
                        f"filler N-1, the query 0 (default {d.copy_vocab})")
    p.add_argument("--data", help="--task lm: the text file to train on")
    p.add_argument("--val-fraction", type=float,
                   help="--task lm: the last fraction of the bytes held out (default 0.1)")
    p.add_argument("--val-bytes", type=int, metavar="N",
                   help="--task lm: validation bytes scored at each evaluation point, the start "
                        "of each of the --eval-batch-size equal parts of the validation split "
                        f"(0: all of it; default {d.val_bytes}); the selected weights are "
                        "scored on the whole split at the end")
    p.add_argument("--sample-tokens", type=int,
                   help="--task lm: bytes of the sample printed at the end (0: none)")
    p.add_argument("--out", help="directory for train_results.json, a PNG plot and the training "
                                 "state, checkpoint/ (--task lm: the model and train.json)")
    p.add_argument("--save-every", type=int,
                   help="also save the training state every N steps (it is saved at the end "
                        "and when a job stops; needs --out)")
    p.add_argument("--resume", metavar="DIR",
                   help="continue the run saved in DIR (its --out) from its last saved state; "
                        "its configuration is kept: only --steps (to extend), --stop-after, "
                        "--max-minutes, --save-every, --device and --threads may change")
    p.add_argument("--stop-after", type=int, metavar="N",
                   help="end this job after N training steps, saving the state for --resume")
    p.add_argument("--max-minutes", type=float, metavar="M",
                   help="end this job once M minutes have passed since it started (checked "
                        "before each step; the final evaluation and saving come after), saving "
                        "the state for --resume")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=func)


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """The configuration fields the command line sets (flags left out are not in it)."""
    fields = set(TrainConfig.__dataclass_fields__) - {"progress", "verbose", "preset"}
    given = {name: getattr(args, name) for name in fields
             if getattr(args, name, None) is not None}
    for name in ("val_len", "val_bytes"):  # 0: none (val_len), all (val_bytes)
        if given.get(name) == 0:
            given[name] = None
    if given.get("threads") == 0:
        given["threads"] = None
    return given


def train_config(args: argparse.Namespace) -> TrainConfig:
    """The run ``mingru train`` was asked for: the ``--preset`` values (on ``--resume``, the
    saved run's configuration first), then the flags given. Not yet resolved or checked."""
    given = _given(args)
    run_control = {"device": given.pop("device", "auto"), "progress": not args.no_progress}
    if args.resume is None:
        return preset_config(args.preset, **given, **run_control)
    from mingru_cli._checkpoint import saved_config

    saved = {name: value for name, value in saved_config(args.resume).items()
             if name in TrainConfig.__dataclass_fields__ and name not in _FROM_COMMAND_LINE}
    preset = args.preset or saved.get("preset")
    saved.pop("preset", None)
    fields = {**saved, **(PRESETS.get(preset, {}) if args.preset else {}), **given}
    return TrainConfig(**fields, **run_control, preset=preset)
