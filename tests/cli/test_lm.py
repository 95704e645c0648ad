"""``mingru train --task lm`` and ``mingru generate``: a byte-level MinGRULM trained on a small
text file made here, its reported validation losses checked against a direct computation on the
saved checkpoint (the validation bytes counted by hand, the state carried across chunks, the
checkpoint of lowest validation loss kept, in both frontends), its outputs (sha256, plot,
training speed, a resumed run), its greedy continuation against a plain loop of full forwards,
the same text from the JAX frontend, and bad arguments as one-line errors naming the flag. The
Flax-only path (no torch) is in ``test_flax_only.py``. Correctness, never speed."""

from __future__ import annotations

import contextlib
import hashlib
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
from mingru_cli._train_common import fit_loop
from mingru_cli.cli import main
from mingru_cli.config import TrainConfig
from mingru_cli.tasks import ByteText

HAS_JAX = all(importlib.util.find_spec(m) for m in ("jax", "flax", "optax"))
FRAMEWORKS = ["torch", pytest.param("jax", marks=pytest.mark.skipif(not HAS_JAX,
                                                                      reason="needs jax"))]
WORDS = ("the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "old", "red", "café")
SEQ_LEN, ROWS, VAL_BYTES = 32, 8, 100
TRAIN = ["--steps", "100", "--d-model", "32", "--batch-size", "16", "--seq-len", str(SEQ_LEN),
         "--lr", "1e-2", "--eval-every", "50", "--eval-batch-size", str(ROWS), "--val-bytes",
         str(VAL_BYTES), "--no-progress", "--sample-tokens", "16", "--device", "cpu"]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def make_text(path: Path, n_words: int = 900, seed: int = 0) -> bytes:
    """A few KB of random words (one of them not ASCII), written to ``path``."""
    rng = np.random.default_rng(seed)
    data = (" ".join(rng.choice(WORDS, n_words)) + "\n").encode()
    path.write_bytes(data)
    return data


def stretches(val: bytes, rows: int, max_bytes: int | None = None) -> list[bytes]:
    """The validation stretches, counted by hand: the ``M = len(val) - 1`` predicted bytes in
    ``rows`` equal parts (part ``r`` from byte ``r·M // rows``), all of each part, or its first
    ``max_bytes // rows`` predicted bytes when ``max_bytes < M``; each stretch holds its first
    input byte too."""
    predicted = len(val) - 1
    scored = predicted if max_bytes is None else min(max_bytes, predicted)
    rows = min(rows, scored)
    out = []
    for r in range(rows):
        start, end = r * predicted // rows, (r + 1) * predicted // rows
        length = end - start if scored == predicted else scored // rows
        out.append(val[start : start + length + 1])
    return out


def val_loss_oracle(checkpoint: Path, data: bytes, rows: int,
                    max_bytes: int | None = None) -> tuple[float, int]:
    """``(mean next-byte cross-entropy, bytes scored)`` of the checkpoint on the validation
    stretches of the last 10 % of ``data``: one full forward per stretch, in float64."""
    model = MinGRULM.from_pretrained(checkpoint).double().eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for stretch in stretches(data[-round(0.1 * len(data)):], rows, max_bytes):
            tokens = torch.tensor([list(stretch)])
            logits, _ = model(tokens[:, :-1])
            total += float(F.cross_entropy(logits[0], tokens[0, 1:], reduction="sum"))
            count += len(stretch) - 1
    return total / count, count


def lowest(curve: list[dict], key: str = "val_loss") -> dict:
    """The point of ``curve`` with the lowest ``key``, the later one on a tie."""
    return min(reversed(curve), key=lambda point: point[key])


def assert_png(path: Path) -> None:
    """``path`` is a PNG image that matplotlib reads back."""
    import matplotlib.image

    assert path.read_bytes()[:8] == PNG_SIGNATURE
    height, width, _ = matplotlib.image.imread(path).shape
    assert height > 100 and width > 100


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
                                                "train_loss.png", "checkpoint"}  # for --resume
    assert_png(ckpt / "train_loss.png")
    run = json.loads((ckpt / "train.json").read_text())
    assert run["config"]["data"].endswith("text.txt") and run["seed"] == 0
    assert not {"eval_lens", "val_len", "eval_size", "mqar_pairs"} & set(run["config"])
    n_val = round(0.1 * len(data))
    assert run["split"] == {"data": run["config"]["data"], "bytes": len(data),
                            "sha256": hashlib.sha256(data).hexdigest(),
                            "train_bytes": len(data) - n_val, "val_bytes": n_val,
                            "val_fraction": 0.1, "val_start": len(data) - n_val}
    # Bytes scored: 8 rows of 100 // 8 at each evaluation point; every byte after the
    # split's first at the end.
    assert run["validation"] == {"stretches": ROWS, "chunk_bytes": 1024,
                                 "bytes_per_evaluation": ROWS * (VAL_BYTES // ROWS),
                                 "final_bytes": n_val - 1}
    model = run["model"]
    curve = model["curve"]
    assert [p["step"] for p in curve] == [50, 100]
    for point in curve:
        for kind in ("train", "val"):
            bits = point[f"{kind}_loss"] / math.log(2)
            assert point[f"{kind}_bpb"] == pytest.approx(bits, abs=1e-4)
    # Learning happened: from ln 256 ≈ 5.5 nats at the start to well below it.
    assert curve[-1]["val_loss"] < min(2.5, curve[0]["val_loss"] + 0.05)
    assert curve[0]["train_loss"] > curve[-1]["train_loss"]
    # The saved weights are those of the lowest validation loss, and the reported numbers
    # are their losses on the validation bytes scored at each point and on the whole split.
    assert model["selected_step"] == model["final"]["step"] == lowest(curve)["step"]
    oracle, count = val_loss_oracle(ckpt, data, ROWS, VAL_BYTES)
    assert count == ROWS * (VAL_BYTES // ROWS)
    assert lowest(curve)["val_loss"] == pytest.approx(oracle, rel=1e-3)
    oracle, count = val_loss_oracle(ckpt, data, ROWS)
    assert model["final"]["val_bytes"] == count == n_val - 1
    assert model["final"]["val_loss"] == pytest.approx(oracle, rel=1e-3)
    assert model["final"]["val_bpb"] == pytest.approx(oracle / math.log(2), rel=1e-3)
    # Training speed: the bytes of every step over the time spent in steps.
    assert model["tokens_per_second"] > 0 and 0 < model["step_seconds"] <= model["train_seconds"]
    trained = 100 * 16 * SEQ_LEN
    assert model["tokens_per_second"] == pytest.approx(trained / model["step_seconds"], rel=1e-2)
    assert "val bits/byte" in out and "bytes/s" in out and "sample (temperature" in out
    assert f"selected step {model['selected_step']} (lowest validation loss)" in out
    assert run["sample"]["prompt"] == data[-n_val:][:32].decode(errors="replace")
    assert len(run["sample"]["text"]) > 0 and run["config"]["sample_tokens"] == 16


def test_validation_bytes_are_the_hand_counted_stretches():
    text = ByteText(b"x" * 40 + b"0123456789", val_fraction=0.2)  # validation: 0 … 9
    whole = text.validation(rows=4)  # 9 predicted bytes in parts from 0, 2, 4, 6 (= 9·r // 4)
    def rows(values):
        return [bytes(row[mask].tolist()) for row, mask in zip(values, whole.mask, strict=True)]

    assert rows(whole.tokens) == [b"01", b"23", b"45", b"678"]
    assert rows(whole.labels) == [b"12", b"34", b"56", b"789"]
    assert int(whole.mask.sum()) == 9 and (whole.labels[~whole.mask] == -100).all()
    part = text.validation(rows=4, max_bytes=7)  # 7 // 4 = 1 byte at the start of each part
    assert part.labels.tolist() == [[ord("1")], [ord("3")], [ord("5")], [ord("7")]]
    few = text.validation(rows=4, max_bytes=2)  # fewer bytes than rows: 2 rows, parts 0 and 4
    assert few.tokens.tolist() == [[ord("0")], [ord("4")]]
    assert [bytes(s) for s in stretches(b"0123456789", 4)] == [b"012", b"234", b"456", b"6789"]
    for bad in ({"rows": 0}, {"rows": 2, "max_bytes": 0}):
        with pytest.raises(ValueError, match="must be"):
            text.validation(**bad)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_validation_loss_carries_the_state_across_chunks(tmp_path, framework):
    """Chunks of 5 bytes with the state carried give one full forward per stretch (float64)."""
    torch.manual_seed(0)
    MinGRULM(256, 16, 2, mixer=["log", "signed"]).save_pretrained(tmp_path)
    data = make_text(tmp_path / "text.txt", n_words=300)
    batch = ByteText(data, 0.1).validation(rows=3)
    assert batch.tokens.shape[1] > 3 * 5  # several chunks per row
    if framework == "torch":
        from mingru_cli.train import validation_loss

        model = MinGRULM.from_pretrained(tmp_path)
    else:
        from mingru_cli.train_jax import validation_loss
        from mingru_jax import MinGRULM as JaxMinGRULM

        model = JaxMinGRULM.from_pretrained(tmp_path)
    oracle, count = val_loss_oracle(tmp_path, data, rows=3)
    assert count == int(batch.mask.sum()) == round(0.1 * len(data)) - 1
    assert validation_loss(model, batch, chunk=5) == pytest.approx(oracle, rel=1e-5)
    assert validation_loss(model, batch, chunk=1024) == pytest.approx(oracle, rel=1e-5)


def test_fit_loop_keeps_the_lowest_validation_loss_and_averages_the_interval():
    task = ByteText(bytes(range(100)), 0.2)
    cfg = TrainConfig(task="lm", steps=8, eval_every=2, batch_size=2, train_len=4,
                      progress=False)
    batch_losses = iter([1.0, 3.0, 2.0, 2.0, 5.0, 6.0, 0.5, 0.5])
    val_losses = iter([4.0, 2.5, 2.5, 3.0])  # lowest at steps 4 and 6: the later is kept
    weights, restored = {"steps": 0}, []

    def step_fn(batch, lr):
        weights["steps"] += 1
        return next(batch_losses), 0.0

    record = fit_loop("log", task, cfg, val=None, step_fn=step_fn, evaluate=None,
                      snapshot=lambda: dict(weights), restore=restored.append,
                      on_eval=lambda train_loss: {"train_loss": train_loss,
                                                  "val_loss": next(val_losses)},
                      select_lowest="val_loss")
    assert [p["train_loss"] for p in record["curve"]] == [2.0, 2.0, 5.5, 0.5]
    assert record["selected_step"] == 6 and restored == [{"steps": 6}]
    assert record["step_seconds"] >= 0 and record["eval_seconds"] >= 0


def rising_text(path: Path) -> bytes:
    """Words to train on, then 400 bytes of "a" as the validation split: the more a model
    learns the words (after "a" comes a space or "t"), the worse it predicts "aaa…"."""
    rng = np.random.default_rng(0)
    data = (" ".join(rng.choice(WORDS, 2000))).encode()[:3600] + b"a" * 400
    path.write_bytes(data)
    return data


RISING = ["--steps", "40", "--d-model", "16", "--layers", "1", "--seq-len", "16",
          "--batch-size", "8", "--eval-every", "10", "--lr", "3e-2", "--eval-batch-size", "4",
          "--val-bytes", "40", "--sample-tokens", "4", "--device", "cpu", "--no-progress"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_lm_saves_the_weights_of_the_lowest_validation_loss(tmp_path, framework):
    data = rising_text(tmp_path / "text.txt")
    code, out, err = run_cli(["train", "--task", "lm", "--framework", framework, "--data",
                              str(tmp_path / "text.txt"), "--out", str(tmp_path / "run"),
                              *RISING])
    assert code == 0, err
    model = json.loads((tmp_path / "run" / "train.json").read_text())["model"]
    curve = model["curve"]
    best, last = lowest(curve), curve[-1]
    assert last["val_loss"] > best["val_loss"] + 0.5  # the validation loss rose
    assert model["selected_step"] == best["step"] < last["step"]
    oracle, _ = val_loss_oracle(tmp_path / "run", data, rows=4, max_bytes=40)
    assert oracle == pytest.approx(best["val_loss"], rel=1e-3)
    assert model["final"]["val_loss"] == pytest.approx(val_loss_oracle(tmp_path / "run", data,
                                                                       rows=4)[0], rel=1e-3)
    assert_png(tmp_path / "run" / "train_loss.png")


def test_lm_run_split_into_jobs_equals_one_job(tmp_path):
    """The mean training loss of an interval, the best point and its weights survive a
    resume that falls inside an interval."""
    rising_text(tmp_path / "text.txt")
    base = ["train", "--task", "lm", "--data", str(tmp_path / "text.txt"), *RISING]
    assert run_cli([*base, "--out", str(tmp_path / "one")])[0] == 0
    assert run_cli([*base, "--out", str(tmp_path / "split"), "--stop-after", "15"])[0] == 0
    assert not (tmp_path / "split" / "train.json").exists()
    code, _, err = run_cli(["train", "--resume", str(tmp_path / "split"), "--device", "cpu",
                            "--no-progress"])
    assert code == 0, err
    one, split = (json.loads((tmp_path / d / "train.json").read_text())["model"]
                  for d in ("one", "split"))
    for key in ("curve", "selected_step", "final"):
        assert one[key] == split[key], key


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
