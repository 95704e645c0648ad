"""Run ``mingru train`` on either framework: train every requested mixer, evaluate per length,
print the table and write ``--out`` files; ``--task lm`` trains a byte-level ``MinGRULM`` and
saves it, and :func:`generate_text` (``mingru generate``) continues a prompt with one.

Framework-free itself: it imports the chosen training path (:mod:`mingru_cli.train` for
PyTorch, :mod:`mingru_cli.train_jax` for Flax) only when it runs, so a Flax-only install never
loads torch. Each path provides ``session(cfg)`` (checks ``cfg.device``, resolves ``"auto"``,
places the work), ``fit(spec, task, cfg, evals, val, slot)`` (one model's record), and for the
language model ``fit_lm(spec, task, cfg, val, slot)``, ``validation_loss(model, batch, chunk,
precision=)``, ``load_lm(directory, device)`` and ``generate_bytes(model, prompt,
max_new_tokens, precision=, **sampling)``; every forward runs at ``cfg.precision``.

With ``--out DIR`` the training state is saved in ``DIR/checkpoint`` (every ``--save-every``
steps and at the end of each model) and ``--resume DIR`` continues it
(:mod:`mingru_cli._checkpoint`); a job that ends on ``--stop-after`` or ``--max-minutes``
saves and returns ``{"paused": ...}`` instead of results.

Example:
    >>> from mingru_cli.runner import TrainConfig, run
    >>> cfg = TrainConfig(task="parity", mixers=["signed"], framework="jax", steps=5,
    ...                   batch_size=8, eval_lens=[16], eval_size=8, progress=False,
    ...                   verbose=False)
    >>> sorted(run(cfg)["models"][0]["accuracy"])  # doctest: +SKIP
    ['16']
"""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mingru_cli._checkpoint import RunCheckpoint, TrainingPaused
from mingru_cli._train_common import build_task, chance_accuracy, eval_sets, lm_val_chunk
from mingru_cli.config import TrainConfig

__all__ = ["TrainConfig", "format_table", "format_lm_table", "generate_text", "run",
           "save_lm_plot", "save_plot", "versions"]

# The sample printed after ``--task lm``: the first bytes of the validation split, continued.
SAMPLE_PROMPT_BYTES = 32
SAMPLE_SAMPLING = {"temperature": 0.8, "top_k": None, "top_p": 0.95}

# Configuration fields no part of --task lm reads, left out of its train.json.
_NOT_FOR_LM = ("eval_lens", "val_len", "eval_size", "mqar_pairs", "mqar_keys", "mqar_values",
               "copy_tokens", "copy_vocab")


def versions() -> dict[str, str]:
    """Python and the versions of the frameworks and frontends this run loaded."""
    out = {"python": platform.python_version()}
    for mod in ("torch", "mingru", "jax", "flax", "mingru_jax"):
        if sys.modules.get(mod) is not None:
            out[mod] = getattr(sys.modules[mod], "__version__", "?")
    return out


def format_table(result: dict[str, Any]) -> str:
    """The per-length accuracy table (plain text, one column per model): token accuracy, then
    sequence accuracy (all scored positions of a sequence right)."""
    models = result["models"]
    names = [m["mixer"] for m in models]
    width = max(8, *(len(n) for n in names))
    config, start = result["config"], result["config"].get("curriculum")
    curriculum = f" (a curriculum from T={start})" if start else ""
    lines = [f"task {result['task_description']}, trained at T={config['train_len']}{curriculum}, "
             f"seed {config['seed']}, precision {config['precision']}, "
             f"chance {result['chance']:.3f}"]
    header = "length".rjust(7) + " | " + " | ".join(n.rjust(width) for n in names)
    lines += [header, "-" * len(header)]
    lengths = list(models[0]["accuracy"]) if models else []
    for title, key in ((None, "accuracy"),
                       ("per sequence (all its scored positions right):", "sequence_accuracy")):
        lines += [title] if title else []
        for n in lengths:
            cells = [f"{m[key][n]:.3f}".rjust(width) for m in models]
            mark = " (train)" if int(n) == result["config"]["train_len"] else ""
            lines.append(n.rjust(7) + " | " + " | ".join(cells) + mark)
    lines.append("-" * len(header))
    extra = []
    for m in models:
        sel = f"step {m['selected_step']}"
        if "val_acc" in m:
            sel += f" (val@{result['config']['val_len']} {m['val_acc']:.3f})"
        reached = f", trained up to T={m['curve'][-1]['train_len']}" if start and m["curve"] else ""
        extra.append(f"  {m['mixer']}: {m['parameters']} params, {m['train_seconds']:.1f}s, "
                     f"checkpoint {sel}{reached}")
    return "\n".join(lines + extra)


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (files only, no display), or None without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save_figure(plt: Any, fig: Any, ax: Any, *, title: str, path: Path) -> None:
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def save_plot(result: dict[str, Any], path: Path) -> bool:
    """Accuracy vs evaluation length, one line per model (matplotlib Agg). False without it."""
    plt = _pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for m in result["models"]:
        xs = [int(n) for n in m["accuracy"]]
        ax.plot(xs, list(m["accuracy"].values()), marker="o", label=m["mixer"])
    ax.axhline(result["chance"], color="grey", linestyle=":", label="chance")
    ax.axvline(result["config"]["train_len"], color="grey", linestyle="--", linewidth=0.8,
               label="train length")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("evaluation length T")
    ax.set_ylabel("accuracy")
    _save_figure(plt, fig, ax, title=f"mingru train: {result['task_description']}", path=path)
    return True


def save_lm_plot(result: dict[str, Any], path: Path) -> bool:
    """``--task lm``: the training and validation bits per byte against the step (the loss in
    nats on the right axis), the selected step marked (matplotlib Agg). False without it."""
    plt = _pyplot()
    if plt is None:
        return False
    model, nats_per_bit = result["model"], math.log(2)
    steps = [point["step"] for point in model["curve"]]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    ax.plot(steps, [p["train_bpb"] for p in model["curve"]], marker=".",
            label="training (mean over the interval)")
    ax.plot(steps, [p["val_bpb"] for p in model["curve"]], marker="o",
            label=f"validation ({result['validation']['bytes_per_evaluation']} bytes)")
    ax.axvline(model["selected_step"], color="grey", linestyle="--", linewidth=0.8,
               label=f"selected: step {model['selected_step']}")
    ax.set_xlabel("step")
    ax.set_ylabel("bits per byte")
    ax.secondary_yaxis("right", functions=(lambda bits: bits * nats_per_bit,
                                           lambda nats: nats / nats_per_bit)).set_ylabel(
        "loss (nats per byte)")
    _save_figure(plt, fig, ax, title=f"mingru train: {result['task_description']}", path=path)
    return True


def _path(framework: str) -> Any:
    """The training path of ``framework``: :mod:`mingru_cli.train` or :mod:`mingru_cli.train_jax`."""
    if framework == "jax":
        from mingru_cli import train_jax as path
    else:
        from mingru_cli import train as path  # type: ignore[no-redef]
    return path


def run(cfg: TrainConfig, command: str | None = None) -> dict[str, Any]:
    """Train every requested mixer on ``cfg.framework``, evaluate per length, optionally write
    ``--out`` files. ``cfg.device`` may be ``"auto"`` (a GPU when the framework sees one).
    ``--task lm``: :func:`run_lm`."""
    started = time.monotonic()  # --max-minutes counts from here
    cfg = cfg.resolved()
    path = _path(cfg.framework)
    with path.session(cfg):  # a bad --device fails here, before any data or output
        try:
            if cfg.task == "lm":
                return run_lm(cfg, path, command, started=started)
            return _run(cfg, path.fit, command, started=started)
        except TrainingPaused as paused:
            return _paused(cfg, paused, command)


def _paused(cfg: TrainConfig, paused: TrainingPaused, command: str | None) -> dict[str, Any]:
    """The result of a job that stopped on its budget (the state is saved in ``cfg.out``)."""
    if cfg.verbose:
        print(f"{paused}: saved in {Path(cfg.out or '') / 'checkpoint'}; continue with "
              f"mingru train --resume {cfg.out} (and --stop-after or --max-minutes per job)")
    return {"task": cfg.task, "command": command, "config": asdict(cfg),
            "paused": {"mixer": paused.spec, "step": paused.step, "steps": paused.steps}}


def run_lm(cfg: TrainConfig, path: Any, command: str | None,
           started: float | None = None) -> dict[str, Any]:
    """Train a byte-level ``MinGRULM`` on ``cfg.data`` (windows of ``cfg.train_len`` bytes of
    the training split); at every evaluation point report the mean training loss since the
    previous point and the validation loss on up to ``cfg.val_bytes`` bytes of the validation
    split (``ByteText.validation``: ``cfg.eval_batch_size`` stretches, each read from a fresh
    state, the state carried across chunks), both also in bits per byte; keep the weights of
    the lowest validation loss and score them on the whole validation split. Writes
    ``save_pretrained(cfg.out)``, ``train.json`` (the run: command, configuration, versions,
    split with the file's sha256, validation bytes, curve, selected step, final losses,
    training bytes per second, sample) and ``train_loss.png``, and prints a sample."""
    task = build_task(cfg)
    val = task.validation(cfg.eval_batch_size, cfg.val_bytes)
    whole = task.validation(cfg.eval_batch_size) if cfg.val_bytes is not None else val
    slot = RunCheckpoint(cfg, started).slot(0, cfg.mixers[0])
    record, model = path.fit_lm(cfg.mixers[0], task, cfg, val=val, slot=slot)
    chunk = lm_val_chunk(cfg)
    final_loss = path.validation_loss(model, whole, chunk, precision=cfg.precision)
    record["final"] = {"step": record["selected_step"], "val_loss": round(final_loss, 5),
                       "val_bpb": round(final_loss / math.log(2), 5),
                       "val_bytes": int(whole.mask.sum())}
    record["tokens_per_second"] = round(cfg.steps * cfg.batch_size * cfg.train_len
                                        / max(record["step_seconds"], 1e-9), 1)
    out = Path(cfg.out)
    model.save_pretrained(out)
    prompt = bytes(task.val[:SAMPLE_PROMPT_BYTES].tolist())
    sampling = {**SAMPLE_SAMPLING, "seed": cfg.seed}
    sample = path.generate_bytes(model, prompt, cfg.sample_tokens, precision=cfg.precision,
                                 **sampling)
    config = {k: v for k, v in asdict(cfg).items() if k not in _NOT_FOR_LM}
    result = {"task": "lm", "task_description": task.describe(), "command": command,
              "config": config, "seed": cfg.seed, "split": task.split(),
              "validation": {"stretches": val.tokens.shape[0], "chunk_bytes": chunk,
                             "bytes_per_evaluation": int(val.mask.sum()),
                             "final_bytes": int(whole.mask.sum())},
              "versions": versions(), "cpu_count": os.cpu_count(), "model": record,
              "sample": {"prompt": prompt.decode(errors="replace"),
                         "text": sample.decode(errors="replace"), **sampling}}
    (out / "train.json").write_text(json.dumps(result, indent=2) + "\n")
    written = ["train.json", *(["train_loss.png"] if save_lm_plot(result, out / "train_loss.png")
                               else [])]
    if cfg.verbose:
        print(format_lm_table(result))
        print(f"saved {out} (save_pretrained) and {', '.join(str(out / w) for w in written)}")
        print(f"sample (temperature {sampling['temperature']}, top_p {sampling['top_p']}):\n"
              + (prompt + sample).decode(errors="replace"))
    return result


def format_lm_table(result: dict[str, Any]) -> str:
    """``--task lm``'s report (plain text): the split, the curve (training loss: the mean over
    the steps since the previous row), the selected step (``*``), its loss on the whole
    validation split and the training speed."""
    split, validation, model = result["split"], result["validation"], result["model"]
    final = model["final"]
    lines = [f"{result['task_description']}: train {split['train_bytes']} bytes, validation (the "
             f"last {split['val_fraction']:.0%}) {split['val_bytes']} bytes, sha256 "
             f"{split['sha256'][:16]}…; {model['parameters']} parameters, precision "
             f"{result['config']['precision']}",
             f"validation: {validation['bytes_per_evaluation']} bytes at each step below "
             f"({validation['stretches']} stretches), {validation['final_bytes']} at the end",
             "step".rjust(8) + "  train loss  train bits/byte  val loss  val bits/byte"]
    for point in model["curve"]:
        mark = "*" if point["step"] == model["selected_step"] else " "
        lines.append(f"{point['step']:7d}{mark}  {point['train_loss']:10.4f}  "
                     f"{point['train_bpb']:15.4f}  {point['val_loss']:8.4f}  "
                     f"{point['val_bpb']:13.4f}")
    lines.append(f"selected step {final['step']} (lowest validation loss): {final['val_loss']:.4f} "
                 f"nats, {final['val_bpb']:.4f} bits per byte on the whole validation split "
                 f"({final['val_bytes']} bytes)")
    lines.append(f"training: {model['tokens_per_second']:,.0f} bytes/s ({model['step_seconds']:.1f}s "
                 f"in steps, {model['eval_seconds']:.1f}s evaluating, {model['train_seconds']:.1f}s "
                 "in all)")
    return "\n".join(lines)


def generate_text(checkpoint: str, prompt: str, max_new_tokens: int, *, framework: str = "torch",
                  device: str = "auto", **sampling: Any) -> str:
    """``mingru generate``: the continuation of ``prompt`` (its UTF-8 bytes are the tokens) by
    the byte-level checkpoint in ``checkpoint`` on ``framework``, decoded with
    ``errors="replace"``. ``sampling``: ``generate()``'s ``temperature``, ``top_k``,
    ``top_p``, ``seed``."""
    from mingru_kernels._lm import LMConfig, check_generate_args

    data = prompt.encode()
    if not data:
        raise ValueError("--prompt must not be empty: generation continues at least one byte")
    try:  # checked before any framework is imported: a flag's error is immediate
        check_generate_args(max_new_tokens=max_new_tokens, prefill_chunk=None, eos_token_id=None,
                            vocab_size=256, **{k: sampling.get(k) for k in ("top_k", "top_p")},
                            temperature=sampling.get("temperature", 1.0))
    except (ValueError, TypeError) as exc:  # "temperature must ...": name the flag
        first, _, rest = str(exc).partition(" ")
        raise ValueError(f"--{first.replace('_', '-')} {rest}") from None
    try:
        config = LMConfig.load(checkpoint)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--checkpoint: {exc}") from None
    if config.vocab_size != 256:
        raise ValueError(f"--checkpoint {checkpoint!r} has vocab_size {config.vocab_size}: "
                         "mingru generate reads byte-level models (256, as mingru train "
                         "--task lm writes)")
    cfg = TrainConfig(framework=framework, device=device)
    path = _path(framework)
    with path.session(cfg):
        model = path.load_lm(checkpoint, cfg.device)
        new = path.generate_bytes(model, data, max_new_tokens, **sampling)
    return new.decode(errors="replace")


def _run(cfg: TrainConfig, fit: Any, command: str | None, started: float) -> dict[str, Any]:
    task = build_task(cfg)
    for n in [cfg.train_len, *cfg.eval_lens, *([cfg.val_len] if cfg.val_len else [])]:
        task.check_length(n)
    evals, val = eval_sets(task, cfg)
    # A finished model of a resumed run trains no further steps: its record comes back from
    # its saved state, with the same evaluation.
    checkpoint = RunCheckpoint(cfg, started) if cfg.out else None
    models = [fit(spec, task, cfg, evals=evals, val=val,
                  slot=checkpoint.slot(index, spec) if checkpoint else None)
              for index, spec in enumerate(cfg.mixers)]
    result = {
        "task": cfg.task,
        "task_description": task.describe(),
        "chance": chance_accuracy(task),
        "command": command,
        "config": asdict(cfg),
        "versions": versions(),
        "cpu_count": os.cpu_count(),
        "models": models,
    }
    if cfg.verbose:
        print(format_table(result))
    if cfg.out:
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "train_results.json").write_text(json.dumps(result, indent=2) + "\n")
        written = ["train_results.json"]
        if save_plot(result, out / "train_accuracy.png"):
            written.append("train_accuracy.png")
        if cfg.verbose:
            print(f"wrote {', '.join(str(out / w) for w in written)}")
    return result
