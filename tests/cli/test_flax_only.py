"""A Flax-only install (``pip install ".[jax,cli]"``, no torch): ``mingru train --framework
jax`` and ``mingru bench --suite jax`` run, with torch's absence simulated in a subprocess, and
``--device`` names a device JAX must really have."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from mingru_cli.cli import main
from tests.cli.no_torch import BLOCK_TORCH

jax = pytest.importorskip("jax")
pytest.importorskip("optax")
pytest.importorskip("mingru_jax")


def _run_without_torch(script: str) -> dict:
    """Run ``script`` (dedented) with torch blocked; the JSON it printed after ``RESULT``,
    plus ``torch_loaded``."""
    code = textwrap.dedent(BLOCK_TORCH) + "import json\n" + textwrap.dedent(script) + (
        '\nRESULT["torch_loaded"] = "torch" in sys.modules\n'
        'print("RESULT" + json.dumps(RESULT))\n')
    env = {k: v for k, v in os.environ.items() if k != "MINGRU_SCAN"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout.split("RESULT", 1)[1])


def test_train_and_bench_jax_without_torch(tmp_path):
    res = _run_without_torch(f"""
        from mingru_cli.cli import main

        train = main(["train", "--framework", "jax", "--task", "s3", "--mixer", "signed",
                      "--steps", "3", "--batch-size", "4", "--d-model", "8", "--train-len", "8",
                      "--eval-lens", "8,16", "--val-len", "12", "--eval-size", "4",
                      "--eval-every", "2", "--device", "cpu", "--out", {str(tmp_path / "t")!r},
                      "--no-progress"])
        bench = main(["bench", "--device", "cpu", "--quick", "--suite", "jax", "--only",
                      "linear_scan", "--backends", "ours,jax", "--out",
                      {str(tmp_path / "b")!r}])
        RESULT = {{"train": train, "bench": bench}}
    """)
    assert res == {"train": 0, "bench": 0, "torch_loaded": False}
    trained = json.loads((tmp_path / "t" / "train_results.json").read_text())
    assert trained["config"]["device"] == "cpu" and "torch" not in trained["versions"]
    (model,) = trained["models"]
    assert model["framework"] == "jax" and set(model["accuracy"]) == {"8", "16"}
    rows = json.loads((tmp_path / "b" / "bench.json").read_text())["rows"]
    by_backend = {}
    for row in rows:
        by_backend.setdefault(row["backend"], []).append(row)
    assert all(r.get("skipped") == "torch not installed" for r in by_backend["ours"])
    assert all(r["ms"] > 0 for r in by_backend["jax"]) and len(by_backend["jax"]) == 2


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="needs a machine without a GPU")
def test_train_jax_device_cuda_without_a_gpu_is_a_clean_error(capsys, tmp_path):
    argv = ["train", "--framework", "jax", "--steps", "1", "--train-len", "8", "--eval-lens",
            "8", "--eval-size", "2", "--no-progress", "--out", str(tmp_path / "cuda")]
    assert main([*argv, "--device", "cuda"]) == 1
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [
        "mingru train: error: --device cuda was asked for but JAX sees no GPU"]
    assert captured.out == "" and not (tmp_path / "cuda").exists()
    assert main([*argv, "--device", "tpu"]) == 1
    assert "--device 'tpu' is not a JAX device" in capsys.readouterr().err


def test_jax_device_picks_the_named_device():
    from mingru_cli.train_jax import jax_device

    cpu = SimpleNamespace(platform="cpu")
    gpus = [SimpleNamespace(platform="gpu", id=i) for i in range(2)]
    fake = SimpleNamespace(devices=lambda platform=None: {"cpu": [cpu], "gpu": gpus,
                                                           None: gpus}[platform],
                           default_backend=lambda: "gpu")
    assert jax_device(fake, "cpu") is cpu  # the CPU even where a GPU is the default
    assert jax_device(fake, "cuda") is gpus[0] and jax_device(fake, "auto") is gpus[0]
    assert jax_device(fake, "cuda:1") is gpus[1] and jax_device(fake, "gpu:1") is gpus[1]
    with pytest.raises(RuntimeError, match="--device cuda:2 .* only 2 GPU"):
        jax_device(fake, "cuda:2")
    with pytest.raises(RuntimeError, match="not a JAX device"):
        jax_device(fake, "cuda:x")
    assert jax_device(jax, "cpu").platform == "cpu"


def test_lm_train_and_generate_jax_without_torch(tmp_path):
    """``train --task lm`` and ``generate`` on the JAX frontend with torch absent; the
    checkpoint's validation loss and greedy text are then checked with the PyTorch frontend."""
    from tests.cli.test_lm import greedy_oracle, make_text, val_loss_oracle

    data = make_text(tmp_path / "text.txt")
    ckpt = tmp_path / "ckpt"
    res = _run_without_torch(f"""
        import contextlib, io
        from mingru_cli.cli import main

        train = main(["train", "--task", "lm", "--framework", "jax", "--data",
                      {str(tmp_path / "text.txt")!r}, "--out", {str(ckpt)!r}, "--steps", "40",
                      "--d-model", "16", "--batch-size", "8", "--seq-len", "16", "--lr", "1e-2",
                      "--eval-every", "20", "--eval-batch-size", "4", "--sample-tokens", "8",
                      "--device", "cpu", "--no-progress"])
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            generate = main(["generate", "--framework", "jax", "--checkpoint", {str(ckpt)!r},
                             "--prompt", "the ", "--max-new-tokens", "12", "--temperature", "0",
                             "--device", "cpu"])
        RESULT = {{"train": train, "generate": generate, "text": text.getvalue()}}
    """)
    assert res["train"] == res["generate"] == 0 and not res["torch_loaded"], res
    run = json.loads((ckpt / "train.json").read_text())
    assert run["model"]["framework"] == "jax" and "torch" not in run["versions"]
    pytest.importorskip("torch")  # the checks below read the checkpoint with PyTorch
    final = run["model"]["final"]
    assert final["val_loss"] == pytest.approx(val_loss_oracle(ckpt, data, rows=4)[0], rel=1e-3)
    assert res["text"] == greedy_oracle(ckpt, "the ", 12) + "\n"
