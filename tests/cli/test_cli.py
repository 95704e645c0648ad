"""The ``mingru`` command line: ``info``, ``train`` (tiny budgets), the task generators, and
``bench --quick`` on CPU. Every check here is about correctness, never speed."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from mingru_cli import bench_cases, bench_delta
from mingru_cli.cli import main
from mingru_cli.tasks import GroupWordTask, MQARTask, ParityTask, make_task, permutation_table
from mingru_cli.train import TrainConfig, parse_mixer_spec, run

# --------------------------------------------------------------------------- info


@pytest.mark.parametrize("module", ["mingru", "mingru_cli"])
def test_info_subprocess_runs_and_reports_both_frontends(module):
    env = {**os.environ, "MINGRU_SCAN": "eager"}
    text = subprocess.run([sys.executable, "-m", module, "info"], capture_output=True,
                          text=True, timeout=120, env=env)
    assert text.returncode == 0, text.stderr
    assert "mingru (PyTorch)" in text.stdout and "mingru_jax (Flax)" in text.stdout
    assert "MINGRU_SCAN" in text.stdout and "eager" in text.stdout


def test_info_json(capsys, monkeypatch):
    monkeypatch.delenv("MINGRU_SCAN", raising=False)
    assert main(["info", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["torch"] == torch.__version__
    assert data["MINGRU_SCAN"] == "auto"
    for key in ("mingru.available", "mingru_jax.available"):
        assert data[key] is True or (isinstance(data[key], str) and data[key])


def test_info_reports_bad_scan_mode_without_crashing(capsys, monkeypatch):
    monkeypatch.setenv("MINGRU_SCAN", "fast")
    assert main(["info"]) == 0
    assert "invalid" in capsys.readouterr().out


def _run_python(*parts: str) -> subprocess.CompletedProcess:
    """Run the (each dedented) ``parts`` as one ``python -c`` script."""
    env = {k: v for k, v in os.environ.items() if k != "MINGRU_SCAN"}
    code = "\n".join(textwrap.dedent(part) for part in parts)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=180, env=env)


def test_help_imports_neither_framework():
    # torch and jax are installed here: building the parser and every --help must not load them.
    proc = _run_python("""
        import sys
        from mingru_cli.cli import main
        for argv in (["--help"], ["train", "--help"], ["bench", "--help"], ["info", "--help"]):
            try:
                main(argv)
            except SystemExit as exc:
                assert exc.code == 0, (argv, exc.code)
        loaded = sorted(m for m in ("torch", "jax", "mingru", "mingru_jax") if m in sys.modules)
        print("LOADED", loaded)
    """)
    assert proc.returncode == 0, proc.stderr
    assert "LOADED []" in proc.stdout


# Makes `import torch` fail the way it does when torch is not installed.
_BLOCK_TORCH = """
    import importlib.abc, json, sys

    class _NoTorch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, _NoTorch())
"""


def test_info_help_train_bench_without_torch():
    proc = _run_python(_BLOCK_TORCH, """
        import contextlib, io
        from mingru_cli.cli import main
        try:
            main(["--help"])
        except SystemExit as exc:
            assert exc.code == 0
        out = {}
        for name, argv in (("info", ["info"]), ("info_json", ["info", "--json"]),
                           ("train", ["train", "--steps", "1", "--no-progress"]),
                           ("train_jax", ["train", "--framework", "jax", "--steps", "1"]),
                           ("bench", ["bench", "--device", "cpu", "--quick"])):
            so, se = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(so), contextlib.redirect_stderr(se):
                rc = main(argv)
            out[name] = {"rc": rc, "out": so.getvalue(), "err": se.getvalue()}
        out["torch_loaded"] = "torch" in sys.modules
        print("RESULT" + json.dumps(out))
    """)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    res = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert not res["torch_loaded"]
    info = res["info"]
    assert info["rc"] == 0, info["err"]
    rows = dict(line.split(None, 1) if " " in line else (line, "")
                for line in info["out"].splitlines())
    assert "mingru (PyTorch)" in info["out"] and "mingru_jax (Flax)" in info["out"]
    pytorch_row = next(line for line in info["out"].splitlines()
                       if line.startswith("mingru (PyTorch)"))
    assert pytorch_row.endswith("not installed (pip install '.[torch]')")
    assert "mingru (PyTorch)" not in rows["frontends"]
    data = json.loads(res["info_json"]["out"])
    assert data["torch"] is None and data["mingru"] is None
    assert data["mingru.available"] == "not installed (pip install '.[torch]')"
    assert "mingru" not in data["frontends"]
    try:
        import jax  # noqa: F401

        import mingru_jax  # noqa: F401
    except ImportError:
        pass
    else:  # the Flax frontend is reported as present, torch or not
        assert data["frontends"] == ["mingru_jax"] and data["mingru_jax"]
        assert "mingru_jax (Flax)" in rows["frontends"]
    for name in ("train", "train_jax", "bench"):
        r = res[name]
        assert r["rc"] == 1 and r["out"] == "", (name, r)
        lines = r["err"].strip().splitlines()
        assert len(lines) == 1 and "needs PyTorch" in lines[0], (name, r["err"])
        assert "pip install '.[torch]'" in lines[0] and "Traceback" not in r["err"]


# --------------------------------------------------------------------------- tasks


def test_parity_labels_match_a_direct_count():
    b = ParityTask().sample(5, 37, torch.Generator().manual_seed(1))
    assert b.mask.all()
    for row in range(5):
        ones = 0
        for t in range(37):
            ones += int(b.tokens[row, t])
            assert int(b.labels[row, t]) == ones % 2


def _compose(p: tuple[int, ...], q: tuple[int, ...]) -> tuple[int, ...]:
    """p ∘ q: apply q first."""
    return tuple(p[q[i]] for i in range(len(p)))


@pytest.mark.parametrize("n", [3, 5])
def test_group_word_labels_match_direct_composition(n):
    task = make_task(f"s{n}")
    assert isinstance(task, GroupWordTask)
    perms = list(itertools.permutations(range(n)))
    assert task.vocab_size == task.n_classes == len(perms)
    b = task.sample(4, 23, torch.Generator().manual_seed(2))
    for row in range(4):
        state = tuple(range(n))
        for t in range(23):
            state = _compose(perms[int(b.tokens[row, t])], state)
            assert perms[int(b.labels[row, t])] == state


def test_s3_is_non_abelian_so_order_matters():
    perms, table = permutation_table(3)
    assert perms[0] == (0, 1, 2)
    assert any(table[i, j] != table[j, i] for i in range(6) for j in range(6))


def test_mqar_answers_are_the_stored_values():
    task = MQARTask(n_pairs=5, n_keys=11, n_values=7)
    b = task.sample(6, 40, torch.Generator().manual_seed(3))
    N = 5
    for row in range(6):
        toks = b.tokens[row].tolist()
        keys, vals = toks[0 : 2 * N : 2], toks[1 : 2 * N : 2]
        assert len(set(keys)) == N and all(1 <= k <= 11 for k in keys)
        assert all(12 <= v <= 18 for v in vals)
        store = dict(zip(keys, vals, strict=True))
        queries = [t for t in range(2 * N, 40) if b.mask[row, t]]
        assert len(queries) == N
        assert sorted(toks[t] for t in queries) == sorted(keys)  # every key asked once
        for t in range(2 * N, 40):
            if b.mask[row, t]:
                assert int(b.labels[row, t]) == store[toks[t]] - 12
            else:
                assert toks[t] == 0 and int(b.labels[row, t]) == -100
        assert not b.mask[row, : 2 * N].any()


def test_task_errors_name_the_argument():
    with pytest.raises(ValueError, match="task"):
        make_task("s7")
    with pytest.raises(ValueError, match="length"):
        MQARTask(n_pairs=8).sample(2, 20, torch.Generator())
    with pytest.raises(ValueError, match="mixer"):
        parse_mixer_spec("signed,lstm", 1)
    with pytest.raises(ValueError, match="layers"):
        parse_mixer_spec("signed,givens", 3)
    assert parse_mixer_spec("signed, givens", 2) == ["signed", "givens"]


# --------------------------------------------------------------------------- train


def _tiny_args(out, seed=3, mixer="signed"):
    return ["train", "--task", "parity", "--mixer", mixer, "--steps", "6", "--batch-size", "4",
            "--d-model", "8", "--eval-lens", "8,20", "--val-len", "12", "--eval-size", "6",
            "--eval-every", "3", "--seed", str(seed), "--out", str(out), "--no-progress"]


def test_train_writes_json_and_plot_and_is_reproducible(tmp_path, capsys):
    assert main(_tiny_args(tmp_path / "a")) == 0
    printed = capsys.readouterr().out
    assert "length" in printed and "signed" in printed
    res = json.loads((tmp_path / "a" / "train_results.json").read_text())
    assert (tmp_path / "a" / "train_accuracy.png").stat().st_size > 0
    (model,) = res["models"]
    assert set(model["accuracy"]) == {"8", "20"}
    assert all(0.0 <= a <= 1.0 for a in model["accuracy"].values())
    assert model["selected_step"] in (3, 6)
    assert main(_tiny_args(tmp_path / "b")) == 0
    again = json.loads((tmp_path / "b" / "train_results.json").read_text())["models"][0]
    assert again["accuracy"] == model["accuracy"] and again["curve"] == model["curve"]
    assert main(_tiny_args(tmp_path / "c", seed=4)) == 0
    other = json.loads((tmp_path / "c" / "train_results.json").read_text())["models"][0]
    assert other["curve"] != model["curve"]


def test_train_runs_its_backward_on_the_calling_thread(tmp_path, backward_thread_modes):
    assert main(_tiny_args(tmp_path)) == 0
    # One backward per step, each on the calling thread.
    assert len(backward_thread_modes) == 6 and not any(backward_thread_modes)


def test_train_heterogeneous_stack_and_mqar(monkeypatch):
    import mingru
    from mingru_cli import train as train_mod

    built = []

    class Recording(train_mod.SequenceModel):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self)

    monkeypatch.setattr(train_mod, "SequenceModel", Recording)
    # Measured on 2 CPU cores (~1.5 s per run): over seeds 0-9 this budget reaches 0.93-1.0
    # accuracy at the training length (chance 0.25) and a final loss of 0.01-0.2 from ~1.45
    # (≈ ln 4) at the first logged step; the thresholds below leave a wide margin.
    cfg = TrainConfig(task="mqar", mixers=["signed,delta"], steps=150, batch_size=16, d_model=16,
                      lr=1e-2, train_len=30, eval_lens=[30], val_len=None, eval_size=64,
                      mqar_pairs=3, mqar_keys=4, mqar_values=4,
                      mixer_kwargs={"delta": {"n_heads": 2}}, progress=False, verbose=False)
    res = run(cfg)
    (model,) = res["models"]
    assert model["mixer"] == "signed,delta" and 0.0 <= model["accuracy"]["30"] <= 1.0
    assert res["chance"] == pytest.approx(0.25)
    # The stack really is heterogeneous: one block per listed mixer, in order, and the keyed
    # mixer kwargs reach the delta layer only (DeltaMinGRU's default is 4 heads).
    (net,) = built
    mixers = [block.mixer for block in net.stack.blocks]
    assert [type(m) for m in mixers] == [mingru.SignedMinGRU, mingru.DeltaMinGRU]
    assert mixers[1].n_heads == 2
    # Training works: the loss falls well below chance level and recall beats chance clearly.
    assert model["curve"][0]["loss"] > 1.0
    assert model["final_loss"] < 0.5 * math.log(4)
    assert model["accuracy"]["30"] >= 0.6


def test_train_device_cuda_without_cuda_is_a_clean_error(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main([*_tiny_args(tmp_path / "cuda"), "--device", "cuda"]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines == ["mingru train: error: --device cuda was asked for but CUDA is not available"]
    assert "Traceback" not in captured.err and captured.out == ""
    assert not (tmp_path / "cuda").exists()


def test_train_bad_flag_is_a_clean_error(capsys):
    assert main(["train", "--mixer", "lstm", "--steps", "1", "--no-progress"]) == 1
    assert "mixer must be one of" in capsys.readouterr().err


# --------------------------------------------------------------------------- bench


@pytest.mark.parametrize("op", bench_cases.SCAN_OPS)
def test_loop_baselines_match_the_library_scans(op):
    import mingru

    make = bench_cases.scan_inputs(op, 2, 9, 16, "cpu", torch.float64, seed=5)
    xs = make(False)
    with mingru.use_backend("eager"):
        ref = getattr(mingru, op)(*xs)
    got = bench_cases.LOOPS[op](*xs)
    for r, g in zip(bench_cases.all_outputs(ref), bench_cases.all_outputs(got), strict=True):
        torch.testing.assert_close(g, r, rtol=1e-9, atol=1e-9)


def test_step_loop_matches_mixer_forward():
    mixer = bench_cases.build_mixer("signed", 6, "cpu", torch.float64)
    x = torch.randn(2, 7, 6, dtype=torch.float64)
    torch.testing.assert_close(bench_cases.loop_mixer(mixer, x), mixer(x))


def test_bench_quick_cpu_writes_json_and_markdown(tmp_path, capsys):
    out = tmp_path / "bench"
    assert main(["bench", "--device", "cpu", "--quick", "--backends", "loop,eager",
                 "--repeats", "1", "--warmup", "1", "--threads", "1", "--out", str(out)]) == 0
    res = json.loads((out / "bench.json").read_text())
    md = (out / "bench.md").read_text()
    assert "### cpu-scans" in md and "### cpu-mixers" in md and "eager vs loop" in md
    rows = [r for r in res["rows"] if "ms" in r]
    ops = {(r["group"], r["op"]) for r in rows}
    assert {("cpu-scans", op) for op in bench_cases.SCAN_OPS} <= ops
    assert {("cpu-mixers", m) for m in bench_cases.MIXERS} <= ops
    assert all(r["ms"] > 0 for r in rows)
    assert {r["mode"] for r in rows} == {"fwd", "fwd+bwd"}
    assert not [r for r in res["rows"] if "error" in r]
    assert res["environment"]["cpu_count"] == os.cpu_count()


def _quick_cpu_scans(tmp_path, backends: str, ops: str, timer: str) -> dict:
    """``bench --quick`` of the cpu-scans group on CPU with a timer; the parsed bench.json."""
    out = tmp_path / "bench"
    assert main(["bench", "--device", "cpu", "--quick", "--groups", "cpu-scans",
                 "--backends", backends, "--ops", ops, "--timer", timer,
                 "--repeats", "2", "--warmup", "1", "--out", str(out)]) == 0
    return json.loads((out / "bench.json").read_text())


def test_bench_ops_filter_and_wall_timer(tmp_path):
    res = _quick_cpu_scans(tmp_path, "eager", "linear_scan,log", "wall")
    assert {r["op"] for r in res["rows"] if "ms" in r} == {"linear_scan", "parallel_scan_log"}
    assert res["settings"]["timer"].startswith("time.perf_counter with a device sync")


def test_bench_loop_timer(tmp_path):
    """``--timer loop``: calls back to back with one sync per round, recorded as such."""
    res = _quick_cpu_scans(tmp_path, "eager,jax", "linear_scan", "loop")
    rows = [r for r in res["rows"] if "ms" in r]
    assert rows and all(r["ms"] > 0 for r in rows)
    assert not [r for r in res["rows"] if "error" in r]
    if importlib.util.find_spec("jax") is not None:  # JAX's calls, blocked on once per round
        assert {r["mode"] for r in rows if r["backend"] == "jax"} == {"fwd", "fwd+bwd"}
    assert res["settings"]["timer"].startswith("time.perf_counter over")


def test_time_loop_waits_once_per_round_on_the_last_call():
    from mingru_cli.bench_common import time_loop

    calls, finished = [], []

    def fn():
        calls.append(len(calls))
        return calls[-1]

    ms = time_loop(fn, finished.append, warmup=2, repeats=3, calls=5)
    assert ms >= 0 and len(calls) == 2 + 3 * 5
    assert finished == [1, 6, 11, 16]  # the last result of the warm-up and of each round


def _counted_delta_rule(q, k, v, beta):
    """The delta rule written out scalar by scalar, one token after another, counting the
    floating-point operations of its products with the ``d_k × d_v`` state ``S`` (each
    multiply-add is 2 FLOPs). The ``O(d_k + d_v)`` vector work per step (``β·k``, ``v − Sᵀk``)
    is counted apart: the nominal count leaves it out."""
    B, T, nh, H, dk = k.shape
    dv = v.shape[-1]
    state_flops = vector_flops = 0
    o = torch.zeros(B, T, H, dv, dtype=q.dtype)
    S_final = torch.zeros(B, H, dk, dv, dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            S = [[0.0] * dv for _ in range(dk)]
            for t in range(T):
                for j in range(nh):
                    kj = [float(x) for x in k[b, t, j, h]]
                    vj = [float(x) for x in v[b, t, j, h]]
                    bj = float(beta[b, t, j, h])
                    r = [0.0] * dv  # r = Sᵀ k
                    for c in range(dv):
                        for i in range(dk):
                            r[c] += kj[i] * S[i][c]
                            state_flops += 2
                    u = [vj[c] - r[c] for c in range(dv)]
                    bk = [bj * kj[i] for i in range(dk)]
                    vector_flops += dv + dk
                    for i in range(dk):  # S ← (I − β k kᵀ) S + β k vᵀ = S + (β k)(v − Sᵀk)ᵀ
                        for c in range(dv):
                            S[i][c] += bk[i] * u[c]
                            state_flops += 2
                qt = [float(x) for x in q[b, t, h]]
                for c in range(dv):  # o_t = Sᵀ q_t
                    acc = 0.0
                    for i in range(dk):
                        acc += qt[i] * S[i][c]
                        state_flops += 2
                    o[b, t, h, c] = acc
            S_final[b, h] = torch.tensor(S, dtype=q.dtype)
    return o, S_final, state_flops, vector_flops


def test_delta_rule_flop_count():
    B, T, H, nh, dk, dv = 2, 3, 4, 2, 5, 7
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, T, H, dk, generator=g, dtype=torch.float64)
    k = torch.nn.functional.normalize(torch.randn(B, T, nh, H, dk, generator=g,
                                                  dtype=torch.float64), dim=-1)
    v = torch.randn(B, T, nh, H, dv, generator=g, dtype=torch.float64)
    beta = torch.rand(B, T, nh, H, generator=g, dtype=torch.float64)
    o, S, state_flops, _ = _counted_delta_rule(q, k, v, beta)
    # The counted loop is the delta rule the benchmark times (same outputs as its runner).
    import mingru

    with mingru.use_backend("eager"):
        o_ref, S_ref = bench_cases.fused_public("delta_rule")(q, k, v, beta)
    torch.testing.assert_close(o, o_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(S, S_ref, rtol=1e-10, atol=1e-10)

    flops = bench_delta.delta_rule_flops(B=B, T=T, heads=H, nh=nh, dk=dk, dv=dv)
    assert flops["fwd"] == state_flops
    # By hand: per (token, head) each of the nh = 2 micro-steps does kᵀS and the rank-1
    # update, 5·7 = 35 multiply-adds each (140 for both steps), and the read-out Sᵀq 35 more:
    # 175 multiply-adds = 350 FLOPs; B·T·H = 2·3·4 = 24 (token, head) pairs → 8400 FLOPs.
    assert state_flops == 8400 and flops["fwd"] == 8400
    # Backward is counted as twice the forward (the convention stated in delta_rule_flops).
    assert flops["fwd+bwd"] == 3 * flops["fwd"] == 25200
    # Another shape, by hand: B=1, T=1, H=1, nh=1, d_k=d_v=2: 2·4 + 4 = 12 multiply-adds.
    assert bench_delta.delta_rule_flops(B=1, T=1, heads=1, nh=1, dk=2, dv=2)["fwd"] == 24


def test_bench_unknown_ops_lists_valid_names_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "bench"
    assert main(["bench", "--device", "cpu", "--quick", "--ops", "nosuch",
                 "--repeats", "1", "--warmup", "1", "--out", str(out)]) == 1
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("mingru bench: error: --ops:")
    assert "'nosuch'" in err and "Traceback" not in err
    for name in (*bench_cases.SCAN_OPS, *bench_cases.MIXERS):  # the cpu groups' case names
        assert name in err
    assert not out.exists()
    # A name that exists, but not in the chosen group, is refused the same way.
    assert main(["bench", "--device", "cpu", "--quick", "--groups", "cpu-scans",
                 "--ops", "givens", "--out", str(out)]) == 1
    assert "'givens'" in capsys.readouterr().err
    assert not out.exists()


def test_bench_rejects_gpu_groups_on_cpu(capsys):
    assert main(["bench", "--device", "cpu", "--groups", "gpu-scans", "--out", "unused"]) == 1
    assert "needs --device cuda" in capsys.readouterr().err


@pytest.mark.slow
def test_train_jax_framework_runs_and_matches_torch_parameter_count():
    pytest.importorskip("jax")
    pytest.importorskip("optax")
    kw = dict(task="parity", mixers=["signed"], steps=3, batch_size=4, d_model=8,
              eval_lens=[10], val_len=None, eval_size=4, progress=False, verbose=False)
    jx = run(TrainConfig(framework="jax", **kw))["models"][0]
    pt = run(TrainConfig(framework="torch", **kw))["models"][0]
    assert jx["framework"] == "jax" and 0.0 <= jx["accuracy"]["10"] <= 1.0
    assert jx["parameters"] == pt["parameters"]
