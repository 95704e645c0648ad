"""The ``mingru`` command line: ``info``, ``train`` (tiny budgets), the task generators, and
``bench --quick`` on CPU. Every check here is about correctness, never speed."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest
import torch

from mingru import bench_cases
from mingru.cli import main
from mingru.tasks import GroupWordTask, MQARTask, ParityTask, make_task, permutation_table
from mingru.train import TrainConfig, parse_mixer_spec, run

# --------------------------------------------------------------------------- info


def test_info_subprocess_runs_and_reports_both_frontends():
    env = {**os.environ, "MINGRU_SCAN": "eager"}
    text = subprocess.run([sys.executable, "-m", "mingru", "info"], capture_output=True,
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


def test_train_heterogeneous_stack_and_mqar():
    cfg = TrainConfig(task="mqar", mixers=["signed,delta"], steps=2, batch_size=2, d_model=8,
                      eval_lens=[30], val_len=None, eval_size=4, mqar_pairs=3, mqar_keys=4,
                      mqar_values=4, mixer_kwargs={"delta": {"n_heads": 2}}, progress=False,
                      verbose=False)
    res = run(cfg)
    (model,) = res["models"]
    assert model["mixer"] == "signed,delta" and 0.0 <= model["accuracy"]["30"] <= 1.0
    assert res["chance"] == pytest.approx(0.25)


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


def test_bench_ops_filter_and_wall_timer(tmp_path):
    out = tmp_path / "bench"
    assert main(["bench", "--device", "cpu", "--quick", "--groups", "cpu-scans",
                 "--backends", "eager", "--ops", "linear_scan,log", "--timer", "wall",
                 "--repeats", "1", "--warmup", "1", "--out", str(out)]) == 0
    res = json.loads((out / "bench.json").read_text())
    assert {r["op"] for r in res["rows"] if "ms" in r} == {"linear_scan", "parallel_scan_log"}
    assert res["settings"]["timer"].startswith("time.perf_counter")


def test_delta_rule_flop_count():
    # Recurrent form: per token, head and micro-step kᵀH and the rank-1 update (4·dk·dv),
    # plus the read-out qᵀH (2·dk·dv) per token and head.
    flops = bench_cases.delta_rule_flops(B=2, T=3, heads=4, nh=2, dk=5, dv=7)
    assert flops["fwd"] == 2 * 3 * 4 * (2 * 4 * 5 * 7 + 2 * 5 * 7)
    assert flops["fwd+bwd"] == 3 * flops["fwd"]


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
