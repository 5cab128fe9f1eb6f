"""The session store's load per trial: SQL statements and wall time of recording one trial
(Optuna's ask, the spec, the heartbeat, the result, the tell) in SQLite and in PostgreSQL.

Each store gets ``--trials`` trials in turn (interleaved in blocks of ten), each carrying a
real-sized stored result; the figures are the median per trial and the statements per trial
(counted on the SQLAlchemy engine). The PostgreSQL server is a throw-away one on this machine
(tests/tuner/postgres_server.py), so the figures leave out network round trips: docs/scale.md
works the bottleneck out on paper from them.

    python bench/bench_store.py [--trials 100] [--write]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

from sqlalchemy import event

from tuner.search.session import TuningSession
from tuner.setup import Setup
from tuner.trials.result import Timings, TrialResult, TrialStatus
from tuner.trials.spec import TrialSpec

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "tuner"))
from _report import machine_line, write_section
from postgres_server import start


def a_result(number: int) -> TrialResult:
    """A result of the size a real trial stores (about 200 measured steps)."""
    spec = TrialSpec(model="builtin:mlp", setup=Setup("float32", 64 + number), device="cpu")
    return TrialResult(
        spec=spec,
        status=TrialStatus.OK,
        samples_per_second=10_000.0 + number,
        median_samples_per_second=10_000.0,
        step_time_ms={"p50": 6.4, "p90": 7.0, "mean": 6.6},
        peak_memory_mb=600.0,
        memory_kind="cpu_rss",
        losses=tuple(1.0 / (i + 1) for i in range(200)),
        steps_completed=200,
        timings=Timings(startup_s=4.0, build_s=0.3, warmup_s=0.2, measure_s=2.0, total_s=6.6),
        device="cpu",
    )


class Store:
    def __init__(self, name: str, url: str) -> None:
        self.name = name
        self.session = TuningSession.create("bench-store", url, {"model": "builtin:mlp"})
        self.statements = 0
        self.seconds: list[float] = []
        self.counts: list[int] = []
        engine = self.session.storage.engine  # type: ignore[attr-defined]
        event.listen(engine, "before_cursor_execute", self._count)

    def _count(self, *args: object) -> None:
        self.statements += 1

    def record(self, number: int) -> None:
        result = a_result(number)
        before = self.statements
        t0 = time.perf_counter()
        trial = self.session.start_trial(result.spec, "bench")
        self.session.finish_trial(trial, result)
        self.seconds.append(time.perf_counter() - t0)
        self.counts.append(self.statements - before)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()
    server = start()
    if isinstance(server, str):
        print(f"no PostgreSQL server: {server}", file=sys.stderr)
        return 1
    try:
        with tempfile.TemporaryDirectory() as tmp:
            stores = [
                Store("SQLite (a file on this machine's disk)", f"sqlite:///{tmp}/s.db"),
                Store("PostgreSQL 127.0.0.1 (a local server)", server.url),
            ]
            for block in range(0, args.trials, 10):
                for store in stores if block % 20 == 0 else stores[::-1]:
                    for n in range(block, min(block + 10, args.trials)):
                        store.record(n)
            rows = "\n".join(
                f"| {s.name} | {statistics.median(s.seconds) * 1000:.1f} ms "
                f"| {sorted(s.seconds)[int(len(s.seconds) * 0.9)] * 1000:.1f} ms "
                f"| {statistics.median(s.counts):.0f} |"
                for s in stores
            )
            reads = len(stores[1].session.trials())
            t0 = time.perf_counter()
            stores[1].session.trials()
            read_ms = (time.perf_counter() - t0) * 1000
    finally:
        server.stop()
    text = f"""## The session store's load per trial

`python bench/bench_store.py --trials {args.trials} --write` on {date.today()}:
{machine_line()}. Recording one trial (ask, its spec and heartbeat, its stored result of 200
measured steps, tell), {args.trials} trials per store, interleaved in blocks of ten:

| store | per trial, median | per trial, p90 | SQL statements per trial |
|---|---:|---:|---:|
{rows}

Reading a session of {reads} trials back from PostgreSQL (what a resumed search, `mptune show`
and the window's history do): {read_ms:.0f} ms. A search also renews its lease and the running
trial's heartbeat every 10 s (a few statements). docs/scale.md works out from these figures when
the store becomes the bottleneck.
"""
    print(text)
    if args.write:
        write_section("store", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
