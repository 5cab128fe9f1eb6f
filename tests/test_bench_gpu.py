"""bench/bench_gpu.py end to end on the CPU (``--device cpu``), as CI has no GPU: detect, a
short tune, the FLOP count, an out-of-memory trial, and the section it writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


def test_bench_gpu_runs_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    # In the parallel pass: nothing here judges time. The search's budget of 0.15 minutes cuts
    # what it reaches, but its first trial (a float32 baseline: the row asserted) always runs,
    # a budget never stops a running trial, and the out-of-memory trial and the FLOP count are
    # run after the search whatever it reached.
    out = tmp_path / "section.md"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bench_gpu.py"),
            "--device",
            "cpu",
            "--backends",
            "jax",
            "--models",
            "cnn",
            "--budget-minutes",
            "0.15",
            "--measure-seconds",
            "0.3",
            "--storage",
            str(tmp_path / "s.db"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "launchers")]),
        },
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert "### cnn on jax" in text
    assert "| float32 | `float32 b" in text
    assert "status **oom**" in text  # reached through --memory-limit on the CPU
    assert "FLOP per sample per step" in text
