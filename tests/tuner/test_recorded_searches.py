"""Recorded searches, replayed: the search asks for the same trials in the same order, says the
same things and recommends the same setup as when the search was recorded.

Two kinds of recording, each checked against a golden file in tests/tuner/data/searches/:

* real searches of ``builtin:cnn`` and ``builtin:mlp`` (with XLA), recorded trial by trial on a
  CPU by bench/record_search.py and replayed here without a worker (:class:`Replay` fails at
  the first trial the search asks for that the recorded search did not run);
* scripted machines (the fakes of test_search_strategy) whose searches reach what a CPU's do
  not: out-of-memory errors, float16's loss-scale stage, knobs that pay, a numerics guard that
  rejects, a crashed trial run again.

The golden is the search's whole event stream (stages and their words, trials, plan, the
recommendation) and the recommendation's evidence rows as the faces show them. A change that
means to alter the search's behaviour regenerates them on purpose:

    MPTUNE_WRITE_GOLDENS=1 pytest tests/tuner/test_recorded_searches.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_figures import check_figures
from test_search_strategy import FakeGpu, FakeProfile, Machine, tune_with

from tuner.hardware.profile import HardwareProfile
from tuner.knobs import KNOBS
from tuner.search.events import SearchEvent, WorkerReported
from tuner.search.recommend import evidence_rows
from tuner.search.request import TuneRequest
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.tune import TuneResult, tune
from tuner.trials.hazards import Hazard
from tuner.trials.replay import Recording, Replay
from tuner.trials.result import TrialStatus

DATA = Path(__file__).parent / "data" / "searches"
WRITE = os.environ.get("MPTUNE_WRITE_GOLDENS") == "1"

REAL = ["cnn", "mlp-xla"]


def _search(
    tmp_path: Path, model: str, runner: Any, profile: Any, **kwargs: Any
) -> tuple[list[dict[str, Any]], TuneResult]:
    events: list[SearchEvent] = []
    storage = f"sqlite:///{tmp_path / 'replay.db'}"
    result = tune_with(
        model=model,
        storage=storage,
        study="replay",
        runner=runner,
        profile=profile,
        on_event=events.append,
        clock=lambda: 0.0,  # the plan's priced seconds would be this machine's, not the search's
        **kwargs,
    )
    # Every figure the recommendation, its alternatives, the export and `show` state is the
    # median of its setup's runs, and every ratio names what it is against.
    check_figures(result, storage)
    # The worker's own messages come from the runner, not the search.
    return [e.to_dict() for e in events if not isinstance(e, WorkerReported)], result


def _check_golden(name: str, events: list[dict[str, Any]], result: TuneResult) -> None:
    seen = {
        "events": events,
        "evidence": [list(row) for row in evidence_rows(result.recommendation)],
    }
    path = DATA / f"{name}.golden.json"
    if WRITE:
        path.write_text(json.dumps(seen, indent=1, sort_keys=True) + "\n")
    assert path.exists(), f"no golden for {name}: run with MPTUNE_WRITE_GOLDENS=1 to write it"
    golden = json.loads(path.read_text())
    seen = json.loads(json.dumps(seen))  # tuples as lists, as stored
    for i, (want, got) in enumerate(zip(golden["events"], seen["events"], strict=False)):
        assert got == want, f"{name}: event {i} differs"
    assert len(seen["events"]) == len(golden["events"]), f"{name}: another number of events"
    assert seen["evidence"] == golden["evidence"], f"{name}: the evidence rows differ"


@pytest.mark.parametrize("name", REAL)
def test_a_recorded_real_search_replays_trial_for_trial(name: str, tmp_path: Path) -> None:
    recording = Recording.load(DATA / f"{name}.json")
    replay = Replay(recording)
    events, result = _search(
        tmp_path,
        recording.model,
        replay,
        HardwareProfile.from_dict(recording.profile),
        space=SearchSpace.from_dict(recording.space),
        settings=SearchSettings.from_dict(recording.settings),
    )
    assert len(replay.asked) == len(recording.trials), "the search stopped early"
    # The same recommendation, word for word; a knob added since the recording (its evidence
    # row says why it was not tried) is the one row the recording cannot have.
    got, recorded = result.recommendation.to_dict(), recording.recommendation
    known = {row["knob"] for row in recorded.get("knobs", [])}
    got["knobs"] = [row for row in got.get("knobs", []) if row["knob"] in known]
    newer = {k.label for k in KNOBS if k.evidence not in known}  # nor its "not tried" line
    got["not_tried"] = [row for row in got.get("not_tried", []) if row["what"] not in newer]
    assert got == recorded
    _check_golden(name, events, result)


def _scripted() -> dict[str, tuple[Machine, Any, dict[str, Any]]]:
    gpu = FakeProfile(gpus=(FakeGpu(),))
    return {
        "cpu-like": (
            Machine(speed={"float32": 1000, "mixed_bfloat16": 700, "mixed_float16": 300}),
            FakeProfile(),
            {},
        ),
        "gpu-like": (
            Machine(
                speed={"float32": 1000, "mixed_bfloat16": 1800, "mixed_float16": 2000},
                knee=4096,
                oom_at={"float32": 512, "mixed_float16": 1024, "mixed_bfloat16": 1024},
            ),
            gpu,
            {"settings": SearchSettings(device="gpu:0")},
        ),
        "knobs": (
            Machine(
                speed={"float32": 1000, "mixed_bfloat16": 1500, "mixed_float16": 1600},
                knee=1024,
                xla_factor=1.3,
                spe_factor={4: 1.1, 16: 1.15},
                tf32_factor=1.4,
            ),
            gpu,
            {
                "settings": SearchSettings(device="gpu:0"),
                "space": SearchSpace(switches={"xla": "on"}),
            },
        ),
        "cpu-knobs": (
            Machine(
                speed={"float32": 40000, "mixed_bfloat16": 36000, "mixed_float16": 2000},
                knee=512,
                xla_factor=1.1,
                spe_factor={4: 1.2, 16: 1.25},
            ),
            FakeProfile(),
            {"space": SearchSpace(switches={"xla": "on"})},
        ),
        "guard-rejects": (
            Machine(
                speed={"float32": 1000, "mixed_bfloat16": 900, "mixed_float16": 2000},
                loss_offset={"mixed_float16": 0.5},
            ),
            FakeProfile(),
            {"settings": SearchSettings(loss_tolerance=0.05)},
        ),
        "unsafe-and-crash": (
            Machine(
                speed={"float32": 1000, "mixed_bfloat16": 1400, "mixed_float16": 1500},
                unsafe={
                    "mixed_float16": Hazard(
                        "overflow",
                        "mixed_float16",
                        "layer 'dense' (Dense)",
                        "activations reach 1e6, past float16's 65,504",
                        "keep the layer in float32",
                        severity="unsafe",
                    )
                },
                script={("mixed_bfloat16", 128): [TrialStatus.CRASHED]},
            ),
            FakeProfile(),
            {},
        ),
    }


@pytest.mark.parametrize("name", list(_scripted()))
def test_a_scripted_search_says_and_picks_what_it_did(name: str, tmp_path: Path) -> None:
    machine, profile, kwargs = _scripted()[name]
    events, result = _search(tmp_path, "builtin:cnn", machine, profile, **kwargs)
    _check_golden(f"scripted-{name}", events, result)


def test_a_resumed_scripted_search_says_and_picks_what_it_did(tmp_path: Path) -> None:
    """Stopped at its ninth trial and continued: the stored trials are recalled (the search's
    standing decisions leave out late stages), the rest run."""
    machine = Machine(
        speed={"float32": 1000, "mixed_bfloat16": 1800, "mixed_float16": 2000},
        knee=2048,
        oom_at={"float32": 1024, "mixed_float16": 2048, "mixed_bfloat16": 2048},
        interrupt_at=9,
    )
    gpu = FakeProfile(gpus=(FakeGpu(),))
    settings = SearchSettings(device="gpu:0")
    with pytest.raises(KeyboardInterrupt):
        _search(tmp_path, "builtin:cnn", machine, gpu, settings=settings)
    machine.interrupt_at = None
    events: list[SearchEvent] = []
    result = tune(
        TuneRequest(
            None,
            storage=f"sqlite:///{tmp_path / 'replay.db'}",
            study="replay",
            resume=True,
            profile=gpu,
        ),
        runner=machine,
        on_event=events.append,
        clock=lambda: 0.0,
    )
    seen = [e.to_dict() for e in events if not isinstance(e, WorkerReported)]
    check_figures(result, f"sqlite:///{tmp_path / 'replay.db'}")
    _check_golden("scripted-resumed", seen, result)
