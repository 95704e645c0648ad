"""The model-level ``mingru bench`` groups (``mixers``, ``train-step``, ``host``) on CPU in
``--quick`` mode through the real CLI entry, plus the pieces they are built from: the
peer-built mixers' gate algebra, the profiler's op families, the speed-up bookkeeping and the
flag validation. Every check is about correctness and bookkeeping, never speed."""

from __future__ import annotations

import json
import math

import pytest
import torch

from mingru_cli import (
    bench_cases,
    bench_common,
    bench_delta,
    bench_mixers,
    bench_profile,
    bench_train,
)
from mingru_cli.bench_merge import merge
from mingru_cli.bench_plans import TRAIN_MIXERS, make_plan
from mingru_cli.cli import main

QUICK = ["bench", "--device", "cpu", "--quick", "--repeats", "1", "--warmup", "1",
         "--threads", "1"]


def _bench(tmp_path, *extra: str) -> tuple[dict, str]:
    out = tmp_path / "bench"
    assert main([*QUICK, *extra, "--out", str(out)]) == 0
    return json.loads((out / "bench.json").read_text()), (out / "bench.md").read_text()


# --------------------------------------------------------------------------- through the CLI


def test_mixers_group_quick(tmp_path):
    res, md = _bench(tmp_path, "--groups", "mixers", "--shapes", "long")
    rows = res["rows"]
    assert {r["group"] for r in rows} == {"mixers"} and not [r for r in rows if "error" in r]
    timed = [r for r in rows if "ms" in r]
    # Every mixer × precision × mode ran on eager, once.
    want = {(m, p, mode) for m in bench_cases.MIXERS for p in ("fp32", "bf16")
            for mode in ("fwd", "fwd+bwd")}
    assert sorted((r["op"], r["precision"], r["mode"]) for r in timed) == sorted(want)
    assert {r["backend"] for r in timed} == {"eager"}
    for r in timed:
        assert r["ms"] > 0 and math.isfinite(r["ms"])
        assert r["shape"] == "B2 T64 d16" and r["size"] == "long"
        assert r["speedup_vs_eager"] == 1.0 and "peak_mb" not in r  # CUDA only
    # What could not run here is a row with the reason, not a silent gap.
    skipped = {(r["op"], r["backend"]): r["skipped"] for r in rows if "skipped" in r}
    assert skipped[("log", "triton")] and skipped[("delta", "compile(eager)")] == "--quick"
    assert skipped[("log", "fla")] == "needs CUDA"
    assert skipped[("signed", "accelerated_scan")] == "needs CUDA"
    assert not any(b in ("fla", "accelerated_scan") for op, b in skipped if op == "givens")
    assert "### mixers" in md and "| log | B2 T64 d16 | bf16 | fwd+bwd |" in md
    assert res["settings"]["precisions"] == ["fp32", "bf16"]


def test_train_step_group_quick(tmp_path):
    res, md = _bench(tmp_path, "--groups", "train-step", "--shapes", "small",
                     "--ops", "signed,delta", "--profile-steps", "1")
    rows = [r for r in res["rows"] if "ms" in r]
    assert not [r for r in res["rows"] if "error" in r]
    assert sorted((r["op"], r["backend"]) for r in rows) == [
        ("delta", "auto"), ("delta", "eager"), ("signed", "auto"), ("signed", "eager")]
    B, T, d, L = 2, 32, 32, 2
    by = {(r["op"], r["backend"]): r for r in rows}
    for r in rows:
        assert r["shape"] == f"B{B} T{T} d{d} L{L}" and r["mode"] == "step"
        assert r["ms"] > 0 and r["ms_min"] <= r["ms"] and r["steps_timed"] == 1
        assert r["tokens_per_s"] == pytest.approx(B * T / (r["ms"] * 1e-3))
        assert r["warmup_s"] >= 0
        # A fresh byte-level LM starts near ln(256) and one AdamW step moves it.
        assert abs(r["loss_first"] - math.log(256)) < 1.0 and math.isfinite(r["loss_last"])
        assert r["parameters"] == sum(p.numel() for p in bench_train.build_model(
            r["op"], d, L, "cpu").parameters())
        eager = by[(r["op"], "eager")]
        assert r["speedup_vs_eager"] == pytest.approx(eager["ms"] / r["ms"])
        prof = r["profile"]
        assert prof["source"] == "cpu ops (self time)" and prof["steps"] == 1
        fam = prof["families_ms_per_step"]
        assert set(fam) <= set(bench_profile.FAMILIES)
        assert sum(fam.values()) == pytest.approx(prof["busy_ms_per_step"], rel=1e-9)
        assert fam["gemm"] > 0 and fam["optimizer"] > 0 and fam["norm"] > 0
        assert 0 < prof["busy_ms_per_step"] <= prof["wall_ms_per_step"] * 1.05
    assert by[("delta", "eager")]["mixer_kwargs"] == {"n_heads": 1}
    assert "### train-step" in md and "Time by op family" in md and "tokens/s" in md


def test_train_step_backward_in_thread(tmp_path, backward_thread_modes):
    modes = backward_thread_modes
    res, md = _bench(tmp_path, "--groups", "train-step", "--shapes", "small", "--ops", "signed",
                     "--backends", "eager", "--profile-steps", "0", "--backward-in-thread")
    assert [r for r in res["rows"] if "ms" in r] and not [r for r in res["rows"] if "error" in r]
    assert modes and not any(modes)  # every step's backward asked for the calling thread
    assert res["settings"]["backward_in_thread"] is True
    assert "`--backward-in-thread`" in md
    modes.clear()
    res, _ = _bench(tmp_path, "--groups", "train-step", "--shapes", "small", "--ops", "signed",
                    "--backends", "eager", "--profile-steps", "0")
    assert modes and all(modes) and res["settings"]["backward_in_thread"] is False


def test_host_group_quick(tmp_path):
    res, md = _bench(tmp_path, "--groups", "host", "--ops", "linear_recurrence,reference,signed")
    rows = res["rows"]
    assert not [r for r in rows if "error" in r]
    timed = [r for r in rows if "us_per_call" in r]
    keys = sorted((r["op"], r["mode"], r["backend"]) for r in timed)
    expect = [(op, mode, b) for op in ("linear_recurrence", "signed")
              for mode in ("fwd", "fwd+bwd") for b in ("auto", "eager")]
    expect.append(("reference (a*2).sum().backward()", "fwd+bwd", "torch"))
    assert keys == sorted(expect)
    for r in timed:
        assert r["calls_per_batch"] == 10 and r["batches"] == 1
        assert 0 < r["host_us_per_call"] <= r["us_per_call"]
        if r["backend"] == "auto":
            eager = next(e for e in timed if e["backend"] == "eager"
                         and (e["op"], e["mode"]) == (r["op"], r["mode"]))
            assert r["speedup_vs_eager"] == pytest.approx(eager["us_per_call"] / r["us_per_call"])
    skipped = {(r["op"], r["backend"]): r["skipped"] for r in rows if "skipped" in r}
    assert skipped[("linear_recurrence", "compile(reduce-overhead)")] == "--quick"
    assert skipped[("linear_recurrence", "compile")] == "--quick"
    assert ("signed", "compile") not in skipped  # compile rows are for two ops only
    assert "### host" in md and "auto vs eager" in md


def test_merge_of_split_runs(tmp_path):
    # One suite split by group and by backend, merged: rows kept in order, ratios across runs.
    common = ["--groups", "train-step", "--shapes", "small", "--ops", "signed",
              "--profile-steps", "0", "--backends"]
    a, _ = _bench(tmp_path / "a", *common, "eager")
    b, _ = _bench(tmp_path / "b", *common, "auto")
    c, _ = _bench(tmp_path / "c", "--groups", "host", "--ops", "reference")
    assert "speedup_vs_eager" not in b["rows"][0]  # no eager row in that run
    merged = merge([a, b, c])
    assert [r["backend"] for r in merged["rows"]] == ["eager", "auto", "torch"]
    eager, auto = merged["rows"][:2]
    assert auto["speedup_vs_eager"] == pytest.approx(eager["ms"] / auto["ms"])
    assert merged["settings"]["groups"] == ["train-step", "host"] and len(merged["runs"]) == 3
    assert merged["seconds"] == pytest.approx(a["seconds"] + b["seconds"] + c["seconds"], abs=0.2)
    from mingru_cli.bench import to_markdown

    md = to_markdown(merged)
    assert "### train-step" in md and "### host" in md
    assert "| signed | B2 T32 d32 L2 | auto |" in md


@pytest.mark.parametrize("argv, message", [
    (["--groups", "mixers", "--shapes", "huge"], "--shapes: 'huge' matches no size"),
    (["--groups", "cpu-scans", "--shapes", "long"], "--shapes applies to the groups"),
    (["--groups", "mixers", "--precisions", "fp16"], "--precisions: unknown precision"),
    (["--groups", "train-step", "--ops", "rotation"], "--ops: 'rotation' matches no case"),
    (["--groups", "train-step", "--profile-steps", "-1"], "--profile-steps must be"),
])
def test_bad_flags_are_one_line_errors(tmp_path, capsys, argv, message):
    out = tmp_path / "bench"
    assert main([*QUICK, *argv, "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and not out.exists()


# --------------------------------------------------------------------------- the pieces


def _loop_scan(a: torch.Tensor, b: torch.Tensor, h: torch.Tensor, dim: int) -> torch.Tensor:
    """``h_t = a_t h_{t-1} + b_t`` along ``dim``."""
    out = []
    for a_t, b_t in zip(a.unbind(dim), b.unbind(dim), strict=True):
        h = a_t * h + b_t
        out.append(h)
    return torch.stack(out, dim)


def test_fla_peer_mixer_computes_mingru():
    ref = bench_mixers.build("log", 12, "cpu").double()

    def scan(b, log_a, h0):  # fla's chunk_hgrn contract: h_t = exp(g_t) h_{t-1} + x_t
        assert b.shape == log_a.shape and h0.shape == (b.shape[0], b.shape[2])
        return _loop_scan(log_a.exp(), b, h0.to(b.dtype), 1)

    x = torch.randn(3, 17, 12, dtype=torch.float64)
    peer = bench_mixers.FlaMinGRU(ref, scan)
    torch.testing.assert_close(peer(x), ref(x), rtol=1e-10, atol=1e-10)
    assert {n for n, _ in peer.named_parameters()} <= {n for n, _ in ref.named_parameters()}


def test_accelerated_scan_peer_mixer_computes_signed_mingru():
    ref = bench_mixers.build("signed", 10, "cpu").double()

    def scan(a, b):  # accelerated-scan: (B, D, T), contiguous, h_0 = 0
        assert a.shape[1] == 10 and a.is_contiguous() and b.is_contiguous()
        return _loop_scan(a, b, torch.zeros_like(a[..., 0]), 2)

    x = torch.randn(2, 9, 10, dtype=torch.float64)
    out = bench_mixers.AccelSignedMinGRU(ref, scan)(x)
    assert out.is_contiguous()
    torch.testing.assert_close(out, ref(x), rtol=1e-10, atol=1e-10)


def test_delta_mixer_heads_keep_head_size_64():
    assert bench_mixers.build("delta", 1024, "cpu").d_k == 64
    assert bench_train.mixer_kwargs("delta", 512) == {"n_heads": 8}
    assert bench_train.mixer_kwargs("givens", 512) == {} and "rotation" not in TRAIN_MIXERS


@pytest.mark.parametrize("name, family", [
    ("linear_recurrence_fwd_kernel", "mingru kernels"),
    ("parallel_scan_log_carry_kernel", "mingru kernels"),
    ("mingru_cell_fwd_kernel_0d1d", "mingru kernels"),
    ("triton_poi_fused_add_mul_sigmoid_0", "inductor triton"),
    ("triton_red_fused_sum_1", "inductor triton"),
    ("nvjet_tst_128x256_64x4_2x1_v_bz_coopA_TNT", "gemm"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128>(Params)", "gemm"),
    ("aten::addmm", "gemm"),
    ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float>", "norm"),
    ("aten::native_layer_norm_backward", "norm"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdam>", "optimizer"),
    ("aten::_foreach_mul_", "optimizer"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
     "elementwise/reduction"),
    ("void at::native::reduce_kernel<512, 1>", "elementwise/reduction"),
    ("Memcpy DtoD (Device -> Device)", "memcpy/memset"),
    ("ncclDevKernel_AllReduce", "other"),
])
def test_profiler_families(name, family):
    assert bench_profile.classify(name) == family


def test_our_kernel_names_are_read_from_the_sources():
    names = bench_profile.mingru_kernel_names()
    assert {"linear_recurrence_fwd_kernel", "parallel_scan_log_fwd_kernel",
            "delta_rule_fwd_state_kernel"} <= names
    assert all(n.endswith("_kernel") or "_kernel" in n for n in names)


def test_union_of_kernel_intervals():
    assert bench_profile._union_us([(0, 2), (1, 3), (5, 6), (5.5, 5.7)]) == 4
    assert bench_profile._union_us([]) == 0


def test_speedups_pair_rows_of_the_same_case():
    rows = [
        {"op": "a", "mode": "fwd", "backend": "eager", "ms": 4.0},
        {"op": "a", "mode": "fwd", "backend": "triton", "ms": 1.0},
        {"op": "a", "mode": "fwd", "backend": "fla", "ms": 2.0},
        {"op": "a", "mode": "fwd+bwd", "backend": "triton", "ms": 3.0},  # no eager row here
        {"op": "a", "mode": "fwd", "backend": "compile(eager)", "skipped": "why"},
    ]
    bench_common.add_speedups(rows, ("op", "mode"), "ms",
                              {"eager": lambda r: "eager", "peer": lambda r: "fla"})
    assert rows[1]["speedup_vs_eager"] == 4.0 and rows[1]["speedup_vs_peer"] == 2.0
    assert rows[0]["speedup_vs_eager"] == 1.0 and rows[2]["speedup_vs_eager"] == 2.0
    assert "speedup_vs_eager" not in rows[3] and "speedup_vs_eager" not in rows[4]


def test_backend_selection_and_aliases():
    plan = make_plan("cpu", quick=True, groups=["mixers"],
                     backends=["eager", "compile-eager", "compile(triton)"])
    assert plan.backends == ["eager", "compile(eager)", "compile(triton)"]
    assert bench_common.backend_status(plan, "eager") == "run"
    assert bench_common.backend_status(plan, "compile(eager)") == "run"  # asked for explicitly
    assert bench_common.backend_status(plan, "compile(triton)") != "run"  # Triton needs CUDA
    assert bench_common.backend_status(plan, "fla") is None  # not asked for: no row at all
    every = make_plan("cpu", quick=False, groups=["host"], backends=["compile"])
    assert bench_common.backend_status(every, "compile(reduce-overhead)") == "run"
    assert bench_common.backend_status(every, "eager") is None
    # The train-step group's CUDA-graph rows run only when named, not under "compile".
    assert bench_common.backend_status(every, "compile(eager, reduce-overhead)") is None
    named = make_plan("cpu", quick=False, groups=["train-step"],
                      backends=["compile-ro-eager", "compile-ro-triton"])
    assert named.backends == ["compile(eager, reduce-overhead)",
                              "compile(triton, reduce-overhead)"]
    assert bench_common.backend_status(named, "compile(eager, reduce-overhead)") == "run"
    assert bench_common.backend_status(named, "compile(triton, reduce-overhead)") != "run"
    assert bench_common.backend_status(named, "compile(eager)") is None


def test_train_step_backends_parse_and_compare_like_with_like():
    assert bench_train.parse_backend("auto") == ("auto", None)
    assert bench_train.parse_backend("compile(triton)") == ("triton", None)
    assert bench_train.parse_backend("compile(eager, reduce-overhead)") == (
        "eager", "reduce-overhead")
    rows = [{"op": "log", "shape": "s", "backend": b, "ms": ms} for b, ms in (
        ("eager", 30.0), ("compile(eager)", 12.0), ("compile(triton)", 10.0),
        ("compile(eager, reduce-overhead)", 6.0), ("compile(triton, reduce-overhead)", 4.0))]
    bench_train.speedups(rows)
    by = {r["backend"]: r for r in rows}
    assert by["compile(triton)"]["speedup_vs_compile_eager"] == pytest.approx(1.2)
    assert by["compile(triton, reduce-overhead)"]["speedup_vs_compile_eager"] == pytest.approx(1.5)
    assert by["compile(triton, reduce-overhead)"]["speedup_vs_eager"] == pytest.approx(7.5)


def test_delta_peers_get_fla_layouts_without_building_inputs_early():
    """gpu-delta's peers: ``chunk_delta_rule`` inputs (nh axis dropped) for one micro-step
    without decay, ``chunk_gated_delta_product`` inputs (micro-steps consecutive in time,
    ``log γ`` as its gate, zeros without decay) otherwise; inputs are made only when timed."""
    calls = []
    base = bench_cases.fused_inputs("delta_rule", 2, 5, 8, "cpu", torch.float32, nh=2, decay=True)

    def make(rg):
        calls.append(rg)
        return base(rg)

    peers = bench_delta.peer_delta_runners(make, nh=2, decay=True)
    assert calls == [] and list(peers) == ["fla"]
    q, k, v, beta, g = peers["fla"][0](True)
    q0, k0, v0, beta0, lg0 = base(False)
    assert k.shape == (2, 10, 4, 2) and v.shape == (2, 10, 4, 2) and beta.shape == (2, 10, 4)
    assert torch.equal(k[:, 1], k0[:, 0, 1]) and torch.equal(k[:, 2], k0[:, 1, 0])
    assert torch.equal(g, lg0) and (lg0 < 0).all() and all(x.requires_grad for x in (q, k, g))
    one = bench_cases.fused_inputs("delta_rule", 2, 5, 8, "cpu", torch.float32)
    q, k, v, beta = bench_delta.peer_delta_runners(one)["fla"][0](False)
    assert k.shape == (2, 5, 4, 2) and beta.shape == (2, 5, 4)
    product = bench_delta.peer_delta_runners(
        bench_cases.fused_inputs("delta_rule", 2, 5, 8, "cpu", torch.float32, nh=2), nh=2)
    assert torch.equal(product["fla"][0](False)[4], torch.zeros(2, 5, 4))


def test_delta_rule_bytes_and_floors():
    from mingru_cli import bench

    by = bench_delta.delta_rule_bytes(2, 3, 4, 1, 8, 8, torch.bfloat16)
    inputs, out = 2 * 3 * 4 * (8 + 8 + 8 + 1) * 2, 2 * 3 * 4 * 8 * 2
    assert by == {"fwd": inputs + out, "fwd+bwd": 2 * (inputs + out) + 2 * inputs}
    case = bench_cases.Case("gpu-delta", "x", "s", lambda rg: (), flops={"fwd": 2e9},
                            bytes_moved={"fwd": 4e9}, peak_flops=1e12)
    floors = bench._floors(case, "fwd", 4e12, 4.0)
    assert floors == {"mem_floor_ms": 1.0, "compute_floor_ms": 2.0, "floor_frac": 0.5}
    assert bench._floors(case, "fwd+bwd", 4e12, 4.0) == {}


def test_delta_shapes_select_by_label_word():
    """``--shapes`` on gpu-delta keeps the sizes with one of the words in their label; a word
    that names no size (``d65``, or a fragment like ``d6``) is an error, not an empty run."""
    plan = make_plan("cuda", groups=["gpu-delta"], shapes=["d64"], ops=["float32"],
                     backends=["triton"])
    labels = [case.shape for case in plan.cases()]
    assert labels and all(label.split()[-1] == "d64" for label in labels)
    both = make_plan("cuda", groups=["gpu-delta"], shapes=["T256", "d16"], ops=["float32"],
                     backends=["triton"])
    assert {tuple(c.shape.split()[1::2]) for c in both.cases()} == {
        ("T256", "d16"), ("T1024", "d16"), ("T256", "d64")}
    for word in ("d65", "d6"):
        with pytest.raises(ValueError, match=f"'{word}' matches no size of gpu-delta"):
            make_plan("cuda", groups=["gpu-delta"], shapes=[word])


def test_delta_error_column_is_against_float64():
    """gpu-delta's ``err vs f64``: the float64 eager output on the case's own (rounded)
    inputs, computed once, and the tests' relative error against it."""
    from mingru._eager.delta_rule import delta_rule_eager
    from mingru_cli import bench

    make = bench_cases.fused_inputs("delta_rule", 2, 7, 8, "cpu", torch.bfloat16, nh=2, decay=True)
    ref = bench_delta.float64_output(make)
    o = ref()
    assert o.dtype == torch.float64 and ref() is o
    q, k, v, beta, lg = (x.double() for x in make(False))
    assert torch.equal(o, delta_rule_eager(q, k, v, beta, lg, None, 64)[0])
    got = o.float() + 1e-3 * o.abs().max()
    assert bench._rel_err_vs(got, o) == pytest.approx(1e-3, rel=1e-3)  # float32 rounding


@pytest.mark.parametrize("timing_mode", ["fwd", "fwd+bwd"])
def test_jax_scan_runner_traces_under_its_backend(monkeypatch, timing_mode):
    """The JAX rows run on the backend they are labelled with: the mode is read when jit
    traces (the first call), so it must be in force then, not only while jit is built."""
    pytest.importorskip("jax")
    import mingru_jax
    from mingru_jax.dispatch import scan_mode

    seen = []

    def recording_scan(a, b):
        seen.append(scan_mode())
        return a * b

    monkeypatch.delenv("MINGRU_SCAN", raising=False)
    monkeypatch.setattr(mingru_jax, "linear_scan", recording_scan)
    make = lambda rg: (torch.rand(2, 5, 3), torch.randn(2, 5, 3))  # noqa: E731
    runners = bench_cases.jax_scan_runners("linear_scan", make)
    to_jax, factory = runners["jax"]
    factory(timing_mode)(*to_jax(False))
    assert seen == ["eager"]
