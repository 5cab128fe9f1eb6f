"""The test suite's script server (tests/tuner/script_server.py): a program forked from it
runs as ``python`` would run it afresh, with its arguments, folder, environment, output and
exit code; a program past its time is killed, and the server serves the next."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests_support import run_python

pytestmark = pytest.mark.slow

PROGRAM = """
import os, sys
import keras
print("argv", sys.argv[1:], "path0", repr(sys.path[0]), "cwd", os.getcwd())
policy = keras.mixed_precision.global_policy().name
print("env", os.environ.get("MPTUNE_SERVED_TEST"), "policy", policy)
keras.mixed_precision.set_global_policy("mixed_bfloat16")  # the next program must not see it
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("form", ["script", "-c"])
def test_a_served_program_runs_as_a_fresh_interpreter_would(tmp_path: Path, form: str) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM, encoding="utf-8")
    args = [str(script)] if form == "script" else ["-c", PROGRAM]
    env = {"PATH": "/usr/bin:/bin", "MPTUNE_SERVED_TEST": form}
    served = run_python([*args, "3"], tmp_path, env)
    fresh = subprocess.run(
        [sys.executable, *args, "3"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert served.returncode == fresh.returncode == 3
    assert served.stdout == fresh.stdout, (served.stdout, fresh.stdout)
    assert "policy float32" in served.stdout
    assert "to stderr" in served.stderr
    # The next program sees none of the last one's Keras state (its policy).
    again = run_python([*args, "0"], tmp_path, env)
    assert again.returncode == 0
    assert "policy float32" in again.stdout


def test_an_exception_and_a_program_past_its_time(tmp_path: Path) -> None:
    raised = run_python(["-c", "raise ValueError('odd value')"], tmp_path)
    assert raised.returncode == 1
    assert "ValueError: odd value" in raised.stderr
    with pytest.raises(subprocess.TimeoutExpired):
        run_python(["-c", "import signal; signal.pause()"], tmp_path, timeout=1)  # never ends
    after = run_python(["-c", "print('served again')"], tmp_path)
    assert after.returncode == 0
    assert after.stdout == "served again\n"
