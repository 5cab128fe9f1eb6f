"""The warm worker (:class:`tuner.trials.runner.WorkerPool`): trials that differ only in batch
size share one worker, train exactly as a fresh worker would, and lose no isolation."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from tuner.setup import Setup
from tuner.trials import runner
from tuner.trials.models import parse_model_spec
from tuner.trials.result import TrialStatus
from tuner.trials.runner import WorkerPool, run_trial, warm_key
from tuner.trials.spec import TrialSpec

ROOT = Path(__file__).resolve().parents[2]
TINY_MLP = "builtin:mlp:features=16,width=32,depth=1"


def spec(batch_size: int, model: str = TINY_MLP, **kwargs: object) -> TrialSpec:
    values: dict[str, object] = {
        "steps": 6,
        "warmup_steps": 2,
        "device": "cpu",
        "timeout_s": 120.0,
        "probe": False,
    }
    values.update(kwargs)
    policy = str(values.pop("policy", "float32"))
    return TrialSpec(model=model, setup=Setup(policy, batch_size), **values)  # type: ignore[arg-type]


def gone(pid: int, timeout: float) -> bool:
    try:
        psutil.Process(pid).wait(timeout)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return False
    return True


def test_the_warm_key_is_everything_but_the_batch_size() -> None:
    source = parse_model_spec(TINY_MLP)
    assert warm_key(spec(16), source) == warm_key(spec(64), source)
    assert warm_key(spec(16), source) != warm_key(spec(16, policy="mixed_bfloat16"), source)
    assert warm_key(spec(16), source) != warm_key(spec(16, seed=1), source)
    # A trial that runs the numerics probe always gets a fresh worker.
    assert warm_key(spec(16, policy="mixed_bfloat16", probe=True), source) is None


@pytest.mark.slow
def test_a_warm_trial_trains_exactly_as_a_fresh_worker_would() -> None:
    with WorkerPool() as pool:
        first = pool.run(spec(16))
        warm = pool.run(spec(32))
        again = pool.run(spec(16))
        pid = pool._worker.proc.pid if pool._worker else None
        assert (pool.started, pool.reused) == (1, 2)
    assert pid is not None and gone(pid, 30), "closing the pool leaves no worker"
    assert not runner._LIVE
    cold = run_trial(spec(32))
    assert first.ok and warm.ok and again.ok and cold.ok
    # The same seed and data from the same starting weights: the same losses, step by step.
    assert warm.losses == pytest.approx(cold.losses, rel=1e-6)
    assert again.losses == pytest.approx(first.losses, rel=1e-6)
    # No interpreter start, no TensorFlow import: the warm trial starts at once.
    assert warm.timings.startup_s is not None and first.timings.startup_s is not None
    assert warm.timings.startup_s < first.timings.startup_s / 10
    assert warm.peak_memory_mb and warm.memory_kind == "cpu_rss"


@pytest.mark.slow
def test_a_failed_trial_ends_the_warm_worker_and_the_next_starts_fresh(tmp_path: Path) -> None:
    model = tmp_path / "fails_at_32.py"
    model.write_text(
        textwrap.dedent(
            """
            import keras
            import tensorflow as tf


            class FailsAt32(keras.layers.Layer):
                def call(self, x):
                    tf.debugging.assert_none_equal(tf.shape(x)[0], 32, message="no 32s here")
                    return x


            def build_model():
                inputs = keras.Input((8,))
                outputs = keras.layers.Dense(1)(FailsAt32()(inputs))
                return keras.Model(inputs, outputs)
            """
        )
    )
    with WorkerPool() as pool:
        assert pool.run(spec(16, model=str(model))).ok
        first_pid = pool._worker.proc.pid if pool._worker else None
        failed = pool.run(spec(32, model=str(model)))
        assert failed.status is TrialStatus.USER_ERROR and "no 32s here" in failed.error.message
        assert pool._worker is None and first_pid is not None and gone(first_pid, 30)
        assert pool.run(spec(16, model=str(model))).ok
        assert (pool.started, pool.reused) == (2, 1)


@pytest.mark.slow
def test_a_warm_worker_dies_with_its_parent(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import json, sys, time
        from tuner.trials.runner import WorkerPool
        from tuner.trials.spec import TrialSpec
        from tuner.setup import Setup
        pool = WorkerPool()
        result = pool.run(TrialSpec(model={TINY_MLP!r}, setup=Setup("float32", 16), steps=2,
                                    warmup_steps=1, device="cpu", probe=False))
        print(json.dumps({{"ok": result.ok, "pid": pool._worker.proc.pid}}), flush=True)
        sys.stdin.read()  # idle, its worker warm, until killed
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert parent.stdout is not None
        line = json.loads(parent.stdout.readline())
        assert line["ok"]
        assert psutil.Process(line["pid"]).is_running()
        parent.send_signal(signal.SIGKILL)
        parent.wait(60)
        assert gone(line["pid"], 30), "a warm worker outlived its parent"
    finally:
        parent.kill()
        parent.wait()
