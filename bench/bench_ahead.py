"""Each policy's first worker started ahead, side by side, against each started when its trial
comes (as before ``WorkerPool.start_ahead``).

Interleaved rounds on one machine, each a fresh session of ``tune`` on the same model with the
default space and settings, stopped after every policy's first trial (``max_trials`` = the
number of policies: the baseline and the policies stage, the part of a search that starts
workers); for each way, the median of: the wall time from the call to the recommendation, the
time before the first trial, and the share of the wall time that is measured steps. The rest
of a search runs in warm workers either way (bench_search.py splits a whole search's time).

    python bench/bench_ahead.py [--model builtin:mlp] [--rounds 5] [--write]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from pathlib import Path
from typing import Any

from tuner.hardware import detect
from tuner.search.events import TrialStarted
from tuner.search.request import TuneRequest
from tuner.search.session import TuningSession
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.tune import hardware_prior, tune
from tuner.trials.runner import WorkerPool

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import machine_line, write_section

WAYS = ("started ahead", "started in turn")


@contextmanager
def starting(way: str) -> Iterator[None]:
    """``started in turn``: the pool ignores the search's request to start workers ahead."""
    original = WorkerPool.start_ahead
    if way == "started in turn":
        WorkerPool.start_ahead = lambda self, specs, cancel=None, timeout_s=0.0: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        WorkerPool.start_ahead = original  # type: ignore[method-assign]


def one_search(model: str, device: str, storage: str, study: str, profile: Any) -> dict[str, float]:
    first: list[float] = []

    def on_event(event: object) -> None:
        if isinstance(event, TrialStarted) and not first:
            first.append(time.monotonic())

    t0 = time.monotonic()
    policies = hardware_prior(profile)
    result = tune(
        TuneRequest(
            model,
            space=SearchSpace(policies=policies),
            settings=SearchSettings(device=device, max_trials=len(policies)),
            storage=storage,
            study=study,
            profile=profile,
        ),
        on_event=on_event,
    )
    wall = time.monotonic() - t0
    trials = [t.result for t in TuningSession.load(study, storage).trials() if t.result]
    measured = sum(r.timings.measure_s or 0.0 for r in trials)
    return {
        "wall": wall,
        "before": (first[0] - t0) if first else 0.0,
        "measured": measured / wall,
        "trials": float(result.ran),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="builtin:mlp")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="update docs/benchmarks.md")
    args = parser.parse_args()

    profile = detect()
    runs: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as tmp:
        storage = f"sqlite:///{Path(tmp) / 'ahead.db'}"
        for r in range(args.rounds):
            for way in WAYS if r % 2 == 0 else WAYS[::-1]:
                with starting(way):
                    run = one_search(args.model, args.device, storage, f"{way}-{r}", profile)
                runs[way].append(run)
                print(
                    f"round {r + 1}/{args.rounds} {way}: {run['wall']:.1f} s, first trial after "
                    f"{run['before']:.1f} s, {run['measured']:.0%} measured, "
                    f"{run['trials']:.0f} trials",
                    flush=True,
                )

    def med(way: str, name: str) -> float:
        return statistics.median(run[name] for run in runs[way])

    rows = "\n".join(
        f"| {way} | {med(way, 'wall'):.1f} s | {med(way, 'before'):.1f} s "
        f"| {med(way, 'measured'):.0%} | {med(way, 'trials'):.0f} |"
        for way in WAYS
    )
    ratio = med(WAYS[0], "wall") / med(WAYS[1], "wall")
    each = "; ".join(
        f"{way}: " + ", ".join(f"{run['wall']:.1f}" for run in runs[way]) for way in WAYS
    )
    text = f"""## Workers started ahead, on `{args.model}`

`python bench/bench_ahead.py --model {args.model} --rounds {args.rounds} --write` on
{date.today()}: {machine_line()}; trials on `{args.device}`. The start of a default search
(`mptune tune`'s space and settings, stopped after each policy's first trial: the baseline and
the policies stage, where every trial needs a fresh worker), {args.rounds} interleaved rounds
of each way, fresh sessions; medians.

| first workers | wall time | before the first trial | measured (share of wall) | trials |
|---|---:|---:|---:|---:|
{rows}

Wall time started ahead / started in turn: {ratio:.2f} (each run, seconds: {each}). The rest of
a search runs in warm workers either way; "Search against an exhaustive grid" splits a whole
search's time.
"""
    print("\n" + text)
    if args.write:
        write_section("ahead", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
