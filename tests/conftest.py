"""Shared test setup: Qt offscreen, and no test may leave a thread or child process behind."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import pytest

# Where the environment asks Python to write no bytecode (PYTHONDONTWRITEBYTECODE=1, as on this
# project's machines), every process the suite starts (a trial worker, an mptune CLI, an exported
# script) compiles mptune's modules again (0.15 s each), and every pytest process rewrites the
# test modules' assertions again (6 s): the suite writes them, into __pycache__ (ignored by git).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# Before anything can import Qt: tests never need a display.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# Tests must not see a developer's scripted GPUs by accident.
os.environ.pop("MPTUNE_FAKE_NVML", None)
# Trial workers start through the suite's launcher (tests/launchers/forkserver/: forked from a
# fork server that did the framework's imports once), in this process and in every mptune the
# tests run: the variable names it (tuner/trials/launcher.py, the seam) and tests/launchers/ on
# PYTHONPATH lets them import it. A test marked ``product_launcher`` runs with the product's own
# (spawn). tests/launchers/ alone, not tests/: a process started elsewhere would find
# tests/tuner/ (tests, no __init__.py) as a namespace package named tuner before mptune's own.
_LAUNCHERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launchers")
if _LAUNCHERS not in sys.path:
    sys.path.insert(0, _LAUNCHERS)
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (_LAUNCHERS, os.environ.get("PYTHONPATH")) if p
)
os.environ["MPTUNE_LAUNCHER"] = "forkserver:launcher"
# The suite's fault switches (tests/launchers/faults.py) are a test's to set, never inherited.
import faults  # noqa: E402

for _switch in (faults.FAULT_ENV, faults.PROCESS_PEAK_ENV):
    os.environ.pop(_switch, None)
# Workers' compilation caches in one folder for this run, never the user's cache.
_COMPILE_CACHE = tempfile.mkdtemp(prefix="mptune-test-compile-")
os.environ["MPTUNE_COMPILE_CACHE"] = _COMPILE_CACHE
atexit.register(shutil.rmtree, _COMPILE_CACHE, ignore_errors=True)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--launcher",
        choices=("forkserver", "product"),
        default="forkserver",
        help="how trial workers start: the suite's fork server (the default) or, for every "
        "test, the product's launcher (spawn), as a user's trials start",
    )


#: A test that judges time (a rate against another, a stop within seconds, a time budget, a
#: heartbeat's grace, the machine's load) is marked ``@pytest.mark.serial("why, in one line")``
#: and runs in the serial pass, alone on the machine: the README's test command runs every other
#: test two at a time (pytest-xdist), and a timed test beside them would measure the other
#: test's load (an input-bound check failed so). Nothing else is serial: a whole file or folder
#: is never marked, so the serial pass stays as short as what it judges.
@pytest.hookimpl(trylast=True)  # after pytest-xdist's own, which names the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # In an xdist worker under --dist loadgroup, a test of an xdist_group carries its group in
    # its id, or the group is split across the workers (pytest 9 with pytest-xdist 3.8 did so,
    # silently: each worker made the module's fixture again).
    if getattr(config.option, "loadgroup", False):
        split = [
            item.nodeid
            for item in items
            if item.get_closest_marker("xdist_group") and "@" not in item.nodeid.rsplit("]", 1)[-1]
        ]
        if split:
            raise pytest.UsageError(
                "pytest-xdist cannot group these tests with this pytest (pin pytest below 9): "
                + ", ".join(split[:3])
            )
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _quick_tests_last(items)
    unexplained = [
        item.nodeid
        for item in items
        for mark in item.iter_markers("serial")
        if not (mark.args and isinstance(mark.args[0], str) and mark.args[0].strip())
    ]
    if unexplained:
        raise pytest.UsageError(
            'a serial test says why it judges time: @pytest.mark.serial("why") on '
            + ", ".join(sorted(set(unexplained)))
        )


#: How many of the last quick tests (not ``slow``) the parallel pass runs after every other test.
QUICK_TAIL = 150


def _quick_tests_last(items: list[pytest.Item]) -> None:
    """The parallel pass in collection order, but its last :data:`QUICK_TAIL` quick tests
    (about 20 s of the pass, under a second each) moved to its end: a real trial of 10-40 s
    running last on one worker left the other idle for it (the collection ends in
    test_warm.py's real workers). Every worker sorts alike, as pytest-xdist requires; the
    slow tests keep their places among the quick ones (all of them first made the pass
    slower: real trials side by side leave their waits unfilled)."""
    quick = [item for item in items if item.get_closest_marker("slow") is None]
    tail = {id(item) for item in quick[-QUICK_TAIL:]}
    items[:] = [i for i in items if id(i) not in tail] + [i for i in items if id(i) in tail]


@pytest.fixture(autouse=True)
def workers_only_in_slow_tests(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that starts a real trial worker (here, or in an ``mptune`` it runs) without
    the ``slow`` mark: the fast lane (``-m "not slow"``) must start none, or it is not fast."""
    fd, log = tempfile.mkstemp(prefix="mptune-workers-")
    os.close(fd)
    os.environ["MPTUNE_WORKER_LOG"] = log
    try:
        yield
    finally:
        os.environ.pop("MPTUNE_WORKER_LOG", None)
        with open(log, encoding="utf-8") as f:
            started = f.read().split()
        os.unlink(log)
    if started and request.node.get_closest_marker("slow") is None:
        pytest.fail(
            f"started {len(started)} trial worker(s) without @pytest.mark.slow: the fast lane "
            "runs no real trial"
        )


@pytest.fixture(autouse=True)
def worker_launcher(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Trial workers fork from a fork server per environment (tests/launchers/forkserver/,
    plugged in through ``MPTUNE_LAUNCHER``, for the CLIs the tests run too), and in this
    process a worker whose environment was seen before starts one for the next
    (``forkserver.client.EAGER``):
    hundreds of workers skip their imports. Not in a serial test, which judges time: nothing
    may import beside it that a search would not; its servers are started before it, and up
    (:func:`serial_fork_servers`).

    A test marked ``product_launcher`` runs with the product's launcher instead (spawn: a
    fresh ``python -m tuner.worker`` per worker, as every user's trial starts), it and the
    mptune processes it runs: tests/README.md's table says which. ``--launcher=product`` runs
    every test so. Its launcher is named ``faults:launcher``: the product's spawn launcher,
    but a worker with a fault switch set starts ``python -m faults`` instead, which installs
    the fault and then runs ``tuner.worker`` (tests/launchers/faults.py)."""
    from forkserver import client

    product = request.config.getoption("launcher") == "product"
    if product or request.node.get_closest_marker("product_launcher") is not None:
        monkeypatch.setenv("MPTUNE_LAUNCHER", faults.NAME)
        return
    serial = request.node.get_closest_marker("serial") is not None
    monkeypatch.setattr(client, "EAGER", not serial)
    if serial and request.node.get_closest_marker("slow") is not None:
        request.getfixturevalue("serial_fork_servers")


#: The backends whose CPU workers the serial pass forks (its tests run all three).
SERIAL_BACKENDS = ("tensorflow", "jax", "torch")


@pytest.fixture(scope="session")
def serial_fork_servers() -> list[Any]:
    """A fork server per backend for the serial pass's CPU trials, started before its first
    slow test and waited for until up, so that no import runs beside a test that judges time
    (a worker whose environment matches none of them starts afresh, as before). They serve
    the whole pass and end with it (``client.close_all`` at exit)."""
    import time

    from forkserver import client

    from tuner.setup import Setup
    from tuner.trials.environment import worker_environment
    from tuner.trials.spec import TrialSpec

    envs = [
        worker_environment(
            TrialSpec(
                model="builtin:mlp:features=8,width=16,depth=1",
                setup=Setup("float32", 8, backend=backend),
                device="cpu",
            ),
        )
        for backend in SERIAL_BACKENDS
    ]
    return [s for s in client.start(envs, time.monotonic() + 120.0) if s.is_up()]


@pytest.fixture(autouse=True)
def no_leftovers() -> Iterator[None]:
    """Fail a test that leaves a thread or a child process running."""
    threads_before = set(threading.enumerate())
    yield
    from tests_support import running_children

    children = running_children()
    threads = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    for child in children:  # clean up so that one failure does not cascade
        child.kill()
    assert not children, f"test left child processes running: {children}"
    assert not threads, f"test left threads running: {[t.name for t in threads]}"


# Test helper modules (tests/tuner/tests_support.py) import by name.
import sys  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "tuner"))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """A throw-away PostgreSQL server for this test run (tests/tuner/postgres_server.py); the
    tests that ask for it are skipped, with the reason, where none can be started."""
    from postgres_server import start

    server = start()
    if isinstance(server, str):
        pytest.skip(f"no PostgreSQL server for this test: {server}")
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: Any) -> str:
    """The URL of :func:`postgres_server`."""
    return str(postgres_server.url)
