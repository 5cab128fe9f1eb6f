"""Sessions in PostgreSQL, end to end, against a real server started for the test run
(``postgres_url`` in tests/conftest.py; skipped, saying why, where none can be started)."""

from __future__ import annotations

import json
import re
import sys
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from test_faults import cli
from test_search_strategy import FakeProfile, Machine, tune_with

from tuner.errors import MptuneError
from tuner.search.lease import Lease, SessionBusy
from tuner.search.request import TuneRequest
from tuner.search.session import TuningSession, list_sessions
from tuner.search.space import SearchSettings
from tuner.search.storage import open_storage
from tuner.search.tune import tune

ROOT = Path(__file__).resolve().parents[2]
SPEEDS = {"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300}
TINY_MLP = "builtin:mlp:features=8,width=16,depth=1"


def scripted(machine: Machine, url: str, study: str, **kwargs):
    kwargs.setdefault("model", "builtin:mlp")
    return tune_with(storage=url, study=study, runner=machine, profile=FakeProfile(), **kwargs)


def test_a_session_in_postgresql_is_searched_resumed_listed_shown_and_exported(
    postgres_url: str, tmp_path: Path
) -> None:
    first = Machine(speed=SPEEDS, interrupt_at=4)
    with pytest.raises(KeyboardInterrupt):
        scripted(first, postgres_url, "pg-session", settings=SearchSettings(max_trials=8))
    # Resumed: the finished trials are recalled from the server, none runs twice.
    second = Machine(speed=SPEEDS)
    result = scripted(second, postgres_url, "pg-session", model=None, resume=True)
    assert result.recalled == 3
    assert result.ran == len(second.calls)
    assert not {s.setup for s in first.calls[:3]} & {s.setup for s in second.calls}
    stored = TuningSession.load("pg-session", postgres_url).trials()
    assert [t.number for t in stored] == list(range(len(stored)))
    assert [t.state for t in stored].count("FAIL") == 1  # the trial the interrupt stopped

    listed = cli("sessions", "--storage", postgres_url, "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = [s for s in json.loads(listed.stdout) if s["name"] == "pg-session"]
    assert row["recommendation"] == result.recommendation.setup.label
    shown = cli("show", "pg-session", "--storage", postgres_url, "--json")
    assert shown.returncode == 0, shown.stderr
    assert len(json.loads(shown.stdout)["trials"]) == len(stored)
    out = tmp_path / "tuned.json"
    exported = cli("export", "pg-session", "--storage", postgres_url, "-o", str(out))
    assert exported.returncode == 0, exported.stderr
    config = json.loads(out.read_text())
    assert config["setup"]["policy"] == result.recommendation.setup.policy.name


def test_the_lease_admits_one_search_across_connections(postgres_url: str) -> None:
    first = Lease(open_storage(postgres_url), "pg-lease")
    second = Lease(open_storage(postgres_url), "pg-lease")
    first.acquire()
    with pytest.raises(SessionBusy, match="already being searched"):
        second.acquire()
    first.release()
    second.acquire()
    assert second.held
    second.release()
    assert "pg-lease" not in [s.name for s in list_sessions(postgres_url)]


@pytest.mark.slow
def test_real_trials_store_their_results_in_postgresql(postgres_url: str) -> None:
    proc = cli(
        "tune", "--model", TINY_MLP, "--storage", postgres_url, "--study", "pg-real",
        "--max-trials", "2", "--device", "cpu", "--json", "--measure-seconds", "0.3",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    trials = TuningSession.load("pg-real", postgres_url).trials()
    assert len(trials) == 2
    assert all(t.result is not None and t.result.ok for t in trials)
    assert all(t.result.timings.measure_s for t in trials if t.result)
    assert "pw-for-tests-only" not in proc.stdout + proc.stderr


def test_a_wrong_password_is_one_line_naming_the_server_not_the_password(
    postgres_url: str,
) -> None:
    parts = urlsplit(postgres_url)
    wrong = postgres_url.replace(f":{parts.password}@", ":not-the-password@")
    proc = cli("sessions", "--storage", wrong)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "not-the-password" not in line
    assert f"127.0.0.1:{parts.port}" in line
    assert "password authentication failed" in line


def test_an_unreachable_server_is_one_line_naming_it(postgres_url: str) -> None:
    import socket

    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = cli("sessions", "--storage", f"postgresql://u:secret@127.0.0.1:{port}/db")
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert f"127.0.0.1:{port}" in line
    assert "secret" not in line


def test_two_kinds_of_machine_share_a_store_with_one_recommendation_each(
    postgres_url: str,
) -> None:
    kinds = {"pg-epyc": "AMD EPYC", "pg-xeon": "Intel Xeon"}
    speeds = {"pg-epyc": SPEEDS, "pg-xeon": {**SPEEDS, "mixed_bfloat16": 1500}}
    for study, cpu in kinds.items():
        tune(
            TuneRequest(
                "builtin:mlp", storage=postgres_url, study=study, profile=FakeProfile(cpu_model=cpu)
            ),
            runner=Machine(speed=speeds[study]),
        )
    # The same session name from the other kind of machine is refused, saying why.
    with pytest.raises(MptuneError, match=r"measured on CPU AMD EPYC .* Intel Xeon"):
        tune(
            TuneRequest(
                storage=postgres_url, study="pg-epyc", profile=FakeProfile(cpu_model="Intel Xeon")
            ),
            runner=Machine(speed=SPEEDS),
        )
    listed = cli("sessions", "--storage", postgres_url, "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {s["name"]: s for s in json.loads(listed.stdout) if s["name"] in kinds}
    assert {rows[n]["hardware"] for n in kinds} == {"CPU AMD EPYC (avx2)", "CPU Intel Xeon (avx2)"}
    assert rows["pg-epyc"]["recommendation"].startswith("float32")
    assert rows["pg-xeon"]["recommendation"].startswith("mixed_bfloat16")
    assert rows["pg-xeon"]["speedup"] > 1.2
    table = cli("sessions", "--storage", postgres_url)
    assert "Intel Xeon" in table.stdout
    assert "AMD EPYC" in table.stdout
    shown = cli("show", "pg-xeon", "--storage", postgres_url)
    assert "measured on CPU Intel Xeon (avx2)" in shown.stdout.splitlines()[0]


def test_without_the_driver_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No server needed: the driver is missing before any connection is tried.
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(MptuneError, match=r"pip install 'mptune\[postgres\]'") as info:
        open_storage("postgresql://u:secret@127.0.0.1:1/db")
    assert "secret" not in str(info.value)


class OutageMachine(Machine):
    """A scripted machine whose ``at``-th trial takes the database server down as it ends, and
    brings it back ``after`` seconds later (never, for None)."""

    def __init__(self, server: Any, at: int, after: float | None) -> None:
        super().__init__(speed=SPEEDS)
        self.server, self.at, self.after = server, at, after
        self.timer: threading.Timer | None = None

    def __call__(self, spec, on_event=None, *, cancel=None, source=None):
        result = super().__call__(spec, on_event, cancel=cancel, source=source)
        if len(self.calls) == self.at:
            self.server.down()
            if self.after is not None:
                self.timer = threading.Timer(self.after, self.server.up)
                self.timer.start()
        return result


def test_a_server_back_within_the_retries_loses_nothing(postgres_server: Any) -> None:
    url = postgres_server.url
    machine = OutageMachine(postgres_server, at=3, after=2.0)
    try:
        result = scripted(machine, url, "pg-blip")
    finally:
        if machine.timer is not None:
            machine.timer.join()
    stored = TuningSession.load("pg-blip", url).trials()
    assert result.ran == len(machine.calls) == len(stored)
    assert all(t.state == "COMPLETE" for t in stored)


def test_a_server_gone_for_good_stops_the_search_with_finished_trials_kept(
    postgres_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tuner.search import session as session_module

    monkeypatch.setattr(session_module, "STORAGE_RETRY_S", (0.2, 0.2))
    url = postgres_server.url
    machine = OutageMachine(postgres_server, at=3, after=None)
    try:
        with pytest.raises(MptuneError, match=r"session storage .*127\.0\.0\.1") as info:
            scripted(machine, url, "pg-gone")
    finally:
        postgres_server.up()
    assert "pw-for-tests-only" not in str(info.value)
    # The driver's own reason after the server it names ("Connection refused", or "server closed
    # the connection unexpectedly" when the server is caught going down), on one line.
    port = urlsplit(url).port
    assert re.search(rf'at "127\.0\.0\.1", port {port} failed: \w', str(info.value))
    assert len(str(info.value).splitlines()) == 1
    stored = TuningSession.load("pg-gone", url).trials()
    # The two trials finished before the outage are kept; the third's result never reached the
    # store (its trial is failed by the next search of the session, as after a crash).
    assert [t.state for t in stored] == ["COMPLETE", "COMPLETE"]
