"""Record a real search, trial by trial, for the replay tests (test_recorded_searches.py).

Runs ``tune`` on this machine with real trials (warm workers, as the command line runs them),
records every trial's spec and result in the order the search asked for it and the
recommendation it ended with, and writes them as JSON. Replaying the file runs the search
again on those results without a worker: a change to the search that keeps its behaviour asks
for the same trials and recommends the same setup.

    python bench/record_search.py --model builtin:cnn --out tests/tuner/data/searches/cnn.json
    python bench/record_search.py --model builtin:mlp --xla on --out .../mlp-xla.json
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import tempfile
from datetime import date
from pathlib import Path

from tuner.hardware import detect
from tuner.search.request import TuneRequest
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.tune import hardware_prior, tune
from tuner.trials.replay import Recorder, Recording
from tuner.trials.runner import WorkerPool


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="builtin:cnn")
    parser.add_argument("--xla", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    profile = detect()
    space = SearchSpace(policies=hardware_prior(profile))
    space = dataclasses.replace(space, xla=args.xla)
    settings = SearchSettings(device="cpu")
    with WorkerPool() as pool, tempfile.TemporaryDirectory() as tmp:
        recorder = Recorder(pool.run, pool.start_ahead)
        result = tune(
            TuneRequest(
                args.model,
                space=space,
                settings=settings,
                storage=f"sqlite:///{Path(tmp) / 'record.db'}",
                study="record",
                profile=profile,
            ),
            runner=recorder,
        )
    recording = Recording(
        model=args.model,
        space=space.to_dict(),
        settings=settings.to_dict(),
        profile=profile.to_dict(),
        trials=recorder.trials,
        recommendation=result.recommendation.to_dict(),
        note=(
            f"recorded {date.today()} on {profile.cpu.model or platform.machine()} with "
            f"bench/record_search.py --model {args.model} --xla {args.xla}"
        ),
    )
    recording.save(args.out)
    print(
        f"{len(recorder.trials)} trials, recommended {result.recommendation.setup.label}: "
        f"{args.out}"
    )


if __name__ == "__main__":
    main()
