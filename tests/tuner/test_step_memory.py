"""A trial's steps keep no garbage between them (issue 25, item 1): on PyTorch every step
leaves reference cycles (Keras' torch tree functions), which a worker that kept automatic
collection off while stepping never freed, so a trial's memory grew with its step count. A
collection after 40 steps must find no more than one after 10, on every backend."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_backends import BACKENDS

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("step_garbage.py")


@pytest.mark.parametrize("backend", BACKENDS)
def test_steps_leave_no_garbage_that_grows_with_their_count(backend: str) -> None:
    """float32 and mixed_float16 (its loss-scaled step) one after the other in one process per
    backend (a process each before: the same counts, half the interpreter starts)."""
    env = {
        **os.environ,
        "KERAS_BACKEND": backend,
        "CUDA_VISIBLE_DEVICES": "",
        "JAX_PLATFORMS": "cpu",
    }
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).parents[2],
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    by_policy = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sorted(by_policy) == ["float32", "mixed_float16"]
    for found in by_policy.values():
        # What a step leaves is collected as the steps run (or there is none): what is left
        # after 40 steps is what was made since the last automatic collection, not 40 steps'.
        assert found["after_40"] <= max(2 * found["after_10"], 2000), by_policy
        assert not found["enabled"], "the runner left automatic collection on after its phase"
