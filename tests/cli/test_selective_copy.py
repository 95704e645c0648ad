"""``mingru train --task selective-copy``: the generator's layout against hand-worked sequences,
the per-token and per-sequence scores, ``--preset paper-selective-copy``'s values and the
model it builds (the paper's "expansion 6"), a few training steps on both frameworks (widened
mixer states too), and gradient accumulation against one large batch.
Correctness, never speed."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from mingru_cli._train_args import train_config
from mingru_cli._train_common import lr_at, score
from mingru_cli.cli import build_parser, main
from mingru_cli.config import TrainConfig, stack_arguments
from mingru_cli.runner import run
from mingru_cli.tasks import Batch, SelectiveCopyTask, make_task, selective_copy_layout
from tests.cli.test_resume import saved_arrays

HAS_JAX = all(importlib.util.find_spec(m) for m in ("jax", "flax", "optax"))
FRAMEWORKS = ["torch", pytest.param("jax", marks=pytest.mark.skipif(not HAS_JAX,
                                                                      reason="needs jax"))]
F, Q, X = 15, 0, -100  # filler, query, unscored label (vocabulary 16)


def test_layout_matches_hand_worked_sequences():
    tokens = np.array([[3, 7], [14, 1]])
    positions = np.array([[1, 4], [0, 5]])
    batch = selective_copy_layout(tokens, positions, length=6, vocab_size=16)
    assert batch.tokens.tolist() == [[F, 3, F, F, 7, F, Q, Q], [14, F, F, F, F, 1, Q, Q]]
    assert batch.labels.tolist() == [[X] * 6 + [3, 7], [X] * 6 + [14, 1]]
    assert batch.mask.tolist() == [[False] * 6 + [True, True]] * 2
    full = selective_copy_layout(np.array([[2, 9, 5]]), np.array([[0, 1, 2]]), length=3, vocab_size=16)
    assert full.tokens.tolist() == [[2, 9, 5, Q, Q, Q]]  # every data position holds a token


def test_sample_places_the_targets_in_order_among_filler():
    task = SelectiveCopyTask(n_copy=4, vocab_size=7)
    batch = task.sample(50, 9, np.random.default_rng(5))
    assert batch.tokens.shape == batch.labels.shape == batch.mask.shape == (50, 13)
    assert batch.tokens.dtype == batch.labels.dtype == np.int64
    seen_positions = set()
    for row in range(50):
        data, queries = batch.tokens[row, :9], batch.tokens[row, 9:]
        placed = [(t, int(v)) for t, v in enumerate(data) if v != 6]
        assert len(placed) == 4 and all(1 <= v <= 5 for _, v in placed)
        assert queries.tolist() == [0] * 4
        assert batch.labels[row, 9:].tolist() == [v for _, v in placed]
        assert (batch.labels[row, :9] == X).all() and not batch.mask[row, :9].any()
        assert batch.mask[row, 9:].all()
        seen_positions.update(t for t, _ in placed)
    assert seen_positions == set(range(9))  # positions are drawn, not fixed
    assert task.chance == pytest.approx(1 / 5) and task.n_classes == 7
    with pytest.raises(ValueError, match="length"):
        task.sample(2, 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="copy_vocab"):
        make_task("selective-copy", n_copy=2, vocab_size=2)


@pytest.mark.parametrize("size, population", [(2, 5), (3, 5), (16, 4096), (4, 4)])
def test_uniform_subsets_are_sorted_distinct_and_uniform(size, population):
    """Both ways of drawing (redrawn repeats where ``size² ≤ population``, else the smallest of
    uniform keys): every row sorted and distinct, every subset about equally frequent."""
    from itertools import combinations

    from mingru_cli.tasks import uniform_subsets

    rows = 20_000
    picked = uniform_subsets(rows, size, population, rng=np.random.default_rng(3))
    assert picked.shape == (rows, size) and picked.dtype == np.int64
    assert (np.diff(picked, axis=1) > 0).all() and picked.min() >= 0 and picked.max() < population
    if population <= 5:  # every subset seen, each within 10 % of its share (≥ 4.5 sd)
        counts: dict[tuple[int, ...], int] = {}
        for row in map(tuple, picked.tolist()):
            counts[row] = counts.get(row, 0) + 1
        subsets = list(combinations(range(population), size))
        assert set(counts) == set(subsets)
        expected = rows / len(subsets)
        assert all(abs(n - expected) < 0.1 * expected for n in counts.values())
    else:  # each position equally likely: size / population of the rows hold it
        share = np.bincount(picked.ravel(), minlength=population) / rows
        assert abs(share.mean() - size / population) < 1e-12 and share.max() < 2 * size / population


def test_score_counts_tokens_and_whole_sequences():
    labels = np.array([[1, 2, X], [3, 4, X], [X, X, X], [5, X, 6]])
    rows = np.repeat(np.arange(4)[:, None], 3, axis=1)  # the tokens say which row they are
    predictions = np.array([[1, 2, 0], [3, 0, 0], [0, 0, 0], [5, 0, 6]])
    for chunk in (1, 3, 4):
        result = score(lambda tokens: predictions[tokens[:, 0]], Batch(rows, labels, labels >= 0),
                       chunk)
        assert result.token == pytest.approx(5 / 6)
        assert result.sequence == pytest.approx(2 / 3)  # the unscored row does not count


def test_constant_schedule_keeps_the_peak():
    assert [lr_at(s, 10, 2e-3, warmup=0.3, schedule="constant") for s in (0, 5, 9)] == [2e-3] * 3
    assert lr_at(0, 10, 2e-3, warmup=0.3) == pytest.approx(2e-3 / 3)


PAPER = {"task": "selective-copy", "mixers": ["log"], "layers": 3, "d_model": 64,
         "mixer_expansion": 6, "mlp_expansion": 0, "dropout": 0.1, "learnable_h0": True, "batch_size": 64,
         "grad_accum": 2, "steps": 400_000, "lr": 3e-4, "schedule": "constant",
         "weight_decay": 0.05, "grad_clip": 1.0, "train_len": 4096, "eval_lens": [4096],
         "val_len": 4096, "eval_every": 1000, "eval_size": 12_800, "eval_batch_size": 64,
         "copy_tokens": 16, "copy_vocab": 16, "preset": "paper-selective-copy"}


def test_paper_preset_sets_the_documented_values():
    args = build_parser().parse_args(["train", "--preset", "paper-selective-copy"])
    cfg = train_config(args).resolved()
    assert {name: getattr(cfg, name) for name in PAPER} == PAPER
    batch = make_task("selective-copy", n_copy=cfg.copy_tokens, vocab_size=cfg.copy_vocab).sample(
        2, cfg.train_len, np.random.default_rng(0))
    assert batch.tokens.shape == (2, 4096 + 16) and batch.mask.sum(axis=1).tolist() == [16, 16]
    # Flags given with the preset win; the rest stays.
    args = build_parser().parse_args(["train", "--preset", "paper-selective-copy", "--steps",
                                      "10", "--dropout", "0", "--no-learnable-h0"])
    cfg = train_config(args).resolved()
    assert (cfg.steps, cfg.dropout, cfg.learnable_h0, cfg.layers) == (10, 0.0, False, 3)
    assert cfg.mixer_expansion == 6
    args = build_parser().parse_args(["train", "--preset", "paper-selective-copy",
                                      "--mixer-expansion", "1"])
    assert train_config(args).resolved().mixer_expansion == 1
    assert train_config(build_parser().parse_args(["train"])).resolved().mixer_expansion == 1
    with pytest.raises(ValueError, match="mixer_expansion=2 does not apply to the 'delta'"):
        TrainConfig(mixers=["log,delta"], layers=2, mixer_expansion=2).resolved()


def _preset_model(framework: str, cfg: TrainConfig):
    """The model ``mingru train`` builds for ``cfg``'s first mixer spec, with the parameter
    arrays of each of its blocks."""
    mixer, n_layers, mixer_kwargs = stack_arguments(cfg.mixers[0], cfg)
    task = make_task("selective-copy", n_copy=cfg.copy_tokens, vocab_size=cfg.copy_vocab)
    if framework == "torch":
        from mingru_cli.train import SequenceModel

        model = SequenceModel(task.vocab_size, task.n_classes, cfg.d_model, n_layers=n_layers,
                              mixer=mixer, mixer_kwargs=mixer_kwargs,
                              mlp_expansion=cfg.mlp_expansion, dropout=cfg.dropout,
                              learnable_h0=cfg.learnable_h0, mixer_expansion=cfg.mixer_expansion)
        return model, [[p.detach().numpy() for p in block.parameters()]
                       for block in model.stack.blocks]
    from flax import nnx

    from mingru_cli.train_jax import _sequence_model

    model = _sequence_model()(task, cfg, n_layers, mixer, mixer_kwargs, rngs=nnx.Rngs(0))
    return model, [[np.asarray(v[...]) for _, v in nnx.to_flat_state(nnx.state(block, nnx.Param))]
                   for block in model.stack.blocks]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_paper_preset_builds_the_expanded_model(framework):
    """"Expansion 6" at d_model 64: each layer's minGRU has a 384-wide state, projected back
    to 64; per layer the official minGRU's parameters (input projections to the hidden state
    and the gate, the output projection, the learned h0) plus our two LayerNorms."""
    cfg = train_config(build_parser().parse_args(["train", "--preset",
                                                  "paper-selective-copy"])).resolved()
    model, blocks = _preset_model(framework, cfg)
    d, width = 64, 6 * 64
    assert len(blocks) == 3
    for block in model.stack.blocks:
        assert block.mixer.hidden_size == width and block.out_proj is not None
        assert block.norm2 is None and block.mlp is None  # no MLP, no norm for it
    official = 2 * (d * width + width) + (width * d + d) + width  # to_hidden_and_gate, to_out, h0
    for arrays in blocks:
        # + norm1 (scale and bias): the official two RMSNorm gains have as many parameters
        assert sum(a.size for a in arrays) == official + 2 * d
        matrices = sorted(a.shape for a in arrays if a.ndim == 2)
        if framework == "jax":  # nnx.Linear keeps (in, out), nn.Linear (out, in)
            matrices = sorted(shape[::-1] for shape in matrices)
        assert matrices == [(d, width), (width, d), (width, d)]


def _tiny(framework: str, **fields) -> TrainConfig:
    base = dict(task="selective-copy", framework=framework, mixers=["log"], layers=1, d_model=8,
                mlp_expansion=0, steps=6, batch_size=4, train_len=6, copy_tokens=2,
                copy_vocab=5, eval_lens=[6, 10], val_len=6, eval_size=4, eval_batch_size=4,
                eval_every=3, device="cpu", progress=False, verbose=False)
    return TrainConfig(**{**base, **fields})


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_train_selective_copy_reports_token_and_sequence_accuracy(framework, tmp_path, capsys):
    argv = ["train", "--task", "selective-copy", "--framework", framework, "--mixer", "log",
            "--layers", "1", "--d-model", "8", "--mlp-expansion", "0", "--steps", "6",
            "--batch-size", "4", "--train-len", "6", "--copy-tokens", "2", "--copy-vocab", "5",
            "--eval-lens", "6,10", "--val-len", "6", "--eval-size", "4", "--eval-batch-size", "4",
            "--eval-every", "3", "--dropout", "0.2", "--device", "cpu", "--no-progress",
            "--out", str(tmp_path)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "per sequence (all its scored positions right):" in printed
    result = json.loads((tmp_path / "train_results.json").read_text())
    assert result["chance"] == pytest.approx(1 / 3)
    (model,) = result["models"]
    for key in ("accuracy", "sequence_accuracy"):
        assert set(model[key]) == {"6", "10"} and all(0 <= a <= 1 for a in model[key].values())
    for n in ("6", "10"):  # a sequence is right only when its two queries are
        assert model["sequence_accuracy"][n] <= model["accuracy"][n]
    assert all("val_seq_acc" in point for point in model["curve"])
    assert [point["step"] for point in model["curve"]] == [3, 6]
    # Dropout acts while training (the losses move) and not while evaluating (same scores).
    again = run(_tiny(framework, dropout=0.2))["models"][0]
    plain = run(_tiny(framework))["models"][0]
    assert again["curve"] == model["curve"] and again["accuracy"] == model["accuracy"]
    assert plain["curve"] != model["curve"]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_train_with_a_widened_mixer_state(framework, tmp_path):
    """``--mixer-expansion`` reaches the model each training path builds: in the saved
    weights the mixer's two projections give 2·d_model outputs instead of d_model, and each
    layer gains ``out_proj`` (2·d_model → d_model)."""
    sizes = {}
    for expansion in (1, 2):
        out = tmp_path / str(expansion)
        run(_tiny(framework, mixer_expansion=expansion, out=str(out)))
        (arrays,) = saved_arrays(out).values()
        weights = "/model/" if framework == "torch" else "params/"
        sizes[expansion] = sum(v.size for k, v in arrays.items() if k.startswith(weights))
    d, wide = 8, 16
    assert sizes[2] - sizes[1] == 2 * (d * wide + wide) - 2 * (d * d + d) + (wide * d + d)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_grad_accum_equals_one_batch(framework, tmp_path):
    """Two micro-batches of 4 give the step of one batch of 8 (each sequence has as many
    scored positions, so the mean of the two means is the mean): the same weights and the
    same optimizer moments, which see the gradients' scale (the weights under Adam do not)."""
    arrays = {}
    for parts in (1, 2):
        out = tmp_path / str(parts)
        run(_tiny(framework, batch_size=8, grad_accum=parts, steps=3, grad_clip=0.0,
                  out=str(out)))  # no clipping: it would hide the gradients' scale
        (arrays[parts],) = saved_arrays(out).values()
    assert arrays[1].keys() == arrays[2].keys()
    assert any("exp_avg" in name or name.startswith("opt/") for name in arrays[1])
    for name, value in arrays[1].items():
        np.testing.assert_allclose(arrays[2][name], value, rtol=1e-5, atol=1e-7, err_msg=name)
