"""``mingru train --task lm`` and ``mingru generate``: a byte-level MinGRULM trained on a small
text file made here, its reported validation loss checked against a direct computation on the
saved checkpoint, its greedy continuation against a plain loop of full forwards, the same text
from the JAX frontend, and bad arguments as one-line errors naming the flag. The Flax-only
path (no torch) is in ``test_flax_only.py``. Correctness, never speed."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mingru import MinGRULM
from mingru_cli.cli import main

HAS_JAX = all(importlib.util.find_spec(m) for m in ("jax", "flax", "optax"))
WORDS = ("the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "old", "red", "café")
SEQ_LEN, EVAL_SIZE = 32, 8
TRAIN = ["--steps", "100", "--d-model", "32", "--batch-size", "16", "--seq-len", str(SEQ_LEN),
         "--lr", "1e-2", "--eval-every", "50", "--eval-size", str(EVAL_SIZE), "--no-progress",
         "--sample-tokens", "16", "--device", "cpu"]


def make_text(path: Path, n_words: int = 900, seed: int = 0) -> bytes:
    """A few KB of random words (one of them not ASCII), written to ``path``."""
    rng = np.random.default_rng(seed)
    data = (" ".join(rng.choice(WORDS, n_words)) + "\n").encode()
    path.write_bytes(data)
    return data


def val_loss_oracle(checkpoint: Path, data: bytes, seq_len: int, eval_size: int) -> float:
    """Mean next-byte cross-entropy of the checkpoint on consecutive windows of the last 10 %
    of ``data``, by full forwards in float64."""
    model = MinGRULM.from_pretrained(checkpoint).double().eval()
    val = torch.tensor(list(data[-round(0.1 * len(data)):]))
    starts = range(0, len(val) - seq_len, seq_len)
    windows = torch.stack([val[s : s + seq_len + 1] for s in starts][:eval_size])
    with torch.no_grad():
        logits, _ = model(windows[:, :-1])
    return float(F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten()))


def greedy_oracle(checkpoint: Path, prompt: str, n: int) -> str:
    """Greedy continuation by a full forward of the whole sequence per new byte."""
    model = MinGRULM.from_pretrained(checkpoint).eval()
    tokens = list(prompt.encode())
    with torch.no_grad():
        for _ in range(n):
            logits, _ = model(torch.tensor([tokens]))
            tokens.append(int(logits[0, -1].argmax()))
    return bytes(tokens[len(prompt.encode()):]).decode(errors="replace")


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, bytes, str]:
    """A checkpoint of ``train --task lm --framework torch``: (folder, text, stdout)."""
    folder = tmp_path_factory.mktemp("lm")
    data = make_text(folder / "text.txt")
    code, out, err = run_cli(["train", "--task", "lm", "--data", str(folder / "text.txt"),
                              "--out", str(folder / "ckpt"), *TRAIN])
    assert code == 0, err
    return folder / "ckpt", data, out


def test_lm_train_saves_the_checkpoint_and_reports_the_validation_loss(trained):
    ckpt, data, out = trained
    assert {p.name for p in ckpt.iterdir()} == {"config.json", "model.safetensors", "train.json",
                                                "checkpoint"}  # checkpoint/: for --resume
    run = json.loads((ckpt / "train.json").read_text())
    assert run["config"]["data"].endswith("text.txt") and run["seed"] == 0
    n_val = round(0.1 * len(data))
    assert run["split"] == {"data": run["config"]["data"], "bytes": len(data),
                            "train_bytes": len(data) - n_val, "val_bytes": n_val,
                            "val_fraction": 0.1, "val_start": len(data) - n_val}
    curve = run["model"]["curve"]
    assert [p["step"] for p in curve] == [50, 100]
    for point in curve:
        assert point["val_bpb"] == pytest.approx(point["val_loss"] / math.log(2), abs=1e-4)
    # Learning happened: from ln 256 ≈ 5.5 nats at the start to well below it.
    assert curve[-1]["val_loss"] < min(2.5, curve[0]["val_loss"] + 0.05)
    # The reported number is the loss of the saved weights on the held-out windows.
    oracle = val_loss_oracle(ckpt, data, SEQ_LEN, EVAL_SIZE)
    assert curve[-1]["val_loss"] == pytest.approx(oracle, rel=1e-3)
    assert "val bits/byte" in out and "sample (temperature" in out
    assert run["sample"]["prompt"] == data[-n_val:][:32].decode(errors="replace")
    assert len(run["sample"]["text"]) > 0 and run["config"]["sample_tokens"] == 16


def test_lm_generate_greedy_matches_a_full_forward_loop(trained):
    ckpt = trained[0]
    code, out, err = run_cli(["generate", "--checkpoint", str(ckpt), "--prompt", "the cat ",
                              "--max-new-tokens", "24", "--temperature", "0", "--device", "cpu"])
    assert code == 0, err
    want = greedy_oracle(ckpt, "the cat ", 24)
    assert out == want + "\n"
    assert len(set(want)) >= 3  # a trained model, not one repeated byte


@pytest.mark.skipif(not HAS_JAX, reason="jax, flax or optax is not installed")
def test_lm_generate_jax_gives_the_torch_checkpoints_greedy_text(trained):
    ckpt = trained[0]
    argv = ["generate", "--checkpoint", str(ckpt), "--prompt", "a dog ", "--max-new-tokens",
            "24", "--temperature", "0", "--device", "cpu"]
    texts = {fw: run_cli([*argv, "--framework", fw]) for fw in ("torch", "jax")}
    assert texts["torch"][0] == texts["jax"][0] == 0, texts
    assert texts["jax"][1] == texts["torch"][1] == greedy_oracle(ckpt, "a dog ", 24) + "\n"


def test_lm_generate_sampling_is_seeded(trained):
    argv = ["generate", "--checkpoint", str(trained[0]), "--prompt", "the", "--max-new-tokens",
            "40", "--temperature", "1.5", "--top-k", "50", "--top-p", "0.99", "--device", "cpu"]
    first, again, other = (run_cli([*argv, "--seed", s]) for s in ("1", "1", "2"))
    assert first == again and first[0] == 0 and first[1] != other[1]


@pytest.mark.parametrize(("extra", "message"), [
    (["--data", "{tmp}/missing.txt"], "--data '{tmp}/missing.txt' cannot be read"),
    (["--data", "{tmp}/empty.txt"], "--data '{tmp}/empty.txt' is empty"),
    (["--data", "{tmp}/short.txt"], "--data '{tmp}/short.txt' is too short: 300 bytes"),
    (["--data", "{tmp}/text.txt", "--seq-len", "500"], "is too short"),
    ([], "--data: --task lm trains on a text file"),
    (["--data", "{tmp}/text.txt", "--mixer", "log", "--mixer", "signed"], "--mixer"),
    (["--data", "{tmp}/text.txt", "--val-fraction", "1.5"], "--val-fraction"),
])
def test_lm_train_bad_arguments_are_one_line_errors(tmp_path, extra, message):
    make_text(tmp_path / "text.txt")
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "short.txt").write_bytes(b"x" * 300)
    argv = [a.format(tmp=tmp_path) for a in extra]
    code, out, err = run_cli(["train", "--task", "lm", *argv, "--out", str(tmp_path / "ckpt"),
                              "--steps", "2", "--no-progress", "--device", "cpu"])
    assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, err
    assert err.startswith("mingru train: error: ") and message.format(tmp=tmp_path) in err
    assert not (tmp_path / "ckpt").exists()


def test_lm_generate_bad_arguments_are_one_line_errors(trained, tmp_path):
    ckpt = str(trained[0])
    MinGRULM(100, 8, 1).save_pretrained(tmp_path / "words")
    for argv, message in (
        (["--checkpoint", ckpt, "--temperature", "-1"], "--temperature must be finite and >= 0"),
        (["--checkpoint", ckpt, "--top-p", "0"], "--top-p must be in (0, 1]"),
        (["--checkpoint", ckpt, "--max-new-tokens", "-2"], "--max-new-tokens must be >= 0"),
        (["--checkpoint", ckpt, "--prompt", ""], "--prompt must not be empty"),
        (["--checkpoint", str(tmp_path / "none")], "--checkpoint: no config.json"),
        (["--checkpoint", str(tmp_path / "words")], "has vocab_size 100"),
    ):
        full = ["generate", "--prompt", "hi", "--max-new-tokens", "3", "--device", "cpu", *argv]
        code, out, err = run_cli(full)
        assert code == 1 and out == "" and len(err.strip().splitlines()) == 1, (argv, err)
        assert err.startswith("mingru generate: error: ") and message in err, (argv, err)


def test_generate_help_imports_neither_framework():
    code = ("import sys\nfrom mingru_cli.cli import main\ntry:\n    main(['generate', '--help'])\n"
            "except SystemExit as exc:\n    assert exc.code == 0\n"
            "print(sorted(m for m in ('torch', 'jax', 'mingru', 'mingru_jax') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("[]"), proc.stderr
