"""What one ``mingru train`` run is: :class:`TrainConfig`, the task and mixer names, the
per-task defaults and the mixer-spec parsing. Pure Python (no torch, no jax), so the command
line can build its parser and ``--help`` with either framework alone, and both training paths
(:mod:`mingru_cli.train`, :mod:`mingru_cli.train_jax`) share it.

Example:
    >>> from mingru_cli.config import TrainConfig
    >>> cfg = TrainConfig(task="mqar").resolved()
    >>> cfg.mixers, cfg.layers, cfg.steps
    (['log,delta', 'log'], 2, 1000)
    >>> paper = preset_config("paper-selective-copy").resolved()
    >>> paper.train_len, paper.batch_size, paper.grad_accum, paper.steps, paper.mixer_expansion
    (4096, 64, 2, 400000, 6)
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

from mingru_kernels._spec import check_mixer_expansion

__all__ = [
    "MIXER_NAMES",
    "PRECISIONS",
    "PRESETS",
    "RUN_CONTROL",
    "SCHEDULES",
    "TASKS",
    "TASK_DEFAULTS",
    "TrainConfig",
    "check_precision",
    "flag_name",
    "parse_mixer_spec",
    "preset_config",
    "stack_arguments",
]

MIXER_NAMES = ("log", "signed", "rotation", "givens", "delta")

TASKS = ("parity", "s3", "s5", "mqar", "selective-copy", "lm")

SCHEDULES = ("cosine", "constant")

# --precision: "fp32" computes in float32; "bf16" computes the forward in bfloat16 over float32
# weights (PyTorch: torch.autocast; Flax: the modules' dtype), the loss in float32 from the
# logits, the optimizer in float32 on float32 weights.
PRECISIONS = ("fp32", "bf16")

# --curriculum START: training starts at START tokens a sequence and the length doubles (capped
# at --train-len) each time the running average of the training accuracy reaches this. One
# DeltaProduct layer learns S5 at T = 4 within 2,000 steps, but not from T = 16 up, where most
# positions are long products whose labels look random until the group is learned
# (docs/explanation/scan-math.md, "What the transition buys").
CURRICULUM_ACCURACY = 0.99

# --task lm scores this many validation bytes at each evaluation point (an evenly spread part
# of a larger split; mingru_cli.tasks.ByteText.validation), and the whole split at the end.
# The default model reads them in about 1 s on one CPU thread, about 35 of its training steps
# there; on a GPU, a few forwards of rows × 1024 bytes.
LM_VAL_BYTES = 1 << 17

# Per-task defaults used when the command line leaves a choice open. They were picked by
# measurement on a 2-core CPU (see docs/results/ladder.md) so the no-flag demo is quick and
# shows the capability gap.
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "parity": {"mixers": ["signed", "log"], "steps": 300},
    "s3": {"mixers": ["givens", "log"], "steps": 1000},
    "s5": {"mixers": ["givens", "log"], "steps": 2000},
    # Recall needs two layers: the first carries the key into the value's position, the
    # second stores the pair. MinGRU is the first layer in both, only the memory differs.
    "mqar": {"mixers": ["log,delta", "log"], "layers": 2, "steps": 1000},
    # Copy the --copy-tokens tokens scattered in --train-len filler positions, in order. Not
    # tuned: on 2 CPU cores (about 30 s) it reaches a token accuracy of about 0.25 (chance
    # 0.07); the paper's run is --preset paper-selective-copy.
    "selective-copy": {"mixers": ["log"], "layers": 2, "steps": 1000},
    # A byte-level language model on --data: one model, saved with save_pretrained.
    "lm": {"mixers": ["log"], "layers": 2, "steps": 1000},
}

# Whole configurations by name (``--preset``); flags given with a preset override its values.
# "paper-selective-copy": the selective-copying run of Feng et al. 2024 ("Were RNNs All We
# Needed?", arXiv:2410.01201) as its official code configures it (BorealisAI/minRNNs,
# configs/selective_copy.yaml and configs/default.yaml): 3 layers, d_model 64, "expansion 6"
# (a minGRU state of 6 · 64 = 384, projected back to 64), dropout 0.1, an effective batch of
# 64 as 2 accumulated micro-batches of 32, 400k steps of AdamW at a constant 3e-4 with weight
# decay 0.05, clipping at norm 1, a learned initial state, no feed-forward block; 4096 data
# positions, 16 tokens to copy from a vocabulary of 16; validation every 1000 steps and
# evaluation on 200 batches of 64 sequences. What our model cannot match is listed in
# mingru_cli.tasks.SelectiveCopyTask.
PRESETS: dict[str, dict[str, Any]] = {
    "paper-selective-copy": {
        "task": "selective-copy", "mixers": ["log"], "layers": 3, "d_model": 64,
        "mixer_expansion": 6, "mlp_expansion": 0, "dropout": 0.1, "learnable_h0": True,
        "batch_size": 64, "grad_accum": 2, "steps": 400_000, "lr": 3e-4, "schedule": "constant",
        "weight_decay": 0.05, "grad_clip": 1.0, "train_len": 4096, "eval_lens": [4096],
        "val_len": 4096, "eval_every": 1000, "eval_size": 200 * 64, "eval_batch_size": 64,
        "copy_tokens": 16, "copy_vocab": 16,
    },
}

# Fields that steer one job of a run, not its result: a resumed run may change these (and
# ``steps``, to extend it); every other field must match the saved run.
RUN_CONTROL = ("steps", "device", "threads", "out", "progress", "verbose", "preset", "resume",
               "save_every", "stop_after", "max_minutes")

# The flag of a field where it is not ``--`` + the field name with dashes.
_FLAGS = {"mixers": "--mixer", "grad_clip": "--clip-norm", "schedule": "--lr-schedule"}


def flag_name(field_name: str) -> str:
    """The command-line flag of a :class:`TrainConfig` field (``"grad_clip"`` → ``"--clip-norm"``)."""
    return _FLAGS.get(field_name, "--" + field_name.replace("_", "-"))


@dataclass
class TrainConfig:
    """Everything one ``mingru train`` invocation needs. Field names match the CLI flags."""

    task: str = "parity"
    mixers: list[str] | None = None  # None → TASK_DEFAULTS[task]["mixers"]
    framework: str = "torch"
    layers: int | None = None  # None → TASK_DEFAULTS or 1
    d_model: int = 64
    mlp_expansion: int = 2
    mixer_expansion: int = 1  # the mixers' state is mixer_expansion · d_model wide
    mixer_kwargs: dict[str, Any] = field(default_factory=dict)
    steps: int | None = None  # None → TASK_DEFAULTS[task]["steps"]
    batch_size: int = 32
    lr: float = 3e-3
    schedule: str = "cosine"  # "cosine": warm-up, then cosine decay; "constant": lr throughout
    weight_decay: float = 0.0
    warmup: float = 0.05
    grad_clip: float = 1.0  # 0: no clipping
    grad_accum: int = 1  # micro-batches per step; each has batch_size // grad_accum sequences
    dropout: float = 0.0
    learnable_h0: bool = False
    train_len: int = 64
    curriculum: int | None = None  # start at this length, doubling up to train_len (CURRICULUM_ACCURACY)
    eval_lens: list[int] = field(default_factory=lambda: [64, 256, 1024])
    val_len: int | None = 128
    eval_every: int | None = None  # None → max(10, steps // 20)
    eval_size: int = 128
    eval_batch_size: int = 64  # sequences per forward pass when evaluating
    seed: int = 0
    precision: str = "fp32"  # one of PRECISIONS: the forward's compute precision
    device: str = "cpu"
    threads: int | None = 1  # CPU intra-op threads; None = torch's default
    out: str | None = None
    progress: bool = True
    verbose: bool = True
    mqar_pairs: int = 8
    mqar_keys: int = 32
    mqar_values: int = 32
    copy_tokens: int = 16  # --task selective-copy: tokens to copy
    copy_vocab: int = 16  # --task selective-copy: vocabulary (tokens 1 … copy_vocab - 2)
    data: str | None = None  # --task lm: the text file
    val_fraction: float = 0.1  # --task lm: the last fraction of the file's bytes, held out
    val_bytes: int | None = LM_VAL_BYTES  # --task lm: validation bytes per evaluation; None: all
    sample_tokens: int = 200  # --task lm: bytes of the sample printed after training
    preset: str | None = None  # the --preset the values came from (a label)
    save_every: int | None = None  # checkpoint the training state every N steps (and at the end)
    resume: str | None = None  # continue the run saved in this --out folder
    stop_after: int | None = None  # train at most this many steps in this job, then save and stop
    max_minutes: float | None = None  # stop (and save) once this job has trained this long

    def resolved(self) -> TrainConfig:
        """A copy with task defaults filled in and every field checked."""
        cfg = copy.deepcopy(self)
        defaults = TASK_DEFAULTS.get(cfg.task)
        if defaults is None:
            raise ValueError(f"task must be one of {', '.join(TASK_DEFAULTS)}; got {cfg.task!r}")
        if cfg.mixers is None:
            cfg.mixers = list(defaults["mixers"])
        if cfg.layers is None:
            cfg.layers = int(defaults.get("layers", 1))
        if cfg.steps is None:
            cfg.steps = int(defaults["steps"])
        if cfg.framework not in ("torch", "jax"):
            raise ValueError(f"framework must be 'torch' or 'jax'; got {cfg.framework!r}")
        for name, low in (("layers", 1), ("d_model", 2), ("steps", 1), ("batch_size", 1),
                          ("train_len", 1), ("eval_size", 1), ("mlp_expansion", 0),
                          ("grad_accum", 1), ("eval_batch_size", 1), ("copy_tokens", 1),
                          ("copy_vocab", 3)):
            value = getattr(cfg, name)
            if not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int ≥ {low}; got {value!r}")
        if not (cfg.lr > 0 and math.isfinite(cfg.lr)):
            raise ValueError(f"lr must be a finite number > 0; got {cfg.lr!r}")
        if not cfg.eval_lens or any(int(n) < 1 for n in cfg.eval_lens):
            raise ValueError(f"eval_lens must be a non-empty list of lengths ≥ 1; got {cfg.eval_lens!r}")
        cfg.eval_lens = [int(n) for n in cfg.eval_lens]
        if cfg.val_len is not None and cfg.val_len < 1:
            raise ValueError(f"val_len must be ≥ 1 or None; got {cfg.val_len!r}")
        if cfg.eval_every is None:
            cfg.eval_every = max(10, cfg.steps // 20)
        for spec in cfg.mixers:
            check_mixer_expansion(cfg.mixer_expansion, parse_mixer_spec(spec, cfg.layers))
        _check_training(cfg)
        _check_jobs(cfg)
        if cfg.task == "lm":
            _check_lm(cfg)
        return cfg


def preset_config(preset: str | None, **fields: Any) -> TrainConfig:
    """A :class:`TrainConfig` with the values of ``preset`` (a key of :data:`PRESETS`, or
    ``None``), overridden by ``fields``.

    Example:
        >>> preset_config("paper-selective-copy", steps=10).steps
        10
    """
    if preset is None:
        return TrainConfig(**fields)
    if preset not in PRESETS:
        raise ValueError(f"--preset must be one of {', '.join(PRESETS)}; got {preset!r}")
    return TrainConfig(**{**copy.deepcopy(PRESETS[preset]), **fields, "preset": preset})


def check_precision(precision: str) -> None:
    """A ``ValueError`` naming ``--precision`` unless ``precision`` is one of
    :data:`PRECISIONS` (the training paths' precision helpers check through it too)."""
    if precision not in PRECISIONS:
        raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)}; got {precision!r}")


def _check_training(cfg: TrainConfig) -> None:
    """The optimisation flags: precision, schedule, dropout, clipping, curriculum,
    accumulation."""
    check_precision(cfg.precision)
    if cfg.schedule not in SCHEDULES:
        raise ValueError(f"--lr-schedule must be one of {', '.join(SCHEDULES)}; got {cfg.schedule!r}")
    if not 0 <= cfg.dropout < 1:
        raise ValueError(f"--dropout must be in [0, 1); got {cfg.dropout!r}")
    if not (cfg.grad_clip >= 0 and math.isfinite(cfg.grad_clip)):
        raise ValueError(f"--clip-norm must be a finite number ≥ 0 (0: off); got {cfg.grad_clip!r}")
    if cfg.curriculum is not None:
        if not isinstance(cfg.curriculum, int) or not 1 <= cfg.curriculum <= cfg.train_len:
            raise ValueError(f"--curriculum must be an int in [1, --train-len {cfg.train_len}]; "
                             f"got {cfg.curriculum!r}")
        if cfg.task == "lm":
            raise ValueError("--curriculum: --task lm trains on windows of --train-len; leave "
                             "--curriculum out")
    if cfg.batch_size % cfg.grad_accum:
        raise ValueError(f"--grad-accum {cfg.grad_accum} must divide --batch-size "
                         f"{cfg.batch_size} (each micro-batch is batch-size / grad-accum)")


def _check_jobs(cfg: TrainConfig) -> None:
    """Checkpointing and resuming: every such flag needs the ``--out`` folder."""
    if cfg.resume is not None:
        if cfg.out is None:
            cfg.out = cfg.resume
        elif cfg.out != cfg.resume:
            raise ValueError(f"--out {cfg.out!r} differs from --resume {cfg.resume!r}: a resumed "
                             "run goes on saving where it was saved; leave --out out")
    for name, low in (("save_every", 1), ("stop_after", 1)):
        value = getattr(cfg, name)
        if value is not None and (not isinstance(value, int) or value < low):
            raise ValueError(f"{flag_name(name)} must be an int ≥ {low}; got {value!r}")
    if cfg.max_minutes is not None and not (cfg.max_minutes > 0 and math.isfinite(cfg.max_minutes)):
        raise ValueError(f"--max-minutes must be a finite number > 0; got {cfg.max_minutes!r}")
    if cfg.out is None:
        for name in ("save_every", "stop_after", "max_minutes"):
            if getattr(cfg, name) is not None:
                raise ValueError(f"{flag_name(name)} needs --out DIR: the training state is "
                                 "saved there (DIR/checkpoint) for --resume DIR")


def _check_lm(cfg: TrainConfig) -> None:
    """The arguments only ``--task lm`` reads (the file itself: :mod:`mingru_cli.tasks`)."""
    if not cfg.data:
        raise ValueError("--data: --task lm trains on a text file; give --data FILE")
    if not cfg.out:
        raise ValueError("--out: --task lm saves its checkpoint there; give --out DIR")
    if len(cfg.mixers) != 1:
        raise ValueError(f"--mixer: --task lm trains one model; got {len(cfg.mixers)} specs")
    if not 0 < cfg.val_fraction < 1:
        raise ValueError(f"--val-fraction must be in (0, 1); got {cfg.val_fraction!r}")
    if cfg.val_bytes is not None and (not isinstance(cfg.val_bytes, int) or cfg.val_bytes < 1):
        raise ValueError(f"--val-bytes must be an int ≥ 1 (0: the whole validation split); got "
                         f"{cfg.val_bytes!r}")
    if not isinstance(cfg.sample_tokens, int) or cfg.sample_tokens < 0:
        raise ValueError(f"--sample-tokens must be an int ≥ 0; got {cfg.sample_tokens!r}")


def parse_mixer_spec(spec: str, layers: int) -> str | list[str]:
    """``"signed"`` → ``"signed"`` (all layers); ``"signed,givens"`` → one name per layer.

    A per-layer list must have ``layers`` entries, or ``layers`` must be 1 (the default), in
    which case the list sets the depth.
    """
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise ValueError(f"mixer spec is empty: {spec!r}")
    for name in names:
        if name not in MIXER_NAMES:
            raise ValueError(f"mixer must be one of {', '.join(MIXER_NAMES)}; got {name!r} in {spec!r}")
    if len(names) == 1:
        return names[0]
    if layers not in (1, len(names)):
        raise ValueError(f"mixer spec {spec!r} names {len(names)} layers but --layers is {layers}")
    return names


def stack_arguments(spec: str, cfg: TrainConfig) -> tuple[str | list[str], int, dict[str, Any] | None]:
    """``(mixer, n_layers, mixer_kwargs)`` for ``MinGRUStack`` (either frontend) from one spec.

    ``cfg.mixer_kwargs`` is either flat (one mixer's arguments, for single-name specs) or
    keyed by mixer name (``{"givens": {"block_size": 4}}``), which works for every spec: each
    model takes the entries of the mixers it uses.
    """
    mixer = parse_mixer_spec(spec, cfg.layers)
    n_layers = len(mixer) if isinstance(mixer, list) else cfg.layers
    given = dict(cfg.mixer_kwargs or {})
    keyed = bool(given) and all(k in MIXER_NAMES and isinstance(v, dict) for k, v in given.items())
    if isinstance(mixer, list):
        if given and not keyed:
            raise ValueError(
                "with a per-layer mixer list, mixer_kwargs must be keyed by mixer name, "
                'e.g. {"givens": {"block_size": 4}}'
            )
        kwargs = {k: v for k, v in given.items() if k in mixer}
    else:
        kwargs = dict(given.get(mixer, {})) if keyed else given
    return mixer, n_layers, kwargs or None
