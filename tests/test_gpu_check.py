"""bench/gpu_check.py (issue 50's GPU check in one command) end to end on the CPU
(``--device cpu``, ``builtin:mlp``), as CI has no GPU: the search with its stages, parts and
predicted peaks, the plain fits of its pick and neighbours, a PyTorch trial, and the section it
writes. And its comparison on its own (issue 70): like with like, the median of a setup's plain
fits, as many as the search's runs and over the same epochs, beside the median of those runs,
each named by its trial number."""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from tests_support import run_python

from tuner.setup import Setup
from tuner.trials.result import TrialResult, TrialStatus
from tuner.trials.spec import TrialSpec

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def gpu_check(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """bench/gpu_check.py as a module, in this process."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # the bench puts its folder first
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "gpu_check", module)  # its dataclasses look it up there
    spec.loader.exec_module(module)
    return module


def _trial(
    gpu_check: ModuleType, number: int, setup: Setup, rate: float, ok: bool = True
) -> object:
    status = TrialStatus.OK if ok else TrialStatus.OOM
    result = TrialResult(
        TrialSpec(model="builtin:mlp", setup=setup),
        status,
        samples_per_second=rate if ok else None,
    )
    return gpu_check.Trial(number, "batch" if number else "baseline", result)


def test_a_setups_fits_are_as_many_as_its_runs_in_turn_over_the_same_epochs_and_medians_meet(
    gpu_check: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pick ran as trials #3, #9 and #12 (500, 100 and 400 samples/s): it is fit three
    times (figures 100, 300, 200), its neighbours once each, the setups in turn; every fit of a
    setup after its first times exactly the first one's epochs. The table sets the median of the
    fits (200, neither the best nor the first) against the median of the runs (400, not the
    best 500), and names the runs by their own numbers."""
    pick = Setup("float32", 64)
    half, double = pick.replace(batch_size=32), pick.replace(batch_size=128)
    trials = [
        _trial(gpu_check, 3, pick, 500.0),
        _trial(gpu_check, 5, half, 250.0),
        _trial(gpu_check, 7, double, 0.0, ok=False),  # an OOM is no run of its setup
        _trial(gpu_check, 9, pick, 100.0),
        _trial(gpu_check, 12, pick, 400.0),
    ]
    figures = {64: iter([100.0, 300.0, 200.0]), 32: iter([120.0]), 128: iter([700.0])}
    first_epochs = {64: 4, 32: 6, 128: 2}
    calls: list[tuple[int, list[str]]] = []

    def program(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        batch = json.loads(argv[2])["batch_size"]
        calls.append((batch, argv[3:]))
        epochs = int(argv[4]) if len(argv) > 4 else first_epochs[batch]
        line = json.dumps({"samples_per_second": next(figures[batch]), "epochs": epochs})
        return subprocess.CompletedProcess(argv, 0, stdout=line + "\n", stderr="")

    monkeypatch.setattr(gpu_check, "run_program", program)
    args = argparse.Namespace(device="cpu", size="cpu", fit_seconds=1.5, budget_minutes=1.0)
    fits = gpu_check.like_with_like("builtin:mlp", pick, trials, args)
    # In turn: each setup's first fit by seconds, then the pick's two more over its 4 epochs.
    assert calls == [
        (64, ["1.5"]),
        (32, ["1.5"]),
        (128, ["1.5"]),
        (64, ["0", "4"]),
        (64, ["0", "4"]),
    ]
    by_batch = {f.setup.batch_size: f for f in fits}
    assert [n for n, _ in by_batch[64].runs] == [3, 9, 12]
    assert (by_batch[64].fit, by_batch[64].trial, by_batch[64].epochs) == (200.0, 400.0, 4)
    assert (by_batch[32].fit, by_batch[32].trial) == (120.0, 250.0)
    assert (by_batch[128].fit, by_batch[128].trial) == (700.0, None)

    text = gpu_check.report(args, "builtin:mlp", trials, pick, 60.0, fits, "none")
    rows = re.findall(r"^\| (\d+) \| `([^`]+)` \| (\w+) \|", text, re.M)
    assert rows == [
        ("3", pick.label, "ok"),
        ("5", half.label, "ok"),
        ("7", double.label, "oom"),
        ("9", pick.label, "ok"),
        ("12", pick.label, "ok"),
    ]
    assert f"| `{pick.label}` | 200 | 3 x 4 | 400 | #3, #9, #12 | 2.00 |" in text, text
    assert f"| `{half.label}` | 120 | 1 x 6 | 250 | #5 | 2.08 |" in text, text
    assert f"| `{double.label}` | 700 | 1 x 2 | not measured | - | - |" in text, text


def test_a_failed_fit_ends_its_setups_fits_and_fails_the_check(
    gpu_check: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    pick = Setup("float32", 16)  # the ladder's first: its one neighbour is above it
    trials = [_trial(gpu_check, 0, pick, 90.0), _trial(gpu_check, 1, pick, 80.0)]
    calls: list[int] = []

    def program(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        calls.append(json.loads(argv[2])["batch_size"])
        return subprocess.CompletedProcess(argv, 1, stdout="", stderr="boom")

    monkeypatch.setattr(gpu_check, "run_program", program)
    args = argparse.Namespace(device="cpu", size="cpu", fit_seconds=1.0)
    fits = gpu_check.like_with_like("builtin:mlp", pick, trials, args)
    assert calls == [16, 32]  # no second fit of the pick once its first failed
    assert [(f.setup.batch_size, f.fit) for f in fits] == [(16, None), (32, None)]


@pytest.mark.slow
def test_the_gpu_check_runs_end_to_end_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpu_check: ModuleType
) -> None:
    out = tmp_path / "section.md"
    # In this process (its search's and its PyTorch trial's workers fork from the suite's
    # servers): the command line's parsing is the same function, given these arguments.
    # Its plain fits forked from an interpreter that imported their backend once (each would
    # import JAX afresh for half a second of fit): the same program, arguments and environment.
    monkeypatch.setattr(
        gpu_check,
        "run_program",
        lambda argv, env: run_python(argv, ROOT, env, backend=env["KERAS_BACKEND"]),
    )
    code = gpu_check.main(
        [
            "--device",
            "cpu",
            "--budget-minutes",
            "0.1",
            "--measure-seconds",
            "0.3",
            "--fit-seconds",
            "0.5",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    text = out.read_text()
    search = re.search(r"\*\*The search\*\*: (\d+) trials .*?stages reached: ([^;]+);", text, re.S)
    assert search, text
    assert int(search.group(1)) >= 1, text
    assert "fit's loop" in text
    assert "device window" in text  # the time by part
    # Every JAX trial that ran its step has its peak predicted before its first step; each row
    # is named by its own trial number, once.
    rows = re.findall(r"^\| (\d+) \| `([^`]+)` \| ok \| ([\d,]+) \| ([\d,]+|-) \|", text, re.M)
    assert rows, text
    assert all(predicted != "-" for *_, predicted in rows), text
    numbers = re.findall(r"^\| (\d+) \| `", text, re.M)
    assert len(numbers) == len(set(numbers)) == int(search.group(1)), text
    # The pick and its ladder neighbours, each with its plain fits' median, as many fits as
    # the search's runs of it over the same epochs, beside the median of those runs.
    fits = re.findall(
        r"^\| `([^`]+)` \| ([\d,]+) \| (\d+) x (\d+) \| ([\d,]+|not measured) \| ([^|]+) \|",
        text,
        re.M,
    )
    assert len(fits) >= 2, text
    pick = re.search(r"recommended `([^`]+)`", text)
    assert pick
    assert fits[0][0] == pick.group(1)
    for label, _, count, epochs, trial, named in fits:
        runs = {n: float(rate.replace(",", "")) for n, lab, rate, _ in rows if lab == label}
        assert int(count) == max(1, len(runs)), (label, count, runs)
        assert int(epochs) >= 1
        if not runs:
            assert (trial, named.strip()) == ("not measured", "-")
            continue
        assert named.strip() == ", ".join(f"#{n}" for n in runs)
        # The runs' median, from the table's rounded figures (within their rounding).
        assert abs(float(trial.replace(",", "")) - statistics.median(runs.values())) <= 1.0
    torch = r"\*\*A PyTorch trial\*\*: (`[^`]+ torch`: [\d,]+ samples/s|PyTorch is not)"
    assert re.search(torch, text), text
