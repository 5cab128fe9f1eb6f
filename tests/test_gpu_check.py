"""bench/gpu_check.py (issue 50's GPU check in one command) end to end on the CPU
(``--device cpu``, ``builtin:mlp``), as CI has no GPU: the search with its stages, parts and
predicted peaks, the plain fits of its pick and neighbours, a PyTorch trial, and the section it
writes."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from tests_support import run_python

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_the_gpu_check_runs_end_to_end_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "section.md"
    monkeypatch.setattr(sys, "path", list(sys.path))  # the bench puts its folder first
    # In this process (its search's and its PyTorch trial's workers fork from the suite's
    # servers): the command line's parsing is the same function, given these arguments.
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "bench" / "gpu_check.py")
    assert spec
    assert spec.loader
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
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
    # Every JAX trial that ran its step has its peak predicted before its first step.
    rows = re.findall(r"^\| \d+ \| `([^`]+)` \| ok \| [\d,]+ \| ([\d,]+|-) \|", text, re.M)
    assert rows, text
    assert all(predicted != "-" for _, predicted in rows), text
    # The pick and its ladder neighbours, each with a plain fit's figure.
    fits = re.findall(r"^\| `([^`]+)` \| ([\d,]+) \| ", text, re.M)
    assert len(fits) >= 2, text
    pick = re.search(r"recommended `([^`]+)`", text)
    assert pick
    assert fits[0][0] == pick.group(1)
    torch = r"\*\*A PyTorch trial\*\*: (`[^`]+ torch`: [\d,]+ samples/s|PyTorch is not)"
    assert re.search(torch, text), text
