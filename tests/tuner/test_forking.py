"""The suite's launcher (tests/launchers/forkserver/: client.py, server.py), workers forked from
a fork server: the same trial as a fresh worker's (the product's launcher's), the exit status
and the process group the runner's as for a child of its own, one server per environment, and
every worker started afresh where it cannot fork or the server cannot serve."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import faults
import psutil
import pytest
from forkserver import NAME
from forkserver import client as forking
from forkserver.client import ForkedProcess
from test_warm import spec as warm_spec

from tuner.trials import launcher
from tuner.trials.environment import worker_environment
from tuner.trials.launcher import LAUNCHER_ENV, SPAWN, LauncherError, SpawnedWorker
from tuner.trials.process import WorkerProcess, has_exited
from tuner.trials.result import TrialStatus
from tuner.trials.runner import WorkerPool, run_trial
from tuner.trials.spec import TrialSpec


def spec(backend: str, **kwargs: object) -> TrialSpec:
    """test_warm's tiny trial. The fork server is the same program whatever it imports: JAX,
    which imports fastest, unless a test compares environments."""
    return warm_spec(16, backend=backend, **kwargs)


@pytest.fixture(autouse=True)
def fork_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's launcher, whatever ``--launcher`` says: it is what these tests test."""
    monkeypatch.setenv(LAUNCHER_ENV, NAME)


def up_server(env: dict[str, str]) -> forking.ForkServer:
    server = forking.prepare(env)
    assert server is not None, "no fork server was prepared"
    assert server.is_up(timeout=120), "the fork server never came up"
    return server


def test_the_launcher_is_the_products_unless_the_variable_names_one(monkeypatch) -> None:
    monkeypatch.delenv(LAUNCHER_ENV, raising=False)
    assert launcher.current() is SPAWN
    monkeypatch.setenv(LAUNCHER_ENV, NAME)
    assert launcher.current() is forking.LAUNCHER
    for wrong in ("forkserver", "forkserver:nothing_here", "no_such_module:x", "os:sep"):
        monkeypatch.setenv(LAUNCHER_ENV, wrong)
        with pytest.raises(LauncherError, match=f"MPTUNE_LAUNCHER={wrong!r}"):
            launcher.current()


def test_a_launcher_that_is_not_there_is_one_line_and_exit_2() -> None:
    env = {**os.environ, LAUNCHER_ENV: "nowhere:launcher"}
    proc = subprocess.run(
        [sys.executable, "-m", "tuner", "trial", "--model", "builtin:mlp", "--policy",
         "float32", "--batch-size", "8", "--steps", "2", "--backend", "jax", "--no-probe"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "mptune: error: MPTUNE_LAUNCHER='nowhere:launcher' names no launcher "
        "(ModuleNotFoundError: No module named 'nowhere')"
    ]


def test_forking_is_on_for_cpu_workers_on_linux_only() -> None:
    assert forking.mode(worker_environment(spec(backend="jax"))) == "on"
    gpu = worker_environment(spec(backend="jax", device="gpu:0"))
    assert forking.mode(gpu) == "off"  # a GPU: not yet checked on a device


def test_a_server_serves_one_environment_whatever_mptunes_own_variables() -> None:
    env = worker_environment(spec(backend="jax"))
    same = {**env, "MPTUNE_WORKER_LOG": "/elsewhere", "PYTEST_CURRENT_TEST": "another"}
    assert forking.server_key(env) == forking.server_key(same)
    assert forking.server_key(env) != forking.server_key(worker_environment(spec(backend="torch")))
    assert forking.server_key(env) != forking.server_key({**env, "XLA_FLAGS": "--xla_dump_to=x"})


def test_eager_serves_an_environment_from_its_second_worker_on(monkeypatch) -> None:
    """The suite's EAGER: an environment seen once (a test's own variable) starts no server
    that would push a used one out; from its second worker on, one is started for the next."""
    monkeypatch.setattr(forking, "EAGER", True)
    monkeypatch.setattr(forking, "_SEEN", set())
    started: list[str] = []
    monkeypatch.setattr(forking, "prepare", lambda env: started.append(env["ONE_OFF"]))
    env = worker_environment(spec(backend="jax"))
    assert forking.ready({**env, "ONE_OFF": "a"}) is None
    assert started == []
    assert forking.ready({**env, "ONE_OFF": "b"}) is None
    assert started == []
    assert forking.ready({**env, "ONE_OFF": "a"}) is None
    assert started == ["a"]
    monkeypatch.setattr(forking, "EAGER", False)  # a user's process: only searches start them
    assert forking.ready({**env, "ONE_OFF": "a"}) is None
    assert started == ["a"]


@pytest.mark.slow
def test_a_forked_worker_trains_exactly_as_a_fresh_one(monkeypatch) -> None:
    monkeypatch.delenv(LAUNCHER_ENV, raising=False)  # the product's launcher
    fresh = run_trial(spec(backend="jax"))
    monkeypatch.setenv(LAUNCHER_ENV, NAME)
    env = worker_environment(spec(backend="jax"))
    up_server(env)
    started: list[int] = []

    def on_event(message: object) -> None:
        pid = getattr(message, "pid", None)
        if getattr(message, "type", None) == "started" and pid is not None:
            started.append(pid)

    forked = run_trial(spec(backend="jax"), on_event)
    assert fresh.ok, fresh.error
    assert forked.ok, forked.error
    # Forked: the worker's parent is the server's keeper, not this process.
    (pid,) = started
    assert pid not in {c.pid for c in psutil.Process().children()}
    # The same seed, data and starting weights: the same losses, step by step.
    assert forked.losses == pytest.approx(fresh.losses, rel=1e-6)
    assert forked.versions == fresh.versions
    assert forked.device == fresh.device == "cpu"
    assert forked.memory_method
    assert "fork server's shared-library pages" in forked.memory_method


def test_a_worker_given_a_fault_starts_afresh_through_the_faults_entry() -> None:
    """Where no server serves it, a worker starts through the product's spawn launcher: as
    ``python -m tuner.worker`` (the product's own ``SPAWN``), or, with a fault switch set,
    ``python -m faults``, which installs the fault and runs the same entry point."""
    env = worker_environment(spec(backend="jax"))
    assert faults.spawner(env) is SPAWN
    assert faults.spawner({**env, faults.FAULT_ENV: "oom@2"}).module == "faults"
    assert faults.spawner({**env, faults.PROCESS_PEAK_ENV: "1"}).module == "faults"
    assert SPAWN.module == "tuner.worker"
    with pytest.raises(ValueError, match="MPTUNE_TEST_FAULT='oom'"):
        faults.parse("oom")


@pytest.mark.slow
def test_a_forked_worker_takes_its_fault_after_the_fork(monkeypatch) -> None:
    """A worker forked from a server up before the fault was set fails as the fault says."""
    up_server(worker_environment(spec(backend="jax")))
    monkeypatch.setenv(faults.FAULT_ENV, "oom@2")
    started: list[int] = []

    def on_event(message: object) -> None:
        pid = getattr(message, "pid", None)
        if getattr(message, "type", None) == "started" and pid is not None:
            started.append(pid)

    result = run_trial(spec(backend="jax"), on_event)
    (pid,) = started
    assert pid not in {c.pid for c in psutil.Process().children()}  # forked
    assert result.status is TrialStatus.OOM, result.error
    assert result.error is not None
    assert result.error.exception == "JaxRuntimeError"
    assert "injected by MPTUNE_TEST_FAULT at step 2" in result.error.message


@pytest.mark.slow
def test_a_forked_tensorflow_workers_peak_counts_the_shared_libraries(monkeypatch) -> None:
    """A forked worker's own resident memory leaves out the shared libraries' pages it did not
    touch again (0.3-0.4 GB on TensorFlow); its peak adds them back, as a fresh worker holds
    them. (On JAX, whose libraries load more pages at its backend's start, in the worker, the
    sum still reads low: why forking is the suite's launcher, not the product's.)"""
    tf = spec(backend="tensorflow")
    up_server(worker_environment(tf))
    forked = run_trial(tf)
    monkeypatch.delenv(LAUNCHER_ENV, raising=False)  # the product's launcher
    fresh = run_trial(tf)
    assert forked.ok, forked.error
    assert fresh.ok, fresh.error
    assert "fork server" in (forked.memory_method or "")
    assert "fork server" not in (fresh.memory_method or "")
    assert forked.peak_memory_mb == pytest.approx(fresh.peak_memory_mb, rel=0.1)


@pytest.mark.slow
def test_a_forked_workers_exit_status_and_group_are_the_runners() -> None:
    env = worker_environment(spec(backend="jax"))
    up_server(env)
    worker = WorkerProcess(env)
    assert isinstance(worker.proc, ForkedProcess)
    assert not has_exited(worker.proc)
    # Its own process group (as start_new_session gives a fresh one), which the runner kills.
    assert os.getpgid(worker.proc.pid) == worker.proc.pid
    os.killpg(worker.proc.pid, signal.SIGKILL)
    code, _log = worker.close()
    assert code == -signal.SIGKILL
    assert not psutil.pid_exists(worker.proc.pid) or (
        psutil.Process(worker.proc.pid).status() == psutil.STATUS_ZOMBIE
    )
    # A worker that exits by itself: its status as it gave it (a payload that is not JSON).
    worker = WorkerProcess(env)
    assert isinstance(worker.proc, ForkedProcess)
    worker.send({"spec": None})  # not a trial: the worker fails reading it and exits 1
    assert worker.proc.wait() == 1
    worker.close()


@pytest.mark.slow
def test_a_server_that_cannot_serve_leaves_the_worker_to_start_afresh() -> None:
    env = worker_environment(spec(backend="jax"))
    # One whose imports fail never comes up (a worker forked from it would only fail so).
    broken = forking.ForkServer({**env, "KERAS_BACKEND": "no-such-backend"})
    try:
        assert not broken.is_up(timeout=60)
        assert broken.proc.wait(30) == 1
    finally:
        broken.close()
    # One that died: the next worker starts afresh, and its trial runs.
    server = up_server(env)
    server.proc.kill()
    server.proc.wait(30)
    worker = WorkerProcess(env)
    try:
        assert isinstance(worker.proc, SpawnedWorker)  # the product's launcher's
    finally:
        worker.close()
    result = run_trial(spec(backend="jax"))
    assert result.status is TrialStatus.OK, result.error


@pytest.mark.slow
def test_a_pool_ends_the_servers_it_started_and_leaves_anothers(monkeypatch) -> None:
    """A search's pool starts a server for its workers and ends it when it closes; one that was
    up already (another owner's: the serial pass's, another search's) it forks from and leaves
    running."""
    jax_spec, torch_spec = spec(backend="jax"), spec(backend="torch")
    theirs = up_server(worker_environment(jax_spec))
    # None of an earlier test's (client.EAGER) for the pool's own environment: it starts its own.
    monkeypatch.setattr(forking, "EAGER", False)
    earlier = forking.prepare(worker_environment(torch_spec))
    assert earlier is not None
    forking.discard(earlier)
    with WorkerPool() as pool:
        pool.start_ahead([jax_spec, torch_spec])
        mine = forking.ready(worker_environment(torch_spec))
        assert mine is not None
        assert mine is not theirs
        assert mine.is_up()
        forked = [pid for pid in pool.idle_pids if psutil.Process(pid).ppid() != os.getpid()]
        assert len(forked) == 2  # both workers forked, each from its environment's server
    assert mine.proc.poll() is not None  # ended with the pool that started it
    assert theirs.is_up()
    assert theirs.proc.poll() is None
    assert forking.ready(worker_environment(jax_spec)) is theirs
    forking.discard(theirs)
