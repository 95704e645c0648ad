"""The training state of a ``mingru train`` run, saved so that ``--resume DIR`` continues it
with the result of an uninterrupted run.

A run with ``--out DIR`` keeps ``DIR/checkpoint/``: ``train_state.json`` (the run's
configuration and, per model, the step it reached, the fit loop's own state — running
averages, curve, best validation score, the data generator's state — and the name of its
tensor file) and one tensor file per model (``model<i>-step<k>.pt`` from PyTorch,
``.npz`` from JAX: weights, optimizer state, the weights of the best validation point and
the framework's random state). Each file is written under a temporary name and moved into
place, the tensor file first, so an interrupted write leaves the previous state readable.

Framework-free: the training paths give the tensor file's format (:class:`StateFiles`).

Example:
    >>> from mingru_cli._checkpoint import JobBudget
    >>> budget = JobBudget(stop_after=2, max_minutes=None)
    >>> [budget.spent() or budget.take() for _ in range(3)]
    [None, None, True]
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from mingru_cli.config import RUN_CONTROL, TrainConfig, flag_name

__all__ = ["FORMAT", "JobBudget", "LoopState", "ModelSlot", "RunCheckpoint", "StateFiles",
           "TrainingPaused"]

FORMAT = 1
FOLDER, STATE = "checkpoint", "train_state.json"


class TrainingPaused(Exception):
    """This job's budget (``--stop-after``, ``--max-minutes``) ran out; the state is saved."""

    def __init__(self, spec: str, step: int, steps: int) -> None:
        super().__init__(f"stopped {spec} at step {step} of {steps}")
        self.spec, self.step, self.steps = spec, step, steps


class StateFiles(Protocol):
    """A training path's tensor file: ``save(path, best)`` writes the model, optimizer,
    random state and ``best`` (the best validation point's weights, or ``None``);
    ``load(path)`` restores them into the live objects and returns ``best``."""

    suffix: str

    def save(self, path: Path, best: Any) -> None: ...

    def load(self, path: Path) -> Any: ...


@dataclass
class LoopState:
    """What the fit loop carries from step to step, besides tensors (JSON-able)."""

    step: int = 0
    loss_avg: float | None = None
    acc_avg: float | None = None
    curve: list[dict[str, float]] = field(default_factory=list)
    best_val: float = -1.0  # the kept point's score, higher is better (minus a lowest-kept loss)
    best_step: int = -1
    seconds: float = 0.0
    step_seconds: float = 0.0  # of it, in training steps (the data included)
    eval_seconds: float = 0.0  # of it, at evaluation points
    loss_sum: float = 0.0  # the batch losses since the last evaluation point, and their count
    loss_steps: int = 0
    data: dict[str, Any] | None = None  # numpy's bit_generator.state of the training data
    train_len: int | None = None  # the curriculum's current length (None: no curriculum yet)


class JobBudget:
    """How much one job may train: ``stop_after`` steps and ``max_minutes`` of wall time from
    ``started`` (a ``time.monotonic()`` reading; default: now), either ``None`` for no limit."""

    def __init__(self, stop_after: int | None, max_minutes: float | None,
                 started: float | None = None) -> None:
        self.steps_left = stop_after
        started = time.monotonic() if started is None else started
        self.deadline = None if max_minutes is None else started + 60.0 * max_minutes

    def spent(self) -> bool:
        return ((self.steps_left is not None and self.steps_left <= 0)
                or (self.deadline is not None and time.monotonic() >= self.deadline))

    def take(self) -> None:
        """Count one step."""
        if self.steps_left is not None:
            self.steps_left -= 1


def _write_json(path: Path, data: dict[str, Any]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w") as f:
        json.dump(data, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def _jsonable(cfg: TrainConfig) -> dict[str, Any]:
    """``cfg`` as it reads back from JSON (lists, not tuples), for comparing with a saved run."""
    return json.loads(json.dumps(asdict(cfg)))


class RunCheckpoint:
    """The checkpoint folder of the run ``cfg`` (``cfg.out/checkpoint``).

    A fresh run starts empty (and removes an earlier run's state files there); with
    ``cfg.resume`` it reads the saved state and checks that ``cfg`` is the saved run's
    configuration up to :data:`mingru_cli.config.RUN_CONTROL`. Errors name ``--resume`` or
    the flag that differs. ``started``: when the job began (``time.monotonic()``), from which
    ``--max-minutes`` counts.
    """

    def __init__(self, cfg: TrainConfig, started: float | None = None) -> None:
        assert cfg.out is not None and cfg.steps is not None
        self.directory = Path(cfg.out) / FOLDER
        self.budget = JobBudget(cfg.stop_after, cfg.max_minutes, started)
        self.steps = cfg.steps
        self.models: dict[str, dict[str, Any]] = {}
        if cfg.resume is not None:
            saved = read_state(cfg.resume)
            _check_same_run(saved["config"], cfg)
            self.models = saved["models"]
            for entry in self.models.values():
                if entry["step"] > cfg.steps:
                    raise ValueError(f"--steps {cfg.steps} is below the {entry['step']} steps "
                                     f"{entry['spec']} has trained in {cfg.resume!r}")
        elif self.directory.is_dir():
            for old in [*self.directory.glob("model*-step*"), self.directory / STATE]:
                old.unlink(missing_ok=True)
        self.config = asdict(cfg)

    def slot(self, index: int, spec: str) -> ModelSlot:
        """The place of model ``index`` (mixer ``spec``) in this checkpoint."""
        entry = self.models.get(str(index))
        if entry is not None and entry["spec"] != spec:
            raise ValueError(f"--resume: model {index} of the saved run is {entry['spec']!r}, "
                             f"not {spec!r}")
        return ModelSlot(self, index, spec)

    def write(self) -> None:
        _write_json(self.directory / STATE, {"format": FORMAT, "config": self.config,
                                             "models": self.models})


class ModelSlot:
    """One model's saved state: :meth:`load` it into a training path's objects, :meth:`save`
    them after a step."""

    def __init__(self, run: RunCheckpoint, index: int, spec: str) -> None:
        self.run, self.index, self.spec = run, index, spec
        self.budget = run.budget

    @property
    def entry(self) -> dict[str, Any] | None:
        return self.run.models.get(str(self.index))

    def load(self, files: StateFiles) -> tuple[LoopState, Any]:
        """``(loop state, best weights)`` of the saved model, its tensors restored through
        ``files``; a fresh state and ``None`` when nothing is saved for it."""
        entry = self.entry
        if entry is None:
            return LoopState(), None
        path = self.run.directory / entry["file"]
        if not path.is_file():
            raise ValueError(f"--resume: {path} is missing (train_state.json names it)")
        if path.suffix != files.suffix:
            raise ValueError(f"--resume: {path} was not written by this framework")
        return LoopState(**entry["loop"]), files.load(path)

    def save(self, loop: LoopState, best: Any, files: StateFiles) -> None:
        """Write the tensors through ``files``, then ``train_state.json``, then drop this
        model's older tensor files."""
        directory = self.run.directory
        directory.mkdir(parents=True, exist_ok=True)
        name = f"model{self.index}-step{loop.step}{files.suffix}"
        temporary = directory / (name + ".tmp")
        files.save(temporary, best)
        with open(temporary, "rb") as f:
            os.fsync(f.fileno())
        os.replace(temporary, directory / name)
        self.run.models[str(self.index)] = {"spec": self.spec, "step": loop.step, "file": name,
                                            "loop": asdict(loop)}
        self.run.write()
        for old in directory.glob(f"model{self.index}-step*"):
            if old.name != name:
                old.unlink(missing_ok=True)


def read_state(directory: str) -> dict[str, Any]:
    """The ``train_state.json`` of the run saved in ``directory`` (its ``--out``)."""
    path = Path(directory) / FOLDER / STATE
    if not path.is_file():
        raise ValueError(f"--resume {directory!r}: no checkpoint there ({path} does not exist); "
                         "a run saves one in its --out folder")
    try:
        state = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"--resume {directory!r}: {path} cannot be read: {exc}") from None
    if state.get("format") != FORMAT:
        raise ValueError(f"--resume {directory!r}: {path} has format {state.get('format')!r}; "
                         f"this mingru reads format {FORMAT}")
    return state


def _check_same_run(saved: dict[str, Any], cfg: TrainConfig) -> None:
    """Raise when ``cfg`` changes a field of the ``saved`` configuration that shapes the result."""
    current = _jsonable(cfg)
    # A field the saved run predates (e.g. mixer_expansion) had its default value there.
    defaults = _jsonable(TrainConfig())
    for name, value in current.items():
        before = saved.get(name, defaults[name])
        if name not in RUN_CONTROL and before != value:
            allowed = ", ".join(flag_name(n) for n in ("steps", "stop_after", "max_minutes",
                                                        "save_every", "device", "threads"))
            raise ValueError(f"--resume {cfg.resume!r}: the saved run has {flag_name(name)} "
                             f"{before!r}, this command {value!r}; a resumed run keeps "
                             f"its configuration (it may change {allowed})")


def saved_config(directory: str) -> dict[str, Any]:
    """The configuration fields of the run saved in ``directory``, as :class:`TrainConfig`
    takes them (for ``--resume`` on the command line)."""
    return read_state(directory)["config"]
