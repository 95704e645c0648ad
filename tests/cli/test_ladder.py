"""``python -m mingru_benchmarks.ladder``: the ladder in jobs. A run whose results exist is
skipped, a run saved part way is resumed with its device, a job stops on its minutes, and a
real run paused by ``mingru train`` ends, resumed, as one run would. Correctness, never speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mingru_benchmarks import ladder
from mingru_cli._train_args import train_config
from mingru_cli.cli import build_parser, main


class StandIn:
    """``mingru train`` that finishes a run, or pauses it (saved) the first time it is named
    in ``pauses``; records every argv."""

    def __init__(self, out: Path, pauses: tuple[str, ...] = ()) -> None:
        self.out, self.pauses, self.calls = out, set(pauses), []

    def __call__(self, argv: list[str]) -> int:
        self.calls.append(argv)
        folder = Path(argv[argv.index("--resume" if "--resume" in argv else "--out") + 1])
        if folder.name in self.pauses:
            self.pauses.discard(folder.name)
            (folder / "checkpoint").mkdir(parents=True)
            (folder / "checkpoint" / "train_state.json").write_text("{}")
        else:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / ladder.RESULTS).write_text("{}")
        return 0


RUNS = {"a": ["--task", "parity", "--device", "cpu"], "b": ["--task", "s3", "--device", "cpu"],
        "c": ["--task", "s5"]}


def test_a_paused_run_stops_the_job_and_the_next_job_resumes_it(tmp_path):
    train = StandIn(tmp_path, pauses=("b",))
    assert ladder.run_ladder(tmp_path, RUNS, minutes=5, train=train) == ["b", "c"]
    assert [call[:4] for call in train.calls] == [
        ["--no-progress", "--task", "parity", "--device"], ["--no-progress", "--task", "s3", "--device"]]
    for call in train.calls:  # each job's runs share its minutes
        assert 0 < float(call[call.index("--max-minutes") + 1]) <= 5
    train.calls.clear()
    assert ladder.run_ladder(tmp_path, RUNS, minutes=5, train=train) == []
    assert [call[:5] for call in train.calls] == [
        ["--no-progress", "--resume", str(tmp_path / "b"), "--device", "cpu"],
        ["--no-progress", "--task", "s5", "--out", str(tmp_path / "c")]]
    train.calls.clear()
    assert ladder.run_ladder(tmp_path, RUNS, train=train) == [] and train.calls == []


def test_a_job_without_time_left_starts_no_run(tmp_path, monkeypatch):
    train = StandIn(tmp_path)
    monkeypatch.setattr(ladder, "MIN_SECONDS", 61.0)
    assert ladder.run_ladder(tmp_path, RUNS, minutes=1, train=train) == list(RUNS)
    assert train.calls == []


def test_a_failed_run_is_an_error_naming_it(tmp_path, capsys, monkeypatch):
    with pytest.raises(RuntimeError, match="run a failed"):
        ladder.run_ladder(tmp_path, RUNS, train=lambda argv: 1)

    def failing(*args, **kwargs):
        raise RuntimeError("run a failed (exit status 1)")

    monkeypatch.setattr(ladder, "run_ladder", failing)
    assert ladder.main([str(tmp_path), "--only", "parity-seed0"]) == 1  # one line, status 1
    assert "run a failed" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [(["--minutes", "0"], "--minutes"),
                                           (["--only", "nope"], "--only")])
def test_bad_flags_name_themselves(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit):
        ladder.main([str(tmp_path), *argv])
    assert message in capsys.readouterr().err


def test_the_gpu_ladder_trains_every_mixer_at_256_and_scores_to_4096():
    runs = ladder.gpu_runs()
    assert len(runs) == 12 and sum(name.endswith("seed2") for name in runs) == 4
    for arguments in runs.values():
        assert arguments[arguments.index("--train-len") + 1] == "256"
        assert arguments[arguments.index("--eval-lens") + 1] == "256,1024,4096"
        assert arguments.count("--mixer") == 5
        config = train_config(build_parser().parse_args(["train", *arguments])).resolved()
        if config.task == "s5":  # the factors S5 needs in one layer, and a length curriculum
            assert config.mixer_kwargs == {"givens": {"rounds": 8}, "delta": {"nh": 4}}
            assert config.curriculum == 4 and config.train_len == 256


def test_a_real_run_paused_and_resumed_ends_as_one_run(tmp_path):
    tiny = ["--task", "parity", "--train-len", "8", "--val-len", "8", "--eval-lens", "8",
            "--d-model", "8", "--batch-size", "4", "--eval-size", "4", "--eval-every", "2",
            "--steps", "4", "--seed", "1", "--device", "cpu"]
    # --stop-after is the job's: the run pauses after 2 steps, its resumed job goes to 4.
    assert ladder.run_ladder(tmp_path / "jobs", {"r": [*tiny, "--stop-after", "2"]}) == ["r"]
    assert ladder.run_ladder(tmp_path / "jobs", {"r": [*tiny, "--stop-after", "2"]}) == []
    assert main(["train", *tiny, "--no-progress", "--out", str(tmp_path / "whole" / "r")]) == 0
    jobs, whole = (json.loads((tmp_path / d / "r" / ladder.RESULTS).read_text())["models"][0]
                   for d in ("jobs", "whole"))
    assert jobs["curve"] == whole["curve"] and jobs["accuracy"] == whole["accuracy"]
