"""The warm worker (:class:`tuner.trials.runner.WorkerPool`): trials that differ only in batch
size share one worker, train exactly as a fresh worker would, and lose no isolation."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psutil
import pytest

from tuner.setup import Setup
from tuner.trials import process, runner
from tuner.trials.messages import StartedMessage, WorkerMessage
from tuner.trials.models import parse_model_spec
from tuner.trials.result import TrialStatus
from tuner.trials.runner import WorkerPool, run_trial, warm_key
from tuner.trials.spec import TrialSpec

ROOT = Path(__file__).resolve().parents[2]
TINY_MLP = "builtin:mlp:features=16,width=32,depth=1"
KNOBS = (
    "loss_scale",
    "xla",
    "steps_per_execution",
    "gradient_accumulation_steps",
    "tf32",
    "backend",
)


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
    knobs = {k: values.pop(k) for k in KNOBS if k in values}
    return TrialSpec(model=model, setup=Setup(policy, batch_size, **knobs), **values)  # type: ignore[arg-type]


def gone(pid: int, timeout: float) -> bool:
    """Whether process ``pid`` ends within ``timeout``, as the runner sees it: a child of this
    process once it can be waited for (not reaped: the runner reads its status), which is
    later than its main thread reads as a zombie (a worker killed in its imports, its other
    threads in a disk read, stayed unwaitable a while after: the runner then took it for a
    live one); a forked worker, the fork server's child, once it is a zombie (its keeper
    reaps it once the runner has read its status)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
            # Not yet: wait on its pidfd, readable once the whole process has exited (every
            # thread, as waitid needs), without reaping it.
            with contextlib.suppress(ProcessLookupError):
                fd = os.pidfd_open(pid)
                try:
                    select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
                finally:
                    os.close(fd)
        except ChildProcessError:  # not a child of this process: a forked worker
            try:
                proc = psutil.Process(pid)
                if proc.status() == psutil.STATUS_ZOMBIE:
                    return True
                proc.wait(0.1)
                return True
            except psutil.NoSuchProcess:
                return True
            except psutil.TimeoutExpired:
                pass
        if time.monotonic() >= deadline:
            return False


def test_the_warm_key_is_the_model_the_policy_and_how_a_trial_measures() -> None:
    source = parse_model_spec(TINY_MLP)
    key = warm_key(spec(16), source)
    # What compile() sets is the worker's to change: it compiles again.
    assert key == warm_key(spec(64), source)
    assert key == warm_key(spec(16, xla=True, steps_per_execution=4), source)
    assert key == warm_key(spec(16, gradient_accumulation_steps=2, loss_scale="fixed:128"), source)
    # What is fixed when the model is built, or process-wide, is not.
    assert key != warm_key(spec(16, policy="mixed_bfloat16"), source)
    assert key != warm_key(spec(16, tf32=True), source)
    assert key != warm_key(spec(16, seed=1), source)
    assert key != warm_key(spec(16, steps=7), source)
    assert key != warm_key(spec(16, model="builtin:mlp:features=16,width=16,depth=1"), source)
    # The probe setting matters only where the probe runs (a float32 trial never probes).
    assert key == warm_key(spec(16, probe=True), source)
    # How long a trial measures before it may be pruned is the trial's, not the worker's: a
    # search changes it with its leader, and every mixed trial then started a fresh worker
    # (bench_search on a Xeon: 23% of the search's wall time in start-up).
    bf16 = warm_key(spec(16, policy="mixed_bfloat16"), source)
    assert bf16 == warm_key(spec(64, policy="mixed_bfloat16", prune_below=12_345.0), source)
    # A trial that runs the numerics probe always gets a fresh worker.
    assert warm_key(spec(16, policy="mixed_bfloat16", probe=True), source) is None


@pytest.mark.slow
@pytest.mark.product_launcher  # the start a warm one skips is the whole: a fresh process's
def test_a_warm_trial_trains_exactly_as_a_fresh_worker_would() -> None:
    with WorkerPool() as pool:
        first = pool.run(spec(16))
        warm = pool.run(spec(32))
        again = pool.run(spec(16))
        [pid] = pool.idle_pids
        assert (pool.started, pool.reused) == (1, 2)
    assert gone(pid, 30), "closing the pool leaves no worker"
    assert not process.LIVE
    cold = run_trial(spec(32))
    assert first.ok
    assert warm.ok
    assert again.ok
    assert cold.ok
    # The same seed and data from the same starting weights: the same losses, step by step.
    assert warm.losses == pytest.approx(cold.losses, rel=1e-6)
    assert again.losses == pytest.approx(first.losses, rel=1e-6)
    # No interpreter start, no TensorFlow import (its start-up may hold the last trial's
    # clean-up when that lands after the parent sent the next trial).
    assert warm.timings.startup_s is not None
    assert first.timings.startup_s is not None
    assert warm.timings.startup_s < first.timings.startup_s / 4
    assert warm.peak_memory_mb
    assert warm.memory_kind == "cpu_rss"


class FakeWorker:
    def __init__(self, on_cpu: bool) -> None:
        self.on_cpu = on_cpu
        self.holds_arena = False
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_workers_wait_side_by_side_and_a_gpu_arena_alone() -> None:
    pool = WorkerPool(max_idle=2)
    a, b, c = FakeWorker(True), FakeWorker(True), FakeWorker(True)
    pool._idle = {"a": a, "b": b}  # type: ignore[dict-item]
    pool._trim()
    assert not a.closed
    assert not b.closed
    pool._idle["c"] = c  # type: ignore[assignment]
    pool._trim()
    assert a.closed
    assert not b.closed
    assert not c.closed  # the longest-waiting one goes
    # A GPU worker waits beside others (each backend's peak is its own process's)...
    gpu = FakeWorker(False)
    pool._idle["gpu"] = gpu  # type: ignore[assignment]
    pool._trim()
    assert b.closed
    assert not c.closed
    assert not gpu.closed
    # ... but one that holds a fixed arena of the card (a memory limit) waits alone.
    arena = FakeWorker(False)
    arena.holds_arena = True
    pool._idle["arena"] = arena  # type: ignore[assignment]
    pool._trim()
    assert c.closed
    assert gpu.closed
    assert not arena.closed
    pool.close()
    assert arena.closed
    assert not pool._idle


@pytest.mark.slow
def test_a_search_going_from_policy_to_policy_and_back_finds_its_workers_warm() -> None:
    with WorkerPool() as pool:
        assert pool.run(spec(16)).ok
        assert pool.run(spec(16, policy="mixed_bfloat16")).ok
        assert len(pool.idle_pids) == 2
        back = pool.run(spec(32))
        assert pool.run(spec(32, policy="mixed_bfloat16")).ok
        assert (pool.started, pool.reused) == (2, 2)
        pids = pool.idle_pids
    assert back.ok
    assert back.timings.startup_s is not None
    assert back.timings.startup_s < 1.0
    assert all(gone(pid, 30) for pid in pids)


@pytest.mark.slow
@pytest.mark.product_launcher  # the cold worker starts afresh, as above
def test_a_warm_worker_compiles_again_for_other_knobs_and_trains_as_a_fresh_one() -> None:
    knobs = {"xla": True, "steps_per_execution": 2, "gradient_accumulation_steps": 2}
    with WorkerPool() as pool:
        first = pool.run(spec(16, steps=8))
        changed = pool.run(spec(32, steps=8, **knobs))
        back = pool.run(spec(16, steps=8))
        assert (pool.started, pool.reused) == (1, 2)
    cold = run_trial(spec(32, steps=8, **knobs))
    assert first.ok, first.error
    assert changed.ok, changed.error
    assert back.ok, back.error
    assert cold.ok, cold.error
    assert changed.spec.setup == cold.spec.setup
    assert changed.spec.setup.xla
    # A new optimizer from the starting weights: the fresh worker's losses, step by step (one
    # loss per call of 2 steps), and back at the first setup the first trial's again.
    assert changed.losses == pytest.approx(cold.losses, rel=1e-5)
    assert back.losses == pytest.approx(first.losses, rel=1e-6)
    assert changed.timings.startup_s is not None
    assert cold.timings.startup_s is not None
    assert changed.timings.startup_s < cold.timings.startup_s / 4


@pytest.mark.slow
def test_a_warm_worker_changes_the_loss_scaling_under_mixed_float16() -> None:
    # Dynamic scaling wraps the optimizer (its own variables); a fixed scale does not.
    with WorkerPool() as pool:
        dynamic = pool.run(spec(16, policy="mixed_float16", loss_scale="dynamic"))
        fixed = pool.run(spec(16, policy="mixed_float16", loss_scale="fixed:1024"))
        assert (pool.started, pool.reused) == (1, 1)
    cold = run_trial(spec(16, policy="mixed_float16", loss_scale="fixed:1024"))
    assert dynamic.ok
    assert fixed.ok
    assert cold.ok
    assert set(dynamic.loss_scales) == {32768.0}
    assert set(fixed.loss_scales) == set(cold.loss_scales) == {1024.0}
    assert fixed.losses == pytest.approx(cold.losses, rel=1e-5)


@pytest.mark.slow
def test_a_probe_trial_starts_fresh_and_its_worker_stays_for_the_policy() -> None:
    with WorkerPool() as pool:
        probed = pool.run(spec(16, policy="mixed_bfloat16", probe=True))
        later = pool.run(spec(32, policy="mixed_bfloat16"))
        assert pool.run(spec(16, policy="mixed_bfloat16", probe=True)).ok
        # The probe needs the model before compile(): a second probe trial starts fresh.
        assert (pool.started, pool.reused) == (2, 1)
    cold = run_trial(spec(32, policy="mixed_bfloat16"))
    assert probed.ok
    assert probed.timings.probe_s
    assert later.ok
    assert cold.ok
    assert later.timings.probe_s is None
    # The probe runs the model forward only: the later trial starts from the built weights.
    assert later.losses == pytest.approx(cold.losses, rel=1e-6)


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
        [first_pid] = pool.idle_pids
        failed = pool.run(spec(32, model=str(model)))
        assert failed.status is TrialStatus.USER_ERROR
        assert "no 32s here" in failed.error.message
        assert not pool.idle_pids
        assert gone(first_pid, 30)
        assert pool.run(spec(16, model=str(model))).ok
        assert (pool.started, pool.reused) == (2, 1)


def pid_of(result_events: list[WorkerMessage]) -> int:
    return int(next(e.pid or 0 for e in result_events if isinstance(e, StartedMessage)))


@pytest.mark.slow
@pytest.mark.product_launcher  # started afresh, ahead or not: the start is compared
def test_workers_started_ahead_run_their_trials_as_fresh_ones_would() -> None:
    # Starting ahead is the pool's, the same whatever the worker imports: on JAX, whose four
    # fresh workers here start in a third of TensorFlow's time.
    plain = spec(16, backend="jax")
    mixed = spec(16, policy="mixed_bfloat16", probe=True, backend="jax")
    with WorkerPool() as pool:
        pool.start_ahead([plain, mixed])
        ahead = pool.idle_pids
        assert len(ahead) == 2
        assert all(psutil.Process(p).is_running() for p in ahead)
        events: list[WorkerMessage] = []
        first = pool.run(plain, events.append)
        assert pid_of(events) in ahead
        events.clear()
        probed = pool.run(mixed, events.append)
        assert pid_of(events) in ahead
        # Both ran in workers started ahead: none started since, and both stay warm.
        assert (pool.started, pool.reused) == (2, 0)
        assert sorted(pool.idle_pids) == sorted(ahead)
    assert all(gone(pid, 30) for pid in ahead)
    cold, cold_mixed = run_trial(plain), run_trial(mixed)
    assert first.ok
    assert probed.ok
    assert cold.ok
    assert cold_mixed.ok
    assert first.losses == pytest.approx(cold.losses, rel=1e-6)
    assert probed.losses == pytest.approx(cold_mixed.losses, rel=1e-6)
    assert probed.numerics
    assert probed.numerics.keys() == cold_mixed.numerics.keys()
    # The interpreter and JAX were started before the trial began.
    assert first.timings.startup_s is not None
    assert cold.timings.startup_s is not None
    assert first.timings.startup_s < cold.timings.startup_s / 4


@pytest.mark.slow
@pytest.mark.product_launcher  # started ahead as a user's search starts them
def test_a_worker_started_ahead_that_died_is_replaced_and_a_cancel_ends_them_all() -> None:
    # Processes started, killed and cancelled: the same whatever they import, so on JAX (its
    # workers start fastest).
    with WorkerPool() as pool:
        pool.start_ahead([spec(16, backend="jax"), spec(16, backend="jax")])
        dead, spare = pool.idle_pids
        os.kill(dead, signal.SIGKILL)
        assert gone(dead, 30)
        events: list[WorkerMessage] = []
        assert pool.run(spec(16, backend="jax"), events.append).ok
        assert pid_of(events) == spare, "the live one started ahead ran the trial"
        cancel = threading.Event()
        cancel.set()
        with pytest.raises(runner.TrialCancelled):
            pool.start_ahead([spec(16, policy="mixed_bfloat16", backend="jax")] * 2, cancel)
        assert pool.idle_pids == [spare]
    assert gone(spare, 30)
    assert not process.LIVE


@pytest.mark.slow
@pytest.mark.parametrize(
    "launcher", [pytest.param("spawn", marks=pytest.mark.product_launcher), "forkserver"]
)
def test_a_warm_worker_dies_with_its_parent(tmp_path: Path, launcher: str) -> None:
    # A process's lifeline, the same whatever the worker imports: on JAX, which starts fastest.
    # Through the product's launcher (its workers are the parent's children) and the suite's
    # (forked from a fork server, which ends with the parent too).
    script = textwrap.dedent(
        f"""
        import json, sys, time
        from tuner.trials.runner import WorkerPool
        from tuner.trials.spec import TrialSpec
        from tuner.setup import Setup
        pool = WorkerPool()
        spec = TrialSpec(model={TINY_MLP!r}, setup=Setup("float32", 16, backend="jax"), steps=2,
                         warmup_steps=1, device="cpu", probe=False)
        result = pool.run(spec)
        pool.start_ahead([spec, spec])
        servers = []
        if {launcher == "forkserver"!r}:
            from forkserver.client import server_pids
            servers = server_pids()
        line = {{"ok": result.ok, "pids": pool.idle_pids, "servers": servers}}
        print(json.dumps(line), flush=True)
        sys.stdin.read()  # idle, its worker warm, until killed
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "launchers")]),
        },
    )
    try:
        assert parent.stdout is not None
        line = json.loads(parent.stdout.readline())
        assert line["ok"]
        assert len(line["pids"]) == 3  # two started ahead, one warm
        assert all(psutil.Process(pid).is_running() for pid in line["pids"])
        # Forked: the two started ahead forked from the search's fork server, which ends with
        # it too. Spawned: all three are the parent's children.
        assert len(line["servers"]) == (1 if launcher == "forkserver" else 0)
        children = {c.pid for c in psutil.Process(parent.pid).children()}
        assert (set(line["pids"]) <= children) is (launcher == "spawn")
        parent.send_signal(signal.SIGKILL)
        parent.wait(60)
        assert all(gone(pid, 30) for pid in line["pids"]), "a worker outlived its parent"
        assert all(gone(pid, 30) for pid in line["servers"]), "a fork server outlived its parent"
    finally:
        parent.kill()
        parent.wait()


def test_an_out_of_memory_error_beside_waiting_gpu_workers_is_run_again_alone() -> None:
    """Another worker waiting on the GPU holds what its allocator took: an out-of-memory error
    then may be theirs, so the trial runs again once they are ended. One refused by its own
    predicted memory (the limit it was measured against is its process's) is not."""
    from tuner.trials.result import MemoryPrediction, TrialResult

    def result(status: TrialStatus, prediction: MemoryPrediction | None = None) -> TrialResult:
        return TrialResult(spec=spec(16), status=status, memory_prediction=prediction)

    for first, runs in (
        (result(TrialStatus.OOM), 2),
        (result(TrialStatus.OOM, MemoryPrediction(peak_mb=900.0, limit_mb=800.0)), 1),
    ):
        pool = WorkerPool()
        waiting = FakeWorker(False)
        pool._idle = {"other": waiting}  # type: ignore[dict-item]
        answers = [first, result(TrialStatus.OK)]
        calls: list[object] = []

        def run_in(
            *args: object, answers: list[TrialResult] = answers, calls: list[object] = calls
        ) -> TrialResult:
            calls.append(args[2])  # the worker it was given (None: a fresh one)
            return answers.pop(0)

        pool._run_in = run_in  # type: ignore[method-assign]
        got = pool.run(spec(16))
        assert len(calls) == runs
        if runs == 2:
            assert waiting.closed
            assert got.ok
            assert calls[1] is None
            assert "ran again" in got.warnings[-1]
        else:
            assert not waiting.closed
            assert got.predicted_oom
        pool._idle.clear()
