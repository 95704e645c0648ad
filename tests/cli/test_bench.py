"""The benchmark harness (``mingru bench`` = :mod:`mingru_benchmarks.run`) on CPU: every suite's
``--quick`` run through the real CLI entry, the backend and peer selection (the peers' gate
algebra checked against the library with loop scans in their kernels' place), the paired
rounds, the page-block filler, and bad flags. Correctness and bookkeeping, never speed."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import types

import pytest
import torch

from mingru_benchmarks import page, peers, registry, tables, timers
from mingru_benchmarks.run import Settings, backends_for
from mingru_cli.cli import main

QUICK = ["bench", "--device", "cpu", "--quick", "--threads", "1", "--warmup", "0",
         "--repeats", "1"]
HAS_JAX = importlib.util.find_spec("jax") is not None


def _bench(tmp_path, *extra: str) -> tuple[dict, str]:
    out = tmp_path / "bench"
    assert main([*QUICK, *extra, "--out", str(out)]) == 0
    assert (out / "bench.png").stat().st_size > 0
    return json.loads((out / "bench.json").read_text()), (out / "bench.md").read_text()


def _timed(res: dict) -> list[dict]:
    assert not [r for r in res["rows"] if "error" in r], res["rows"]
    rows = [r for r in res["rows"] if "ms" in r]
    assert rows and all(math.isfinite(r["ms"]) and r["ms"] > 0 for r in rows)
    return rows


# --------------------------------------------------------------------------- every suite, quick


@pytest.mark.parametrize(("suite", "only", "want"), [
    ("ops", "parallel_scan_log,givens_cell", {("ops", "parallel_scan_log"), ("ops", "givens_cell")}),
    ("mixers", "SignedMinGRU,DeltaMinGRU", {("mixers", "SignedMinGRU"), ("mixers", "DeltaMinGRU")}),
    ("train-step", "SignedMinGRU", {("train-step", "SignedMinGRU")}),
    ("host", "linear_scan,MinGRU", {("host", "linear_scan"), ("host", "MinGRU")}),
    ("delta", "delta_rule", {("delta", "delta_rule nh1"), ("delta", "delta_rule nh2 decay")}),
    ("memory-floor", "linear_recurrence", {("memory-floor", "linear_recurrence")}),
])
def test_suite_quick_writes_json_and_markdown(tmp_path, suite, only, want):
    res, md = _bench(tmp_path, "--suite", suite, "--only", only,
                     *(["--dtype", "fp32"] if suite != "train-step" else []))
    rows = _timed(res)
    assert {(r["suite"], r["case"]) for r in rows} == want
    assert res["suites"] == [suite] and res["command"].startswith("mingru bench --device cpu")
    assert {"torch", "commit", "date"} <= set(res["environment"])
    assert f"### {suite}" in md and "| case |" in md
    assert {r["backend"] for r in rows} >= ({"ours"} if suite == "memory-floor" else {"ours", "eager"})
    assert {r["mode"] for r in rows} == ({"fwd"} if suite == "memory-floor" else
                                         {"step"} if suite == "train-step" else {"fwd", "fwd+bwd"})
    skipped = {r["backend"]: r["skipped"] for r in res["rows"] if "skipped" in r}
    if suite not in ("host", "memory-floor", "delta"):
        assert skipped.get("compile") == "--quick" and "triton" not in skipped
    if suite == "host":
        assert all(0 < r["enqueue_ms"] for r in rows) and "ours enqueue µs" in md
    if suite == "delta":  # float32 on the eager chunked form: float32 accuracy against float64
        assert all(r["err_vs_f64"] < 1e-5 for r in rows if r["mode"] == "fwd")
    if suite == "memory-floor":
        assert res["bandwidth_GBps"] > 0
        ours = next(r for r in rows if r["backend"] == "ours")
        B, T, D = registry.SHAPES["memory-floor"]["quick"][0]
        assert ours["bytes"] == 3 * B * T * D * 4  # a, b read; h written
        assert ours["floor_ms"] == pytest.approx(ours["bytes"] / res["bandwidth_GBps"] / 1e6)


def test_headline_quick_has_every_table(tmp_path):
    res, md = _bench(tmp_path, "--only", "linear_recurrence,MinGRU")
    rows = _timed(res)
    assert {r["suite"] for r in rows} == ({"ops", "mixers", "train-step", "jax"} if HAS_JAX
                                          else {"ops", "mixers", "train-step"})
    assert {r["precision"] for r in rows if r["suite"] == "mixers"} == {"bf16"}
    assert "| linear_recurrence | B2 T32 D16 | fp32 |" in md and "ours ms/step" in md
    assert "× torch.compile" in md and "JAX frontend" in md


def test_hooks_suite_pairs_each_hook_off_and_on(tmp_path):
    res, md = _bench(tmp_path, "--suite", "hooks", "--only", "all", "--repeats", "2")
    by = {(r["case"], r["backend"]): r for r in _timed(res)}
    assert set(by) == {("all", b) for b in ("on", "off")}
    assert by["all", "off"]["off_vs_on"] > 0
    assert "| all |" in md and "off / on" in md


@pytest.mark.skipif(not HAS_JAX, reason="jax is not installed")
def test_jax_suite_quick(tmp_path):
    res, md = _bench(tmp_path, "--suite", "jax", "--only", "linear_scan")
    assert {r["backend"] for r in _timed(res)} >= {"ours", "jax"}  # jax-triton: interpreter
    assert "### jax" in md


@pytest.mark.skipif(not HAS_JAX, reason="jax is not installed")
@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
def test_jax_rows_trace_under_their_backend(monkeypatch, mode):
    """The mode is read when jit traces (the first call): it must be in force then."""
    import mingru_jax
    from mingru_benchmarks import jax_side
    from mingru_jax.dispatch import scan_mode

    seen = []
    monkeypatch.setattr(mingru_jax, "linear_scan", lambda a, b: seen.append(scan_mode()) or a * b)
    call, _ = jax_side.timed_call(registry.Case("jax", "linear_scan", (2, 5, 8)), "jax", mode,
                                  "cpu")
    call()
    assert seen == ["eager"]


# --------------------------------------------------------------------------- selection and peers


def _settings(**kw) -> Settings:
    base = dict(suites=["ops"], device="cpu", quick=True, warmup=0, repeats=1, only=[],
                backends=None, precisions=None)
    return Settings(**{**base, **kw})


def test_backend_selection():
    op = registry.cases("ops", "cpu", True)[2]
    assert op.name == "linear_recurrence"
    assert backends_for(op, _settings()) == [
        ("ours", None), ("eager", None), ("compile", "--quick"), ("accelerated-scan", None),
        ("fla", None)]
    assert backends_for(op, _settings(quick=False, backends=["triton", "compile", "fla"])) == [
        ("triton", None), ("compile", None), ("fla", None)]
    assert backends_for(op, _settings(backends=["compile"])) == [("compile", None)]
    host = registry.cases("host", "cpu", True)[0]
    assert [b for b, _ in backends_for(host, _settings())] == ["ours", "triton", "eager"]
    assert {c.name for c in registry.cases("mixers", "cpu", True)
            if "fla" in c.backends} == {"MinGRU"}


def _loop(a: torch.Tensor, b: torch.Tensor, dim: int = 1) -> torch.Tensor:
    h, out = torch.zeros_like(b.select(dim, 0)), []
    for a_t, b_t in zip(a.unbind(dim), b.unbind(dim), strict=True):
        h = a_t * h + b_t
        out.append(h)
    return torch.stack(out, dim)


@pytest.fixture
def fake_peers(monkeypatch):
    """fla, accelerated-scan and minGRU-pytorch stand-ins with the kernels' contracts (loop
    scans), so the peers' layouts and gate algebra are checked on a CPU."""
    hgrn = types.ModuleType("fla.ops.hgrn")
    hgrn.chunk_hgrn = lambda x, g: (_loop(g.exp(), x), None)  # h_t = exp(g_t) h_{t-1} + x_t
    scalar = types.ModuleType("accelerated_scan.scalar")

    def scan(a, b):  # (B, D, T), contiguous
        assert a.is_contiguous() and b.is_contiguous()
        return _loop(a, b, 2)

    scalar.scan = scan
    heinsen = types.ModuleType("minGRU_pytorch.minGRU")
    heinsen.heinsen_associative_scan_log = lambda la, lb: _loop(la.exp(), lb.exp())
    for name, mod in {"fla": types.ModuleType("fla"), "fla.ops": types.ModuleType("fla.ops"),
                      "fla.ops.hgrn": hgrn, "accelerated_scan": types.ModuleType("a"),
                      "accelerated_scan.scalar": scalar, "minGRU_pytorch.minGRU": heinsen,
                      "minGRU_pytorch": types.ModuleType("minGRU_pytorch")}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.setattr(peers, "NEEDS_CUDA", ())


@pytest.mark.parametrize(("peer", "op"), [
    ("fla", "linear_recurrence"), ("accelerated-scan", "linear_recurrence"),
    ("minGRU-pytorch", "parallel_scan_log"), ("fla", "mingru_cell"),
    ("minGRU-pytorch", "mingru_cell"), ("accelerated-scan", "signed_mingru_cell")])
def test_op_peers_compute_the_library_op(fake_peers, peer, op):
    import mingru
    from mingru_benchmarks.torch_side import op_inputs

    xs, _ = op_inputs(op, (2, 9, 8), "cpu", torch.float64)
    fn, args = peers.op_peer(peer, op, xs, "cpu")
    got = fn(*args)
    if (peer, op) == ("accelerated-scan", "linear_recurrence"):
        got = got.transpose(1, 2)  # its (B, D, T) layout
    with mingru.use_backend("eager"):
        torch.testing.assert_close(got, getattr(mingru, op)(*xs))


@pytest.mark.parametrize(("peer", "name"), [("fla", "MinGRU"), ("accelerated-scan", "SignedMinGRU")])
def test_mixer_peers_run_on_the_library_projection(fake_peers, peer, name):
    import mingru

    mixer = getattr(mingru, name)(8, 8).double()
    x = torch.randn(2, 9, 8, dtype=torch.float64)
    h0 = {"h_0": torch.zeros(2, 1, 8, dtype=torch.float64)} if name == "MinGRU" else {}
    with mingru.use_backend("eager"):
        torch.testing.assert_close(peers.mixer_peer(peer, name, mixer, "cpu")(x), mixer(x, **h0))


def test_delta_peer_layouts(fake_peers, monkeypatch):
    """DeltaProduct's layout: the micro-steps of a token consecutive in time, log γ its gate."""
    from mingru_benchmarks.torch_side import delta_inputs

    xs = delta_inputs(registry.Case("delta", "delta_rule nh2 decay", (2, 5, 4, 3)), "cpu")
    gdp, seen = types.ModuleType("fla.ops.gated_delta_product"), {}
    gdp.chunk_gated_delta_product = lambda *a, **kw: seen.update(args=a, **kw) or (a[0], None)
    monkeypatch.setitem(sys.modules, "fla.ops.gated_delta_product", gdp)
    fn, args = peers.delta_peer(xs, 2, True, "cpu")
    fn(*args)
    q, k, v, g, beta = seen["args"]
    assert k.shape == (2, 10, 4, 3) and beta.shape == (2, 10, 4) and seen["num_householder"] == 2
    assert torch.equal(k[:, 1], xs[1][:, 0, 1]) and torch.equal(g, xs[4])


def test_unavailable_peer_is_a_reason_not_an_error():
    with pytest.raises(registry.Skip, match="needs CUDA"):
        peers.check("fla", "cpu")


@pytest.mark.parametrize("interpret", [False, True])
def test_forced_kernels_on_cpu_are_skipped_on_a_gpu_machine(monkeypatch, interpret):
    """``--device cpu`` with a GPU present (faked: Triton can serve): the ``triton`` rows are a
    reason, not an error, unless Triton's interpreter runs the kernels on the CPU."""
    from mingru_benchmarks import torch_side

    monkeypatch.setattr(torch_side.mingru, "available", lambda: True)
    monkeypatch.setattr(torch_side, "interpreter_mode", lambda: interpret)
    case = registry.Case("host", "linear_scan", (2, 16, 16))
    if interpret:
        call, _ = torch_side.timed_call(case, "triton", "fwd", "cpu")
        assert callable(call)
    else:
        with pytest.raises(registry.Skip, match="need CUDA tensors on cpu"):
            torch_side.timed_call(case, "triton", "fwd", "cpu")


# --------------------------------------------------------------------------- timers


def test_paired_rounds_alternate_and_pair_ratios():
    order, clock = [], iter(range(100))

    def measure(name, cost):
        return lambda: order.append(name) or cost + next(clock)  # drifting by one per call

    times = timers.paired({"a": measure("a", 10.0), "b": measure("b", 20.0)}, 4)
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert times == {"a": [10.0, 13.0, 14.0, 17.0], "b": [21.0, 22.0, 25.0, 26.0]}
    assert timers.paired_ratio([2.0, 4.0, 9.0], [1.0, 2.0, 3.0]) == 2.0


def test_host_timer_counts_calls_and_syncs():
    calls, syncs = [], []
    wall, enqueue = timers.host(lambda: calls.append(1), syncs.append, calls=5, batches=3)
    assert len(calls) == 1 + 15 and len(syncs) == 1 + 3 and 0 <= enqueue <= wall


# --------------------------------------------------------------------------- the page


def _result(suites, rows, command="mingru bench --suite headline"):
    env = {"gpu": "NVIDIA H100 80GB HBM3", "torch": "2.11.0", "triton": "3.6.0", "jax": "0.11.2",
           "jax-triton": "0.3.1", "fla-core": "0.6.0", "commit": "abc1234",
           "date": "2026-12-07 10:00 UTC"}
    return {"suites": suites, "command": command, "environment": env, "rows": rows}


def _row(suite, case, mode, backend, ms, precision="fp32", shape="B16 T4096 D256"):
    row = {"suite": suite, "case": case, "shape": shape, "precision": precision, "mode": mode,
           "backend": backend, "ms": ms}
    return row if ms is not None else {k: v for k, v in row.items() if k != "ms"}


def test_page_blocks_are_filled_from_json(tmp_path, capsys):
    headline = _result(["headline"], [
        _row("ops", "linear_recurrence", "fwd", "ours", 0.2),
        _row("ops", "linear_recurrence", "fwd", "eager", 1.0),
        _row("ops", "linear_recurrence", "fwd+bwd", "ours", 0.5),
        _row("ops", "linear_recurrence", "fwd+bwd", "eager", 2.0),
        _row("ops", "linear_recurrence", "fwd", "fla", 0.3),
        _row("train-step", "MinGRU", "step", "ours", 10.0, "bf16", "B8 T2048 d512 L4"),
        _row("train-step", "MinGRU", "step", "compile", 15.0, "bf16", "B8 T2048 d512 L4"),
        _row("ops", "linear_recurrence", "fwd+bwd", "fla", None)])
    headline["rows"][-1]["skipped"] = "x"
    ops = _result(["ops"], [_row("ops", "linear_scan", "fwd", "ours", 0.1),
                            _row("ops", "linear_scan", "fwd", "compile", 0.25)],
                  "mingru bench --suite ops")
    folder = tmp_path / "h100"
    folder.mkdir()
    for name, res in (("headline", headline), ("ops", ops)):
        (folder / f"{name}.json").write_text(json.dumps(res))
    prose = "# Benchmarks\n\nWords before.\n\n"
    text = (prose + "<!-- bench:headline -->\nold\n<!-- /bench:headline -->\n\nMiddle.\n\n"
            "<!-- bench:ops -->\n<!-- /bench:ops -->\n\n<!-- bench:delta -->\nkept\n"
            "<!-- /bench:delta -->\nEnd.\n")
    md = tmp_path / "benchmarks.md"
    md.write_text(text)
    assert page.main([str(md), "--json", str(folder)]) == 0
    assert "delta" in capsys.readouterr().err  # named as left without data
    new = md.read_text()
    assert new.startswith(prose) and "\nMiddle.\n" in new and new.endswith("kept\n<!-- /bench:delta -->\nEnd.\n")
    block = new.split("<!-- bench:headline -->\n")[1].split("<!-- /bench:headline -->")[0]
    first = block.splitlines()[0]
    for part in ("NVIDIA H100 80GB HBM3", "torch 2.11.0", "jax-triton 0.3.1", "fla-core 0.6.0",
                 "`abc1234`", "2026-12-07", "`mingru bench --suite headline`"):
        assert part in first
    assert "| linear_recurrence | B16 T4096 D256 | fp32 | 0.2 | 0.5 | 5.00× / 4.00× | — / — | 1.50× / — (fla) |" in block
    assert "| MinGRU | B8 T2048 d512 L4 | bf16 | 10 | — | 1.50× |" in block
    assert "old" not in block and "Not run: fla: x (linear_recurrence fp32 fwd+bwd)." in block
    assert "| linear_scan | B16 T4096 D256 | fp32 | fwd | 0.1 | 0.25 | 2.50× |" in new
    again = tmp_path / "again.md"
    again.write_text(new)
    assert page.main([str(again), "--json", str(folder)]) == 0
    assert again.read_text() == new  # regenerating is idempotent


def test_json_out_names_a_file_or_a_folder(tmp_path):
    for target, want in (("h100", "h100/memory-floor.json"), ("h100/part-a.json", "h100/part-a.json")):
        _bench(tmp_path, "--suite", "memory-floor", "--only", "linear_scan", "--json-out",
               str(tmp_path / target))
        assert json.loads((tmp_path / want).read_text())["suites"] == ["memory-floor"]


def test_markdown_of_a_result_names_its_run():
    res = _result(["ops"], [_row("ops", "linear_scan", "fwd", "ours", 0.1)],
                  "mingru bench --suite ops")
    text = tables.markdown(res)
    assert text.splitlines()[0] == tables.stamp([res]) and "### ops" in text


# --------------------------------------------------------------------------- bad flags


@pytest.mark.parametrize(("argv", "flag"), [
    (["--suite", "nosuch"], "--suite"), (["--only", "nosuch"], "--only"),
    (["--backends", "tensorflow"], "--backends"), (["--dtype", "fp16"], "--dtype"),
    (["--device", "gpu"], "--device"), (["--repeats", "0"], "--repeats"),
    (["--repeats", "many"], "--repeats"), (["--no-such-flag"], "--no-such-flag"),
    (["--suite", "host", "--only", "delta_rule"], "--only")])
def test_bad_flags_are_one_line_errors(tmp_path, capsys, argv, flag):
    out = tmp_path / "bench"
    assert main(["bench", "--device", "cpu", "--quick", *argv, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("mingru bench: error:"), err
    assert flag in err and "Traceback" not in err
    assert not out.exists()


def test_harness_modules_import_no_framework():
    import subprocess

    code = ("import sys; from mingru_benchmarks import registry, run, tables, timers, page; "
            "run.build_parser().parse_args(['--suite', 'ops']); "
            "registry.cases('headline', 'cuda', False); "
            "print(sorted(m for m in ('torch', 'jax', 'mingru', 'mingru_jax') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr
