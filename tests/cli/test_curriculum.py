"""``mingru train --curriculum START``: the training length starts at START and doubles (capped
at ``--train-len``) each time the running training accuracy reaches ``CURRICULUM_ACCURACY``;
the batches have those lengths, the curve records them, a run split into jobs equals one run on
both frameworks, and bad values are one-line errors naming the flag. Correctness, never speed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mingru_cli import _train_common
from mingru_cli._train_common import next_length
from mingru_cli.config import CURRICULUM_ACCURACY, TrainConfig
from tests.cli.test_resume import FRAMEWORKS, ON_CPU, assert_same_run, cli

BASE = ["--task", "parity", "--train-len", "12", "--d-model", "8", "--batch-size", "4",
        "--eval-lens", "12", "--val-len", "12", "--eval-size", "4", "--eval-every", "2",
        "--seed", "1", "--device", "cpu", "--no-progress"]
TINY = [*BASE, "--curriculum", "3"]


def test_next_length_doubles_at_the_threshold_and_stops_at_train_len():
    cfg = TrainConfig(task="s5", train_len=10, curriculum=3)
    just_below = np.nextafter(CURRICULUM_ACCURACY, 0.0)
    assert next_length(3, CURRICULUM_ACCURACY, cfg) == 6
    assert next_length(3, just_below, cfg) == 3
    assert next_length(6, 1.0, cfg) == 10  # capped, not 12
    assert next_length(10, 1.0, cfg) == 10


@pytest.fixture
def always_advance(monkeypatch):
    """Every step reaches the threshold, so the length doubles after each step."""
    monkeypatch.setattr(_train_common, "CURRICULUM_ACCURACY", 0.0)


def test_batches_follow_the_curriculum_and_the_curve_records_it(tmp_path, always_advance,
                                                                 monkeypatch):
    lengths = []
    sample = _train_common.TrainStream.next

    def spy(self, length):
        batch = sample(self, length)
        lengths.append(batch.tokens.shape[1])
        return batch

    monkeypatch.setattr(_train_common.TrainStream, "next", spy)
    code, _, err = cli(["train", *TINY, "--mixer", "signed", "--steps", "5",
                        "--out", str(tmp_path)])
    assert code == 0, err
    assert lengths == [3, 6, 12, 12, 12]
    (model,) = json.loads((tmp_path / "train_results.json").read_text())["models"]
    assert [(p["step"], p["train_len"]) for p in model["curve"]] == [(2, 6), (4, 12), (5, 12)]


def test_without_curriculum_every_batch_has_train_len(tmp_path):
    code, _, err = cli(["train", *BASE, "--mixer", "signed", "--steps", "2",
                        "--out", str(tmp_path)])
    assert code == 0, err
    (model,) = json.loads((tmp_path / "train_results.json").read_text())["models"]
    assert all("train_len" not in point for point in model["curve"])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_jobs_resumed_mid_curriculum_equal_one_run(framework, tmp_path, always_advance):
    # The first job ends after two steps, at length 6, with 12 next: the resumed job must go
    # on at 12, not start over at 3.
    argv = ["train", *TINY, "--framework", framework, "--mixer", "signed", "--steps", "6"]
    assert cli([*argv, "--out", str(tmp_path / "one")])[0] == 0
    code, out, _ = cli([*argv, "--out", str(tmp_path / "split"), "--stop-after", "2"])
    assert code == 0 and "stopped signed at step 2 of 6" in out
    code, _, err = cli(["train", "--resume", str(tmp_path / "split"), *ON_CPU, "--no-progress"])
    assert code == 0, err
    assert_same_run(tmp_path / "one", tmp_path / "split")


@pytest.mark.parametrize("argv, message", [
    (["--curriculum", "0"], "--curriculum must be an int in [1, --train-len 12]; got 0"),
    (["--curriculum", "13"], "--curriculum must be an int in [1, --train-len 12]; got 13"),
    (["--task", "mqar", "--curriculum", "6", "--train-len", "48"],
     "--curriculum must be ≥ 24, the shortest sequence of task 'mqar'"),
])
def test_bad_curriculum_is_a_one_line_error_naming_the_flag(argv, message):
    code, out, err = cli(["train", *BASE, "--mixer", "signed", "--steps", "2", *argv])
    assert code == 1 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"mingru train: error: {message}"), line


def test_curriculum_is_not_for_the_language_model(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("abcdefgh" * 200)
    code, _, err = cli(["train", "--task", "lm", "--data", str(text), "--train-len", "16",
                        "--curriculum", "4", "--steps", "2", "--out", str(tmp_path / "r"),
                        "--device", "cpu", "--no-progress"])
    assert code == 1
    assert "--curriculum: --task lm trains on windows of --train-len" in err
