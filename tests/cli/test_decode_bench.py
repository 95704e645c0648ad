"""The ``decode`` suite of the benchmark harness on CPU: the ``--quick`` run through the real
CLI entry (JSON rows and the rendered table), the per-token formula on a fake clock, the
matrix of the full run, the table's ratios, and GPT-2 skipped with its reason when
transformers is missing. Correctness and bookkeeping, never speed."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from mingru_benchmarks import decode, registry, tables

HAS_JAX = importlib.util.find_spec("jax") is not None


def test_decode_suite_quick_writes_json_and_table(tmp_path):
    # A subprocess outside the checkout: run from its root, the top-level kernels/ folder
    # would shadow the `kernels` package that transformers imports.
    argv = [sys.executable, "-m", "mingru_cli", "bench", "--suite", "decode", "--quick",
            "--device", "cpu", "--only", "MinGRU", "--dtype", "fp32", "--threads", "1",
            "--warmup", "0", "--repeats", "1", "--out", str(tmp_path / "bench")]
    env = {k: v for k, v in os.environ.items() if k != "MINGRU_SCAN"}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    res = json.loads((tmp_path / "bench" / "bench.json").read_text())
    md = (tmp_path / "bench" / "bench.md").read_text()
    rows = res["rows"]
    assert res["suites"] == ["decode"] and not [r for r in rows if "error" in r], rows
    by = {(r["shape"], r["mode"], r["backend"]): r for r in rows}
    shapes = [registry.Case("decode", "MinGRU", d).shape
              for d in registry.SHAPES["decode"]["quick"]]
    assert shapes == ["B1 P8 N8 d32 L2", "B2 P8 N8 d32 L2"]
    assert set(by) == {(s, m, b) for s in shapes for m, bs in (
        ("decode", registry.DECODE_BACKENDS), ("prefill", registry.PREFILL_BACKENDS)) for b in bs}
    for (shape, mode, backend), row in by.items():
        assert row["precision"] == "fp32" and row["case"] == "MinGRU"
        if "skipped" in row:  # an optional peer; ours, the step loop and the prefill always run
            assert backend in ("gpt2", "jax"), row
            assert row["skipped"].startswith({"gpt2": "transformers", "jax": "jax"}[backend])
            continue
        assert math.isfinite(row["ms"]) and "peak_gb" not in row  # no peak on a CPU
        if mode == "decode" and row["ms"] > 0:
            batch = int(shape.split()[0][1:])
            assert row["tokens_per_s"] == pytest.approx(batch * 1e3 / row["ms"])
    if HAS_JAX:
        assert all("ms" in by[s, "decode", "jax"] for s in shapes)
    assert "### decode" in md and "| ours ms/token | tokens/s | × step loop | × GPT-2 |" in md
    assert "| MinGRU d32 L2 | 1 | 8 | 8 | fp32 |" in md
    assert "| MinGRU d32 L2 | 2 | 8 | 8 | fp32 |" in md


def test_decode_ms_per_token_is_the_decode_loop_alone(monkeypatch):
    """On a fake clock, a generate of n new tokens costs 5 ms (prefill) + 2 ms per token: the
    suite reports 2 ms/token and batch × 500 tokens/s, and checks the output's length."""
    clock = [0.0]
    case = registry.Case("decode", "MinGRU", (3, 4, 6, 8, 1))

    def fake(case_, device, graph):
        def generate(new, **kwargs):
            clock[0] += (5 + 2 * new) / 1e3
            return torch.zeros(3, 4 + new)

        return generate, lambda out: out

    monkeypatch.setattr(decode, "_ours", fake)
    monkeypatch.setattr(decode.time, "perf_counter", lambda: clock[0])
    row = decode.measure(case, "ours", "cpu", 0, 3)
    assert row["ms"] == pytest.approx(2.0) and row["tokens_per_s"] == pytest.approx(1500.0)

    def short(case_, device, graph):  # a backend that stops early is an error, not a time
        return (lambda new, **kwargs: torch.zeros(3, 4 + new - 1)), (lambda out: out)

    monkeypatch.setattr(decode, "_ours", short)
    with pytest.raises(RuntimeError, match="returned"):
        decode.measure(case, "step-loop", "cpu", 0, 1)


def test_decode_full_matrix():
    cases = registry.cases("decode", "cuda", False)
    mingru_cases = [c for c in cases if c.name == "MinGRU"]
    assert {(c.dims[:2], c.precision) for c in mingru_cases} == {
        ((b, p), q) for b in (1, 64) for p in (128, 8192) for q in ("fp32", "bf16")}
    assert all(c.dims[3:] == (512, 4) for c in cases)
    assert all("gpt2" in c.backends for c in mingru_cases)
    assert not any("gpt2" in c.backends for c in cases if c.name != "MinGRU")
    assert {c.name for c in cases} == set(registry.TRAIN_MIXERS)


def test_decode_table_ratios():
    def row(case, backend, ms, mode="decode", shape="B64 P8192 N256 d512 L4", **extra):
        return {"suite": "decode", "case": case, "shape": shape, "precision": "bf16",
                "mode": mode, "backend": backend, "ms": ms, **extra}

    rows = [row("MinGRU", "ours", 0.1, tokens_per_s=640000.0), row("MinGRU", "step-loop", 0.5),
            row("MinGRU", "gpt2", 20.0), row("MinGRU", "jax", 0.12),
            row("MinGRU", "chunked", 30.0, "prefill", peak_gb=1.5),
            row("MinGRU", "unchunked", 25.0, "prefill", peak_gb=6.25),
            row("SignedMinGRU", "ours", 0.2, tokens_per_s=320000.0),
            {**row("SignedMinGRU", "jax", 0.0), "skipped": "jax / mingru_jax not importable"}]
    del rows[-1]["ms"]
    text = "\n".join(tables.table("decode", rows))
    assert ("| MinGRU d512 L4 | 64 | 8192 | 256 | bf16 | 0.1 | 640,000 | 5.00× | 200.00× | "
            "30 / 25 | 1.50 / 6.25 | 0.12 |") in text
    # GPT-2 runs once per shape and precision; every mixer's row is compared with it.
    assert "| SignedMinGRU d512 L4 | 64 | 8192 | 256 | bf16 | 0.2 | 320,000 | — | 100.00× | " in text
    assert "Not run: jax: jax / mingru_jax not importable (SignedMinGRU bf16 decode)." in text


def test_decode_gpt2_without_transformers_is_a_skip(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    case = registry.Case("decode", "MinGRU", (1, 4, 2, 8, 1))
    with pytest.raises(registry.Skip, match="transformers not importable"):
        decode.measure(case, "gpt2", "cpu", 0, 1)
