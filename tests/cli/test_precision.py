"""``mingru train --precision bf16`` on both frameworks: a tiny run learns (finite, falling
loss); the forward really computes in bfloat16 while training, evaluating and sampling (the
mixers' outputs in PyTorch, the logits before the float32 loss in Flax), the parameters,
optimizer state and saved checkpoints staying float32; ``fp32`` keeps float32 throughout; the
precision is in the results, ``train.json``, the printed header and the saved training state,
and ``--resume`` with another one is a one-line error naming the flag. Correctness, never
speed."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from mingru_cli.cli import main
from mingru_cli.config import TrainConfig
from mingru_cli.runner import run
from tests.cli.test_resume import cli

HAS_JAX = all(importlib.util.find_spec(m) for m in ("jax", "flax", "optax"))
needs_jax = pytest.mark.skipif(not HAS_JAX, reason="needs jax")
FRAMEWORKS = ["torch", pytest.param("jax", marks=needs_jax)]
PRECISIONS = {"bf16": "bfloat16", "fp32": "float32"}
# Dropout, accumulation and a validation set: every forward of a run (training, validation,
# the final scores) is exercised.
TINY = ["--task", "selective-copy", "--train-len", "6", "--copy-tokens", "2", "--copy-vocab",
        "5", "--layers", "1", "--d-model", "8", "--mlp-expansion", "0", "--batch-size", "4",
        "--grad-accum", "2", "--dropout", "0.3", "--eval-lens", "6", "--val-len", "6",
        "--eval-size", "4", "--eval-batch-size", "4", "--eval-every", "2", "--seed", "2",
        "--device", "cpu", "--no-progress", "--mixer", "log"]


def parity(framework: str, precision: str, **changes) -> TrainConfig:
    """A parity run that learns in a few steps (measured: the running loss falls from about
    0.9 (torch) or 0.77 (jax) to about 0.68 over 24 steps, in either precision)."""
    fields = dict(task="parity", mixers=["signed"], framework=framework, steps=24,
                  batch_size=16, d_model=16, lr=1e-2, train_len=8, eval_lens=[8], val_len=8,
                  eval_size=16, eval_every=4, precision=precision, device="cpu",
                  progress=False, verbose=False)
    return TrainConfig(**{**fields, **changes})


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_bf16_run_learns(framework):
    result = run(parity(framework, "bf16"))
    (model,) = result["models"]
    losses = [point["loss"] for point in model["curve"]]
    assert all(math.isfinite(loss) for loss in losses) and len(losses) == 6
    assert losses[-1] < losses[0] - 0.03
    assert all(later < earlier for earlier, later in zip(losses, losses[1:], strict=False))
    assert result["config"]["precision"] == "bf16"


def _record_torch_mixer_dtypes(monkeypatch, module, class_name: str) -> list[tuple[bool, str]]:
    """``(training?, dtype)`` of the first mixer's output at every forward of the models
    ``module.<class_name>`` builds from now on."""
    seen: list[tuple[bool, str]] = []
    base = getattr(module, class_name)

    class Recording(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            mixer = self.stack.blocks[0].mixer
            mixer.register_forward_hook(lambda m, args, out: seen.append(
                (m.training, str(out[0].dtype).removeprefix("torch."))))

    monkeypatch.setattr(module, class_name, Recording)
    return seen


def _torch_float_dtypes(path: Path) -> set[str]:
    """The dtypes of the floating tensors of a PyTorch training-state file."""
    found = set()

    def walk(tree):
        if isinstance(tree, torch.Tensor):
            if tree.is_floating_point():
                found.add(str(tree.dtype).removeprefix("torch."))
        elif isinstance(tree, dict):
            for value in tree.values():
                walk(value)
        elif isinstance(tree, list | tuple):
            for value in tree:
                walk(value)

    walk(torch.load(path, weights_only=True))
    return found


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_torch_forward_runs_at_the_precision(monkeypatch, tmp_path, precision):
    from mingru_cli import train

    seen = _record_torch_mixer_dtypes(monkeypatch, train, "SequenceModel")
    code, out, err = cli(["train", *TINY, "--steps", "4", "--precision", precision,
                          "--out", str(tmp_path)])
    assert code == 0, err
    # Training forwards (2 micro-batches × 4 steps) and evaluation forwards both happened,
    # every one of them at the precision asked for.
    assert {training for training, _ in seen} == {True, False}
    assert {dtype for _, dtype in seen} == {PRECISIONS[precision]}
    # The weights, the optimizer moments and the best point's weights stay float32.
    (state,) = (tmp_path / "checkpoint").glob("model0-step4.pt")
    assert _torch_float_dtypes(state) == {"float32"}
    results = json.loads((tmp_path / "train_results.json").read_text())
    assert results["config"]["precision"] == precision
    assert f"precision {precision}" in out.splitlines()[0]


@needs_jax
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_jax_logits_are_computed_at_the_precision(monkeypatch, tmp_path, precision):
    from mingru_cli import train_jax

    seen: list[str] = []
    real = train_jax._model_logits

    def recording(model, tokens):
        logits = real(model, tokens)
        seen.append(str(logits.dtype))  # at trace time: once per compiled function
        return logits

    monkeypatch.setattr(train_jax, "_model_logits", recording)
    code, out, err = cli(["train", *TINY, "--framework", "jax", "--steps", "4", "--precision",
                          precision, "--out", str(tmp_path)])
    assert code == 0, err
    assert len(seen) >= 2 and set(seen) == {PRECISIONS[precision]}  # training and predicting
    (state,) = (tmp_path / "checkpoint").glob("model0-step4.npz")
    with np.load(state) as saved:
        floats = {str(saved[name].dtype) for name in saved.files
                  if np.issubdtype(saved[name].dtype, np.floating)}
    assert floats == {"float32"}  # parameters, optimizer state, best point
    assert json.loads((tmp_path / "train_results.json").read_text())["config"]["precision"] \
        == precision


def _text(path: Path) -> None:
    rng = np.random.default_rng(0)
    path.write_text(" ".join(rng.choice(["the", "cat", "sat", "on", "a", "mat"], 600)))


LM = ["--task", "lm", "--steps", "4", "--d-model", "16", "--layers", "1", "--batch-size", "4",
      "--seq-len", "16", "--eval-every", "2", "--eval-batch-size", "4", "--val-bytes", "64",
      "--sample-tokens", "8", "--device", "cpu", "--no-progress", "--precision", "bf16"]


def test_torch_lm_runs_in_bf16_and_saves_float32(monkeypatch, tmp_path):
    from safetensors.torch import load_file

    import mingru.lm

    seen = _record_torch_mixer_dtypes(monkeypatch, mingru.lm, "MinGRULM")
    _text(tmp_path / "text.txt")
    code, out, err = cli(["train", *LM, "--data", str(tmp_path / "text.txt"),
                          "--out", str(tmp_path / "run")])
    assert code == 0, err
    # Training (train mode), the validation losses and the sample (eval mode), all in bf16.
    assert {training for training, _ in seen} == {True, False}
    assert {dtype for _, dtype in seen} == {"bfloat16"}
    weights = load_file(tmp_path / "run" / "model.safetensors")
    assert {str(w.dtype) for w in weights.values()} == {"torch.float32"}
    record = json.loads((tmp_path / "run" / "train.json").read_text())
    assert record["config"]["precision"] == "bf16"
    assert math.isfinite(record["model"]["final"]["val_loss"])
    assert "precision bf16" in out.splitlines()[0]


@needs_jax
def test_jax_lm_runs_in_bf16_and_saves_float32(monkeypatch, tmp_path):
    from safetensors.numpy import load_file

    from mingru_cli import train_jax

    seen: list[str] = []
    real = train_jax._lm_logits

    def recording(model, tokens):
        logits = real(model, tokens)
        seen.append(str(logits.dtype))
        return logits

    monkeypatch.setattr(train_jax, "_lm_logits", recording)
    _text(tmp_path / "text.txt")
    code, out, err = cli(["train", *LM, "--framework", "jax", "--data",
                          str(tmp_path / "text.txt"), "--out", str(tmp_path / "run")])
    assert code == 0, err
    assert seen and set(seen) == {"bfloat16"}
    weights = load_file(tmp_path / "run" / "model.safetensors")
    assert {str(w.dtype) for w in weights.values()} == {"float32"}
    record = json.loads((tmp_path / "run" / "train.json").read_text())
    assert record["config"]["precision"] == "bf16"
    assert math.isfinite(record["model"]["final"]["val_loss"])


@needs_jax
def test_jax_validation_loss_and_sampling_refuse_another_precision():
    from flax import nnx

    from mingru_cli import train_jax
    from mingru_cli.tasks import ByteText
    from mingru_jax import MinGRULM

    model = MinGRULM(256, 8, 1, rngs=nnx.Rngs(0))  # float32 compute
    val = ByteText(b"abcdefghijklmnopqrstuvwxyz" * 4).validation(2)
    with pytest.raises(ValueError, match="--precision bf16: the model computes in float32"):
        train_jax.validation_loss(model, val, 8, precision="bf16")
    with pytest.raises(ValueError, match="--precision bf16"):
        train_jax.generate_bytes(model, b"ab", 2, precision="bf16")
    assert math.isfinite(train_jax.validation_loss(model, val, 8, precision="fp32"))


def test_resume_keeps_the_precision_and_refuses_another(tmp_path):
    assert cli(["train", *TINY, "--steps", "4", "--stop-after", "2", "--precision", "bf16",
                "--out", str(tmp_path)])[0] == 0
    state = json.loads((tmp_path / "checkpoint" / "train_state.json").read_text())
    assert state["config"]["precision"] == "bf16"
    code, out, err = cli(["train", "--resume", str(tmp_path), "--precision", "fp32",
                          "--no-progress"])
    assert code == 1 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("mingru train: error: --resume ")
    assert "the saved run has --precision 'bf16', this command 'fp32'" in line
    code, out, err = cli(["train", "--resume", str(tmp_path), "--no-progress"])
    assert code == 0, err
    results = json.loads((tmp_path / "train_results.json").read_text())
    assert results["config"]["precision"] == "bf16"


def test_bad_precision_is_an_error_naming_the_flag(capsys):
    with pytest.raises(ValueError, match="--precision must be one of fp32, bf16; got 'fp16'"):
        TrainConfig(precision="fp16").resolved()
    with pytest.raises(SystemExit) as exited:
        main(["train", *TINY, "--steps", "1", "--precision", "fp16"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "--precision" in err and "'fp16'" in err


def test_paper_preset_stays_float32():
    from mingru_cli.config import preset_config

    assert preset_config("paper-selective-copy").resolved().precision == "fp32"
