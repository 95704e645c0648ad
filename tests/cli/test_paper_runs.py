"""The paper's peer runs (``python -m mingru_benchmarks.paper``) on CPU: parameter counts by
hand, the GPT's validation windows (each byte once, its loss against a per-byte loop), the
timing probe's arithmetic, tiny runs of ``gpt`` (and ``--ours``) and ``peer-selective-copy`` (and
``--ours``) with their JSON, the peer's model against a hand-rolled minGRU loop and against our
model with the same weights, and the errors for missing packages. Correctness and bookkeeping,
never speed."""

from __future__ import annotations

import importlib.util
import json
import math
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from mingru import MinGRULM
from mingru_benchmarks import paper, paper_lm
from mingru_cli.tasks import ByteText

HAS_PEER = importlib.util.find_spec("minGRU_pytorch") is not None
needs_peer = pytest.mark.skipif(not HAS_PEER, reason="needs mingru-pytorch")
SEQ, ROWS, BATCH = 8, 4, 4
TINY_LM = ["--d-model", "16", "--layers", "1", "--train-len", str(SEQ), "--batch-size",
           str(BATCH), "--eval-every", "2", "--eval-batch-size", str(ROWS), "--val-bytes", "40",
           "--device", "cpu", "--no-progress"]
TINY_COPY = ["--d-model", "8", "--layers", "2", "--mixer-expansion", "2", "--train-len", "20",
             "--batch-size", "8", "--grad-accum", "2", "--eval-size", "8", "--eval-every", "2",
             "--warmup-steps", "1", "--device", "cpu", "--no-progress"]


def _text(path, n_bytes: int = 2400, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    data = " ".join(rng.choice(["the", "cat", "sat", "on", "a", "mat", "dog"], n_bytes // 4))
    path.write_bytes(data[:n_bytes].encode())
    return data[:n_bytes].encode()


def _gpt(d_model: int = 16, layers: int = 1, heads: int = 2, positions: int = SEQ):
    _, model_class = paper_lm.transformers_gpt2()
    torch.manual_seed(0)
    config = paper_lm.gpt_config(d_model=d_model, layers=layers, heads=heads,
                                 train_len=positions, dropout=0.0)
    return model_class(config).eval()


# --------------------------------------------------------------------------- parameter counts


def test_count_parameters_by_hand():
    d, vocab, positions = 16, 256, SEQ
    ours = MinGRULM(vocab, d, 1, mlp_expansion=2)  # tied head
    block = (2 * d          # norm1
             + 2 * (d * d + d)  # linear_z, linear_h
             + 2 * d            # norm2
             + (d * 2 * d + 2 * d) + (2 * d * d + d))  # MLP
    assert paper_lm.count_parameters(ours) == {
        "total": vocab * d + block + 2 * d, "embedding": vocab * d, "non_embedding": block + 2 * d}
    gpt_block = (2 * d + (d * 3 * d + 3 * d) + (d * d + d)  # ln_1, c_attn, attn c_proj
                 + 2 * d + (d * 4 * d + 4 * d) + (4 * d * d + d))  # ln_2, c_fc, mlp c_proj
    embedding = vocab * d + positions * d  # wte (tied head) + wpe
    assert paper_lm.count_parameters(_gpt()) == {
        "total": embedding + gpt_block + 2 * d, "embedding": embedding,
        "non_embedding": gpt_block + 2 * d}


def test_gpt_width_for_picks_the_nearest_count():
    counts = {w: paper_lm._gpt_parameters(paper_lm.gpt_config(
        d_model=w, layers=2, heads=w // 8, train_len=SEQ, dropout=0.0))["total"]
        for w in (8, 16, 24, 32)}
    for width in (16, 24):
        assert paper_lm.gpt_width_for(counts[width] + 3, layers=2, train_len=SEQ,
                                      head_dim=8) == width
    below = (counts[16] + counts[24]) // 2 - 5  # nearer 16 than 24
    assert paper_lm.gpt_width_for(below, layers=2, train_len=SEQ, head_dim=8) == 16


# --------------------------------------------------------------------------- GPT validation


def _segment_end(position: int, length: int, window: int, stride: int) -> int:
    """The end of the scored segment holding ``position``, as the docstring states the rule."""
    if position < window:
        return min(window, length)
    return min(window + ((position - window) // stride + 1) * stride, length)


@pytest.mark.parametrize(("rows", "max_bytes"), [(3, None), (3, 12)])
@pytest.mark.parametrize("stride", [1, 3, 8])
def test_sliding_windows_score_each_validation_byte_once(rows, max_bytes, stride):
    rng = np.random.default_rng(1)
    val = ByteText(rng.integers(0, 256, 200, dtype=np.uint8).tobytes(), val_fraction=0.3).validation(
        rows, max_bytes)
    windows, starts = paper_lm.sliding_windows(val, window=SEQ, stride=stride)
    assert windows.tokens.shape[1] == SEQ and int(windows.mask.sum()) == int(val.mask.sum())
    seen = []
    for w, (row, start) in enumerate(starts.tolist()):
        length = int(val.mask[row].sum())
        assert 0 <= start and start + SEQ <= max(length, SEQ)
        for j in np.flatnonzero(windows.mask[w]).tolist():
            position = start + j
            seen.append((row, position))
            assert windows.labels[w, j] == val.labels[row, position]
            # the window holds the stretch's inputs from its start to the scored byte
            assert (windows.tokens[w, : j + 1] == val.tokens[row, start : position + 1]).all()
            assert start == max(0, _segment_end(position, length, SEQ, stride) - SEQ)
            assert j + 1 >= min(position + 1, SEQ - stride + 1)  # the context promised
    assert sorted(seen) == [tuple(p) for p in np.argwhere(val.mask).tolist()]  # each byte once
    assert (windows.labels[~windows.mask] == -100).all()


@pytest.mark.parametrize("stride", [1, 3, 8])
def test_gpt_validation_loss_matches_a_per_byte_loop(stride):
    rng = np.random.default_rng(2)
    val = ByteText(rng.integers(0, 256, 90, dtype=np.uint8).tobytes(), val_fraction=0.3).validation(2)
    model = _gpt()
    windows, _ = paper_lm.sliding_windows(val, window=SEQ, stride=stride)
    got = paper_lm.gpt_validation_loss(model, windows, rows=3)
    losses = []
    with torch.no_grad():
        for row in range(val.tokens.shape[0]):
            length = int(val.mask[row].sum())
            for position in range(length):
                begin = max(0, _segment_end(position, length, SEQ, stride) - SEQ)
                context = torch.from_numpy(val.tokens[row, begin : position + 1])[None]
                logits = model(input_ids=context).logits[0, -1].double()
                label = torch.tensor(int(val.labels[row, position]))
                losses.append(float(F.cross_entropy(logits[None], label[None])))
    assert len(losses) == int(val.mask.sum())
    assert got == pytest.approx(sum(losses) / len(losses), rel=1e-5)


def test_sliding_windows_reject_a_bad_stride():
    val = ByteText(b"abcdefghijklmnopqrstuvwxyz" * 2).validation(1)
    for stride in (0, SEQ + 1):
        with pytest.raises(ValueError, match="--val-stride"):
            paper_lm.sliding_windows(val, window=SEQ, stride=stride)


# --------------------------------------------------------------------------- the budget


def test_probe_steps_times_a_run_after_a_warm_up():
    calls = []
    budget = paper_lm.probe_steps(lambda n: calls.append(n) or 0.25 * n, minutes=0.5, steps=4,
                                  warmup=2)
    assert calls == [2, 4]
    assert budget["seconds_per_step"] == 0.25 and budget["steps"] == 120
    assert paper_lm.probe_steps(lambda n: 100.0 * n, minutes=0.01, steps=1)["steps"] == 1


# --------------------------------------------------------------------------- the gpt command


def _run(capsys, *argv: str) -> str:
    assert paper.main(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def test_gpt_command_writes_its_json_and_is_deterministic(tmp_path, capsys):
    data = _text(tmp_path / "text.txt")
    argv = ["gpt", "--data", str(tmp_path / "text.txt"), "--heads", "2", "--steps", "4",
            *TINY_LM]
    _run(capsys, *argv, "--out", str(tmp_path / "a"))
    printed = _run(capsys, *argv, "--out", str(tmp_path / "b"))
    a, b = (json.loads((tmp_path / d / "gpt.json").read_text()) for d in "ab")
    assert a["val_loss"] == b["val_loss"] and a["curve"] == b["curve"]  # same seed, same run
    assert a["model"] == "gpt2" and a["steps"] == 4 and [p["step"] for p in a["curve"]] == [2, 4]
    assert a["params"] == paper_lm.count_parameters(_gpt())
    assert a["gpt"] == {"d_model": 16, "layers": 1, "heads": 2, "n_positions": SEQ,
                        "dropout": 0.0}
    assert a["config"]["precision"] == "fp32"
    whole = ByteText(data).validation(ROWS)
    assert a["val_bytes"] == int(whole.mask.sum()) == len(ByteText(data).val) - 1
    assert a["validation"]["bytes_per_evaluation"] == 40 and a["validation"]["stride"] == SEQ // 2
    assert a["val_bpb"] == pytest.approx(a["val_loss"] / math.log(2), abs=1e-4)
    assert a["tokens_per_second"] == pytest.approx(4 * BATCH * SEQ / a["step_seconds"], rel=1e-2)
    assert a["split"]["sha256"] and a["command"].startswith("python -m mingru_benchmarks.paper gpt")
    assert a["environment"]["transformers"] and a["environment"]["commit"]
    assert "gpt2" in printed and "val bpb" in printed


def test_gpt_command_ours_fills_the_budget_from_a_probe(tmp_path, capsys):
    _text(tmp_path / "text.txt")
    out = tmp_path / "runs"
    _run(capsys, "gpt", "--data", str(tmp_path / "text.txt"), "--heads", "2", "--steps", "2",
         *TINY_LM, "--out", str(out))
    printed = _run(capsys, "gpt", "--ours", "--data", str(tmp_path / "text.txt"),
                   "--max-minutes", "0.002", "--probe-steps", "2", "--sample-tokens", "30",
                   *TINY_LM, "--out", str(out))
    ours = json.loads((out / "ours.json").read_text())
    train = json.loads((out / "ours" / "train.json").read_text())
    assert ours["sample"] == train["sample"] and 0 < len(ours["sample"]["text"]) <= 30
    assert ours["model"] == "mingru" and ours["steps"] == ours["budget"]["steps"] >= 1
    assert train["config"]["steps"] == ours["steps"]
    assert ours["budget"]["seconds_per_step"] > 0 and ours["budget"]["probe_steps"] == 2
    assert ours["params"]["total"] == train["model"]["parameters"]
    assert ours["val_loss"] == train["model"]["final"]["val_loss"]
    assert ours["val_bytes"] == train["validation"]["final_bytes"]
    gpt = json.loads((out / "gpt.json").read_text())
    assert ours["val_bytes"] == gpt["val_bytes"]  # both sides score the same bytes
    lines = printed.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("model ") and "val bpb" in line)
    rows = [line.split()[0] for line in lines[header + 1 : header + 3]]
    assert rows == ["gpt2", "mingru"]  # the table puts the runs in the folder side by side
    # The page command puts the same two runs in the page's block, with the run's stamp.
    page = tmp_path / "paper.md"
    page.write_text("# p\n\n<!-- bench:paper-lm -->\nNot run yet.\n<!-- /bench:paper-lm -->\n\n"
                    "<!-- bench:paper-lm-sample -->\nNot run yet.\n<!-- /bench:paper-lm-sample -->\n\n"
                    "<!-- bench:paper-copy-peer -->\nNot run yet.\n<!-- /bench:paper-copy-peer -->\n")
    assert paper.main(["page", str(page), "--json", str(out)]) == 0
    text = page.read_text()
    block = text.split("<!-- bench:paper-lm -->")[1].split("<!-- /bench:paper-lm -->")[0]
    assert f"commit `{gpt['environment']['commit']}`" in block and "--out" not in block
    table = [line.split("|") for line in block.splitlines() if line.startswith("| ")]
    assert [cells[1].strip() for cells in table[1:]] == ["mingru", "gpt2"]
    assert table[1][7].strip() == f"{ours['val_loss']:.4f}"
    assert table[2][7].strip() == f"{gpt['val_loss']:.4f}"
    sample = text.split("<!-- bench:paper-lm-sample -->")[1].split("<!-- /bench:paper-lm-sample")[0]
    generated = "".join(c if c.isprintable() or c in "\n\t" else "\ufffd"
                        for c in ours["sample"]["prompt"] + ours["sample"]["text"])
    assert "text\n" + generated + "\n```" in sample
    assert "--ours" in sample and "gpt --data" not in sample  # only our run's command
    assert text.split("<!-- bench:paper-copy-peer -->")[1].startswith("\nNot run yet.")
    assert "paper-copy-peer" in capsys.readouterr().err  # no copy runs: left, and said
    assert paper.main(["page", str(page), "--json", str(tmp_path / "absent")]) == 1


def test_the_page_shows_a_sample_as_printable_text_in_one_block():
    sample = {"prompt": "To be", "text": ", or\r not ```x``` \x05\nto be", "temperature": 0.8,
              "top_p": 0.95, "seed": 0}
    lines = paper.lm_sample([{"model": "gpt2"}, {"model": "mingru", "sample": sample}])
    fence = lines[-1]
    assert fence == "````" and lines[-3] == fence + "text"  # longer than any run of backticks
    assert lines[-2] == "To be, or\ufffd not ```x``` \ufffd\nto be"
    assert "5 characters" in lines[0] and "temperature 0.8" in lines[0]
    assert paper.lm_sample([{"model": "gpt2"}]) == []  # no sample: the block is left as it is


def _record_gpt_logits(monkeypatch) -> list[tuple[bool, torch.dtype]]:
    """``(training?, logits dtype)`` of every forward of the GPTs built from now on."""
    config_class, model_class = paper_lm.transformers_gpt2()
    seen: list[tuple[bool, torch.dtype]] = []

    class Recording(model_class):
        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            seen.append((self.training, out.logits.dtype))
            return out

    monkeypatch.setattr(paper_lm, "transformers_gpt2", lambda: (config_class, Recording))
    return seen


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
def test_gpt_command_trains_and_scores_at_the_precision(tmp_path, capsys, monkeypatch, precision):
    seen = _record_gpt_logits(monkeypatch)
    _text(tmp_path / "text.txt")
    printed = _run(capsys, "gpt", "--data", str(tmp_path / "text.txt"), "--heads", "2",
                   "--steps", "2", "--precision", precision, *TINY_LM, "--out", str(tmp_path))
    want = torch.bfloat16 if precision == "bf16" else torch.float32
    # training steps and the validation forwards, all at the precision asked for
    assert {training for training, _ in seen} == {True, False}
    assert {dtype for _, dtype in seen} == {want}
    result = json.loads((tmp_path / "gpt.json").read_text())
    assert result["config"]["precision"] == precision and math.isfinite(result["val_loss"])
    row = next(line for line in printed.splitlines() if line.startswith("gpt2"))
    assert row.split()[-2] == precision  # then the seed


def test_both_sides_take_the_precision(tmp_path, capsys):
    _text(tmp_path / "text.txt")
    _run(capsys, "gpt", "--ours", "--data", str(tmp_path / "text.txt"), "--steps", "2",
         "--precision", "bf16", *TINY_LM, "--out", str(tmp_path))
    ours = json.loads((tmp_path / "ours.json").read_text())
    train = json.loads((tmp_path / "ours" / "train.json").read_text())
    assert ours["config"]["precision"] == train["config"]["precision"] == "bf16"
    for side in (["--ours"], *([[]] if HAS_PEER else [])):  # the peer's model too
        copy = _copy_run(capsys, tmp_path / f"copy{len(side)}", "--steps", "2", *side,
                         "--precision", "bf16")
        assert copy["config"]["precision"] == "bf16" and copy["best_val_acc"] is not None


def test_gpt_command_errors_are_one_line(tmp_path, capsys, monkeypatch):
    _text(tmp_path / "text.txt")
    base = ["gpt", "--data", str(tmp_path / "text.txt"), "--out", str(tmp_path), "--device", "cpu"]
    assert paper.main([*base, "--steps", "2", "--max-minutes", "1"]) == 1
    assert "give --steps or --max-minutes" in capsys.readouterr().err
    assert paper.main([*base, "--steps", "2", "--d-model", "16", "--heads", "3"]) == 1
    assert "--heads must be ≥ 1 and divide --d-model 16" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert paper.main([*base, "--steps", "2"]) == 1
    err = capsys.readouterr().err
    assert "needs transformers" in err and "mingru-scans[hf]" in err and len(err.splitlines()) == 1


# --------------------------------------------------------------------------- selective copy


def _peer_model(learnable_h0: bool = True, dropout: float = 0.0):
    from mingru_benchmarks import paper_copy

    torch.manual_seed(0)
    return paper_copy.PeerCopyModel(paper_copy.peer_module(), vocab_size=16, n_classes=16,
                                    d_model=8, n_layers=2, mixer_expansion=2, dropout=dropout,
                                    learnable_h0=learnable_h0)


@needs_peer
def test_peer_model_equals_a_hand_rolled_mingru_loop():
    model = _peer_model().double().eval()
    with torch.no_grad():
        model.h0.normal_()
    tokens = torch.randint(0, 16, (3, 5))
    sigmoid = torch.sigmoid
    g = lambda v: torch.where(v >= 0, v + 0.5, sigmoid(v))
    x = model.embed.weight[tokens]
    for norm, mixer, h0 in zip(model.norms, model.mixers, model.h0, strict=True):
        u = F.layer_norm(x, (8,), norm.weight, norm.bias, 1e-5)
        hidden, gate = (u @ mixer.to_hidden_and_gate.weight.T).chunk(2, dim=-1)
        state, states = g(h0).expand(3, -1), []
        for t in range(5):  # h_t = (1 − z_t) h_{t−1} + z_t g(h̃_t)
            z = sigmoid(gate[:, t])
            state = (1 - z) * state + z * g(hidden[:, t])
            states.append(state)
        x = x + torch.stack(states, dim=1) @ mixer.to_out.weight.T
    want = F.layer_norm(x, (8,), model.norm.weight, model.norm.bias, 1e-5) @ model.head.weight.T
    torch.testing.assert_close(model(tokens), want + model.head.bias, rtol=1e-10, atol=1e-10)


@needs_peer
def test_peer_model_is_ours_with_the_same_weights():
    from mingru_cli.train import SequenceModel

    peer = _peer_model().eval()
    torch.manual_seed(1)
    ours = SequenceModel(16, 16, 8, n_layers=2, mixer="log", mlp_expansion=0,
                         learnable_h0=True, mixer_expansion=2).eval()
    with torch.no_grad():
        peer.embed.weight.copy_(ours.embed.weight)
        peer.norm.load_state_dict(ours.stack.norm.state_dict())
        peer.head.load_state_dict(ours.head.state_dict())
        for i, block in enumerate(ours.stack.blocks):
            mixer = block.mixer
            for bias in (mixer.linear_z.bias, mixer.linear_h.bias, block.out_proj.bias):
                bias.zero_()  # the peer's projections have none
            mixer.h0.normal_()
            peer.h0[i].copy_(mixer.h0)
            peer.norms[i].load_state_dict(block.norm1.state_dict())
            peer.mixers[i].to_hidden_and_gate.weight.copy_(
                torch.cat([mixer.linear_h.weight, mixer.linear_z.weight]))
            peer.mixers[i].to_out.weight.copy_(block.out_proj.weight)
    tokens = torch.randint(0, 16, (2, 7))
    torch.testing.assert_close(peer(tokens), ours(tokens), rtol=1e-5, atol=1e-5)


def _copy_run(capsys, tmp_path, *extra: str) -> dict:
    printed = _run(capsys, "peer-selective-copy", *TINY_COPY, *extra, "--out", str(tmp_path))
    name = "ours-selective-copy.json" if "--ours" in extra else "peer-selective-copy.json"
    result = json.loads((tmp_path / name).read_text())
    assert result["model"] in printed.split()
    assert result["environment"]["torch"] and result["environment"]["device"] == "cpu"
    return result


@pytest.mark.parametrize("ours", [pytest.param(False, marks=needs_peer), True])
def test_peer_selective_copy_runs_to_its_steps_deterministically(tmp_path, capsys, ours):
    flags = ("--steps", "4", *(["--ours"] if ours else []))
    first = _copy_run(capsys, tmp_path / "a", *flags)
    second = _copy_run(capsys, tmp_path / "b", *flags)
    assert [p["val_acc"] for p in first["curve"]] == [p["val_acc"] for p in second["curve"]]
    assert [p["step"] for p in first["curve"]] == [2, 4] and first["steps"] == 4
    assert first["target_accuracy"] == 0.99 and not first["reached"]
    assert first["seconds_to_target"] is None and first["step_at_target"] is None
    assert first["seconds_per_step"] == pytest.approx(first["train_seconds"] / 4, abs=1e-5)
    for point in first["curve"]:
        assert 0 < point["train_seconds"] < point["wall_seconds"]
    # the preset's optimisation, with the tiny shapes given
    config = first["config"]
    assert (config["lr"], config["schedule"], config["weight_decay"], config["grad_clip"],
            config["dropout"], config["learnable_h0"], config["mlp_expansion"]) == (
        3e-4, "constant", 0.05, 1.0, 0.1, True, 0)
    assert first["validation"] == {"sequences": 8, "length": 20, "scored_tokens": 8 * 16}
    counts = first["params"]
    if HAS_PEER:  # ours has biases in its projections
        d, width, layers = 8, 16, 2
        assert counts["ours"]["total"] - counts["peer"]["total"] == layers * (2 * width + d)


@pytest.mark.parametrize("ours", [pytest.param(False, marks=needs_peer), True])
def test_peer_selective_copy_stops_at_its_target(tmp_path, capsys, ours):
    result = _copy_run(capsys, tmp_path, "--steps", "6", "--target-accuracy", "0.001",
                       *(["--ours"] if ours else []))
    assert result["reached"] and result["step_at_target"] == 2 == result["steps"]
    assert len(result["curve"]) == 1
    assert 0 < result["seconds_to_target"] < result["seconds_to_target_with_eval"]
    assert result["seconds_to_target"] == result["curve"][0]["train_seconds"]


@pytest.mark.parametrize("ours", [pytest.param(False, marks=needs_peer), True])
def test_peer_selective_copy_resumes_to_the_same_run(tmp_path, capsys, ours):
    side = ["--ours"] if ours else []
    whole = _copy_run(capsys, tmp_path / "whole", "--steps", "6", *side)
    paused = _copy_run(capsys, tmp_path / "jobs", "--steps", "6", "--stop-after", "3", *side)
    assert paused["paused_at_step"] == 3 == paused["steps"]
    assert [p["step"] for p in paused["curve"]] == [2] and not paused["reached"]
    resumed = _copy_run(capsys, tmp_path / "jobs", "--steps", "6", "--resume", *side)
    assert resumed["paused_at_step"] is None and resumed["steps"] == 6
    # the same steps on the same data: the same accuracies, the first job's point kept as it was
    assert [(p["step"], p["val_acc"]) for p in resumed["curve"]] == [
        (p["step"], p["val_acc"]) for p in whole["curve"]]
    assert resumed["curve"][0] == paused["curve"][0]
    times = [p["train_seconds"] for p in resumed["curve"]]
    assert 0 < times[0] < times[-1] <= resumed["train_seconds"]  # the clock carried over
    assert paper.main(["peer-selective-copy", *TINY_COPY, "--job-minutes", "0", "--out",
                       str(tmp_path / "bad"), *side]) == 1
    assert "--job-minutes must be" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--lr"):  # a resumed run keeps its configuration
        paper.run_copy_command(paper.build_parser().parse_args(
            ["peer-selective-copy", *TINY_COPY, "--steps", "6", "--resume", "--lr", "0.1",
             "--out", str(tmp_path / "jobs"), *side]), "test")


def test_ours_through_the_peer_loop_is_mingru_train(tmp_path, capsys):
    from mingru_cli.cli import main as mingru

    ours = _copy_run(capsys, tmp_path, "--steps", "4", "--ours")
    flags = [f for f in TINY_COPY if f not in ("--warmup-steps", "1")]
    assert mingru(["train", "--preset", "paper-selective-copy", *flags, "--steps", "4",
                   "--val-len", "20", "--eval-lens", "20", "--out", str(tmp_path / "train")]) == 0
    model = json.loads((tmp_path / "train" / "train_results.json").read_text())["models"][0]
    # the same model, data, optimisation and validation set: the same accuracies
    assert [(p["step"], p["val_acc"]) for p in model["curve"]] == [
        (p["step"], p["val_acc"]) for p in ours["curve"]]
    assert model["parameters"] == ours["params"]["ours"]["total"]


def test_peer_selective_copy_names_the_missing_package(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "minGRU_pytorch", None)
    monkeypatch.setitem(sys.modules, "minGRU_pytorch.minGRU", None)
    assert paper.main(["peer-selective-copy", "--out", str(tmp_path), "--device", "cpu"]) == 1
    err = capsys.readouterr().err
    assert "mingru-pytorch" in err and "pip install mingru-pytorch==0.2.1" in err
    assert len(err.splitlines()) == 1 and not list(tmp_path.iterdir())
