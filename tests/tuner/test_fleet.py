"""``mptune worker``: processes that join a running search through its PostgreSQL store
(``postgres_url`` in tests/conftest.py; skipped, saying why, where no server can start)."""

from __future__ import annotations

import collections
import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest
from test_faults import cli
from test_search_strategy import FakeProfile, Machine

from tuner.errors import MptuneError
from tuner.search.fleet import work
from tuner.search.request import JoinRequest, TuneRequest
from tuner.search.session import TuningSession
from tuner.search.tune import tune
from tuner.trials.result import TrialResult
from tuner.trials.spec import TrialSpec

ROOT = Path(__file__).resolve().parents[2]
SPEEDS = {"float32": 1000, "mixed_bfloat16": 1300, "mixed_float16": 1200}
TINY_MLP = "builtin:mlp:features=8,width=16,depth=1"


def measured(url: str, study: str) -> collections.Counter[Any]:
    trials = TuningSession.load(study, url).trials()
    return collections.Counter(t.result.spec.setup for t in trials if t.result and t.result.ok)


def test_a_worker_takes_trials_from_a_running_search_and_none_is_run_twice(
    postgres_url: str, tmp_path: Path
) -> None:
    """In one process for a scripted search: the search's first trial starts a worker; the
    search's own slot then waits (on its second trial) until the worker has run one of the
    trials the strategy handed out. Together they measure what a search alone measures."""
    alone = tune(
        TuneRequest(
            "builtin:mlp",
            storage=f"sqlite:///{tmp_path / 'alone.db'}",
            study="alone",
            profile=FakeProfile(),
        ),
        runner=Machine(speed=SPEEDS),
    )
    remote, local = Machine(speed=SPEEDS), Machine(speed=SPEEDS)
    worked = threading.Event()
    done: list[Any] = []

    def worker_runner(spec: TrialSpec, *args: Any, **kwargs: Any) -> TrialResult:
        result = remote(spec, *args, **kwargs)
        worked.set()
        return result

    def join() -> None:
        done.append(
            work(JoinRequest("fleet-1", postgres_url, profile=FakeProfile()), runner=worker_runner)
        )

    worker = threading.Thread(target=join)

    def search_runner(spec: TrialSpec, *args: Any, **kwargs: Any) -> TrialResult:
        if not local.calls:
            worker.start()  # the session exists and its search holds the lease
        elif len(local.calls) == 1:
            assert worked.wait(30), "the worker took no trial"
        return local(spec, *args, **kwargs)

    result = tune(
        TuneRequest(
            "builtin:mlp",
            storage=postgres_url,
            study="fleet-1",
            profile=FakeProfile(),
            workers=True,
        ),
        runner=search_runner,
    )
    worker.join(timeout=30)
    assert not worker.is_alive()
    assert done
    assert done[0].reason == "its search ended"
    assert remote.calls
    assert local.calls
    assert len(done[0].ran) == len(remote.calls)
    assert measured(postgres_url, "fleet-1") == measured(
        f"sqlite:///{tmp_path / 'alone.db'}", "alone"
    )
    assert result.recommendation.setup == alone.recommendation.setup
    session = TuningSession.load("fleet-1", postgres_url)
    assert not session._running()
    assert not session.waiting()


def test_workers_need_a_database_server(tmp_path: Path) -> None:
    with pytest.raises(MptuneError, match="SQLite is not safe for several processes"):
        work(JoinRequest("s", f"sqlite:///{tmp_path / 's.db'}"))
    with pytest.raises(MptuneError, match="SQLite is not safe"):
        tune(
            TuneRequest("builtin:mlp", storage=None, profile=FakeProfile(), workers=True),
            runner=Machine(speed=SPEEDS),
        )
    proc = cli("worker", "--storage", f"sqlite:///{tmp_path / 's.db'}", "--study", "s")
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1


def test_a_worker_for_a_missing_session_or_another_machine_is_refused(
    postgres_url: str,
) -> None:
    with pytest.raises(MptuneError, match="no session named 'nowhere'"):
        work(JoinRequest("nowhere", postgres_url, profile=FakeProfile()))
    tune(
        TuneRequest("builtin:mlp", storage=postgres_url, study="fleet-kind", profile=FakeProfile()),
        runner=Machine(speed=SPEEDS),
    )
    other = FakeProfile(cpu_model="Another CPU")
    with pytest.raises(MptuneError, match="measured on"):
        work(JoinRequest("fleet-kind", postgres_url, profile=other))


def test_a_worker_whose_copy_of_the_model_file_differs_is_refused(
    postgres_url: str, tmp_path: Path
) -> None:
    """Each machine of a fleet runs its own copy of the model file: one that is not the
    session's would put another model's trials in it."""
    model = tmp_path / "net.py"
    model.write_text("def build_model():\n    return None\n")
    tune(
        TuneRequest(str(model), storage=postgres_url, study="fleet-file", profile=FakeProfile()),
        runner=Machine(speed=SPEEDS),
    )
    model.write_text("def build_model():\n    return None  # this machine's own edit\n")
    with pytest.raises(MptuneError, match="is not the file session 'fleet-file' measures"):
        work(
            JoinRequest("fleet-file", postgres_url, profile=FakeProfile()),
            runner=Machine(speed=SPEEDS),
        )


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    """``proc``'s stderr, line by line, read on a thread (None at its end), so that waiting
    for a line never blocks the pipe of another process."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def _first(lines: queue.Queue[str | None], pattern: str, what: str) -> re.Match[str]:
    """The first line matching ``pattern``; fails when the stream ends first."""
    while (line := lines.get(timeout=300)) is not None:
        found = re.search(pattern, line)
        if found:
            return found
    raise AssertionError(f"{what}: the process ended first")


@pytest.mark.slow
def test_two_worker_processes_and_a_killed_one_lose_no_trial_and_run_none_twice(
    postgres_url: str,
) -> None:
    """Real processes, real trials: a search with --workers, two mptune worker processes; one
    is killed (SIGKILL) while it runs a trial. Its heartbeat stops, the search closes that
    trial as crashed after the grace period and runs it again; the search ends with every
    trial run by exactly one process, and nothing of the killed worker is left."""
    # A heartbeat a second and 12 s of grace: beside the other tests (two at a time on two
    # cores) a live worker's heartbeat thread is never that late, where a grace of 4 s was
    # judged only alone (the serial pass) for fear of it.
    env = {**os.environ, "MPTUNE_HEARTBEAT_S": "1", "MPTUNE_GRACE_S": "12"}
    tune_cmd = [
        sys.executable,
        "-m",
        "tuner",
        "tune",
        "--workers",
        "--storage",
        postgres_url,
        "--study",
        "fleet-real",
        "--model",
        TINY_MLP,
        # JAX: the fleet is the same on every backend, and JAX's processes start fastest (each
        # of the three here starts its fork server: TensorFlow's import is 2.4 s of CPU).
        "--backend",
        "jax",
        "--device",
        "cpu",
        "--batch-sizes",
        "16,32,64",
        "--measure-seconds",
        "0.3",
        "--max-trials",
        "9",
        "--json",
    ]
    search = subprocess.Popen(
        tune_cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    procs = [search]
    try:
        # Its first finished trial: the session exists and the search holds it.
        search_lines = _lines(search)
        _first(search_lines, r"^trial #0 ", "the search's first trial")
        worker_cmd = [
            sys.executable,
            "-m",
            "tuner",
            "--verbose",
            "worker",
            "--storage",
            postgres_url,
            "--study",
            "fleet-real",
        ]

        def start_worker() -> subprocess.Popen[str]:
            proc = subprocess.Popen(
                worker_cmd,
                cwd=ROOT,
                env=env,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            procs.append(proc)
            return proc

        # The doomed worker first, and the kept one once it holds a trial: started together,
        # the kept worker and the search could take every trial before the doomed one took any
        # (seen in CI: "the doomed worker's trial: the process ended first").
        doomed = start_worker()
        took = _first(_lines(doomed), r"took trial #(\d+)", "the doomed worker's trial")
        kept = start_worker()
        _lines(kept)  # read, so that its pipe never fills
        killed_number = int(took.group(1))
        children = psutil.Process(doomed.pid).children(recursive=True)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(timeout=30)
        assert search.wait(timeout=400) == 0, "".join(iter(search_lines.get, None))
        assert kept.wait(timeout=60) == 0
        assert kept.stdout is not None
        assert "its search ended" in kept.stdout.read()
        for child in children:  # the killed worker's trial process ends with it
            with contextlib.suppress(psutil.NoSuchProcess):
                child.wait(timeout=30)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)
    trials = TuningSession.load("fleet-real", postgres_url).study.get_trials(deepcopy=False)
    by_number = {t.number: t for t in trials}
    killed = by_number[killed_number]
    assert killed.state.name == "FAIL"
    assert "sent no heartbeat" in str(killed.user_attrs.get("result", {}).get("error"))

    def measured(spec: dict[str, object]) -> dict[str, object]:
        # What is measured; how early a losing run may stop follows the leader of the moment.
        return {k: v for k, v in spec.items() if k != "prune_below"}

    setup = measured(killed.user_attrs["spec"])
    again = [
        t for t in trials if t.number > killed_number and measured(t.user_attrs["spec"]) == setup
    ]
    assert any(t.state.name == "COMPLETE" for t in again), "the killed trial was not run again"
    # Every trial was run by one process: the search's, the kept worker's or (before it was
    # killed) the doomed one's; none is left waiting or running.
    runners = {t.user_attrs.get("pid") for t in trials if t.state.name == "COMPLETE"}
    assert runners <= {search.pid, kept.pid, doomed.pid}
    assert not [t for t in trials if t.state.name in ("WAITING", "RUNNING")]
