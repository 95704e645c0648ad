"""``mingru train --out DIR`` checkpoints and ``--resume DIR``: a run split into jobs
(``--stop-after``, ``--max-minutes``) ends with the weights, optimizer state, curve and scores
of the same run in one job, on both frameworks; ``--steps`` extends a run; an interrupted
save leaves the previous state readable; bad resumes are one-line errors naming the flag.
Correctness, never speed."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from mingru_cli._checkpoint import LoopState, RunCheckpoint
from mingru_cli.cli import main
from mingru_cli.config import TrainConfig

HAS_JAX = all(importlib.util.find_spec(m) for m in ("jax", "flax", "optax"))

# Dropout, accumulation, a learned h0 and a validation set: every piece of state a job hands
# on (random streams, optimizer moments, the best validation point) is exercised.
TINY = ["--task", "selective-copy", "--train-len", "6", "--copy-tokens", "2", "--copy-vocab",
        "5", "--layers", "1", "--d-model", "8", "--mlp-expansion", "0", "--batch-size", "4",
        "--grad-accum", "2", "--dropout", "0.3", "--learnable-h0", "--eval-lens", "6",
        "--val-len", "6", "--eval-size", "4", "--eval-batch-size", "4", "--eval-every", "3",
        "--seed", "2", "--device", "cpu", "--no-progress"]


# The device is a job's choice, not the run's (``RUN_CONTROL``): a resumed job without
# ``--device`` would take a GPU where there is one, and a GPU's sums are not bit-equal to the
# CPU's the run began on.
ON_CPU = ["--device", "cpu"]


def cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def saved_arrays(out: Path) -> dict[str, dict[str, np.ndarray]]:
    """Every array of every model's last tensor file in ``out/checkpoint``, by model."""
    state = json.loads((out / "checkpoint" / "train_state.json").read_text())
    arrays = {}
    for index, entry in state["models"].items():
        path = out / "checkpoint" / entry["file"]
        if path.suffix == ".npz":
            with np.load(path) as saved:
                arrays[index] = {name: saved[name] for name in saved.files}
        else:
            arrays[index] = _flatten(torch.load(path, weights_only=True))
    return arrays


def _flatten(tree, prefix: str = "") -> dict[str, np.ndarray]:
    if tree is None or isinstance(tree, str):  # optimizer settings such as foreach=None
        return {}
    if isinstance(tree, dict):
        return {k: v for key, value in tree.items() for k, v in _flatten(value, f"{prefix}/{key}").items()}
    if isinstance(tree, (list, tuple)):
        return {k: v for i, value in enumerate(tree) for k, v in _flatten(value, f"{prefix}/{i}").items()}
    return {prefix: np.asarray(tree.numpy() if isinstance(tree, torch.Tensor) else tree)}


def assert_same_run(one: Path, split: Path) -> None:
    """Equal results (curves, scores) and equal final tensor files."""
    a, b = (json.loads((d / "train_results.json").read_text())["models"] for d in (one, split))
    keys = ("curve", "accuracy", "sequence_accuracy", "selected_step", "final_loss")
    assert [{k: m[k] for k in keys} for m in a] == [{k: m[k] for k in keys} for m in b]
    first, second = saved_arrays(one), saved_arrays(split)
    assert first.keys() == second.keys()
    for model in first:
        assert first[model].keys() == second[model].keys()
        for name, value in first[model].items():
            np.testing.assert_array_equal(second[model][name], value, err_msg=f"{model}{name}")


FRAMEWORKS = ["torch", pytest.param("jax", marks=pytest.mark.skipif(not HAS_JAX,
                                                                      reason="needs jax"))]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_jobs_resumed_equal_one_run(framework, tmp_path):
    # Two models (torch): the first job stops inside the first, the second inside the second.
    mixers = ["--mixer", "log"] + (["--mixer", "signed"] if framework == "torch" else [])
    argv = ["train", *TINY, "--framework", framework, *mixers, "--steps", "8"]
    assert cli([*argv, "--out", str(tmp_path / "one")])[0] == 0
    code, out, _ = cli([*argv, "--out", str(tmp_path / "split"), "--stop-after", "5",
                        "--save-every", "2"])
    assert code == 0 and "stopped log at step 5 of 8" in out
    assert not (tmp_path / "split" / "train_results.json").exists()
    state = json.loads((tmp_path / "split" / "checkpoint" / "train_state.json").read_text())
    assert state["models"]["0"]["step"] == 5
    assert len(list((tmp_path / "split" / "checkpoint").glob("model0-step*"))) == 1
    if framework == "torch":
        code, out, _ = cli(["train", "--resume", str(tmp_path / "split"), *ON_CPU, "--stop-after", "6",
                            "--no-progress"])
        assert code == 0 and "stopped signed at step 3 of 8" in out
    code, out, err = cli(["train", "--resume", str(tmp_path / "split"), *ON_CPU, "--no-progress"])
    assert code == 0, err
    assert "per sequence" in out
    assert_same_run(tmp_path / "one", tmp_path / "split")
    # Resuming a finished run trains nothing and reports the same.
    assert cli(["train", "--resume", str(tmp_path / "split"), *ON_CPU, "--no-progress"])[0] == 0
    assert_same_run(tmp_path / "one", tmp_path / "split")


def test_max_minutes_stops_the_job_and_the_rest_follows(tmp_path):
    argv = ["train", *TINY, "--mixer", "log", "--steps", "4"]
    assert cli([*argv, "--out", str(tmp_path / "one")])[0] == 0
    code, out, _ = cli([*argv, "--out", str(tmp_path / "split"), "--max-minutes", "1e-9"])
    assert code == 0 and "stopped log at step 0 of 4" in out
    # A run saved before --mixer-expansion existed resumes as the unexpanded run it was.
    path = tmp_path / "split" / "checkpoint" / "train_state.json"
    state = json.loads(path.read_text())
    del state["config"]["mixer_expansion"]
    path.write_text(json.dumps(state))
    assert cli(["train", "--resume", str(tmp_path / "split"), *ON_CPU, "--no-progress"])[0] == 0
    assert_same_run(tmp_path / "one", tmp_path / "split")


def test_resume_with_more_steps_extends_a_constant_schedule_run(tmp_path):
    # The constant schedule does not depend on --steps, and 6 is a multiple of --eval-every:
    # 6 steps then 6 more are the 12-step run.
    argv = ["train", *TINY, "--mixer", "log", "--lr-schedule", "constant"]
    assert cli([*argv, "--steps", "12", "--out", str(tmp_path / "one")])[0] == 0
    assert cli([*argv, "--steps", "6", "--out", str(tmp_path / "split")])[0] == 0
    code, _, err = cli(["train", "--resume", str(tmp_path / "split"), *ON_CPU, "--steps", "12",
                        "--no-progress"])
    assert code == 0, err
    assert_same_run(tmp_path / "one", tmp_path / "split")


def test_an_interrupted_save_leaves_the_previous_state(tmp_path):
    class Files:
        suffix = ".bin"

        def __init__(self, fail: bool) -> None:
            self.fail = fail

        def save(self, path: Path, best) -> None:
            path.write_bytes(b"partial")
            if self.fail:
                raise OSError("disk full")

        def load(self, path: Path):
            return path.read_bytes()

    cfg = TrainConfig(steps=10, out=str(tmp_path)).resolved()
    slot = RunCheckpoint(cfg).slot(0, "log")
    slot.save(LoopState(step=4), None, Files(fail=False))
    with pytest.raises(OSError):
        slot.save(LoopState(step=6), None, Files(fail=True))
    resumed = RunCheckpoint(TrainConfig(steps=10, out=str(tmp_path), resume=str(tmp_path)).resolved())
    loop, best = resumed.slot(0, "log").load(Files(fail=False))
    assert loop.step == 4 and best == b"partial"
    assert (tmp_path / "checkpoint" / "model0-step4.bin").is_file()


@pytest.mark.parametrize(("extra", "message"), [
    (["--lr", "0.5"], "--resume .*: the saved run has --lr 0.003, this command 0.5"),
    (["--framework", "jax"], "the saved run has --framework 'torch'"),
    (["--steps", "2"], "--steps 2 is below the 4 steps log has trained"),
    (["--out", "elsewhere"], "--out 'elsewhere' differs from --resume"),
    (["--mixer-expansion", "2"], "the saved run has --mixer-expansion 1, this command 2"),
])
def test_bad_resume_is_a_one_line_error_naming_the_flag(tmp_path, extra, message):
    assert cli(["train", *TINY, "--mixer", "log", "--steps", "4", "--out", str(tmp_path)])[0] == 0
    code, out, err = cli(["train", "--resume", str(tmp_path), *extra, "--no-progress"])
    assert code == 1 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("mingru train: error: ")
    assert re.search(message, line), line


@pytest.mark.parametrize(("argv", "message"), [
    (["--resume", "{tmp}"], "--resume '{tmp}': no checkpoint there"),
    (["--stop-after", "3"], "--stop-after needs --out DIR"),
    (["--max-minutes", "1"], "--max-minutes needs --out DIR"),
    (["--save-every", "0", "--out", "{tmp}"], "--save-every must be an int ≥ 1"),
    (["--grad-accum", "3"], "--grad-accum 3 must divide --batch-size 4"),
    (["--dropout", "1"], "--dropout must be in"),
    (["--clip-norm", "-1"], "--clip-norm must be"),
    (["--mixer-expansion", "0"], "mixer_expansion must be an int ≥ 1; got 0"),
])
def test_bad_job_flags_are_one_line_errors(tmp_path, argv, message):
    argv = [a.format(tmp=tmp_path) for a in argv]
    code, out, err = cli(["train", *TINY, "--mixer", "log", "--steps", "2", *argv])
    assert code == 1 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"mingru train: error: {message.format(tmp=tmp_path)}"), line
