"""Searches recorded and replayed: a runner that records every trial a search ran, and one that
hands a search the recorded results again, so that a change to the search can be checked
trial for trial against what it did before, without a worker or TensorFlow.

A :class:`Recording` holds what decides a search (the model, space, settings and hardware
profile), every trial in the order the search asked for it (its spec and result) and the
recommendation it ended with. :class:`Replay` is strict: the n-th trial the search asks for must
be the n-th recorded one, or :class:`ReplayDiverged` says where the two searches part.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuner.record import from_data, to_data
from tuner.trials.messages import WorkerMessage
from tuner.trials.protocol import TrialRunner
from tuner.trials.result import TrialResult
from tuner.trials.spec import TrialSpec


@dataclass(frozen=True)
class RecordedTrial:
    """One trial as the search asked for it and as it ended."""

    spec: TrialSpec
    result: TrialResult

    def to_dict(self) -> dict[str, Any]:
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RecordedTrial:
        return from_data(cls, data)


@dataclass
class Recording:
    """A search: what decided it, its trials in order, and its recommendation."""

    model: str
    space: dict[str, Any]
    settings: dict[str, Any]
    profile: dict[str, Any]
    trials: list[RecordedTrial] = field(default_factory=list)
    recommendation: dict[str, Any] | None = None
    #: where it was recorded, in words (the machine, the date, the command)
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recording:
        """Inverse of :meth:`to_dict`.

        Raises:
            TypeError: the model, space, settings or profile is missing.
        """
        return from_data(cls, data)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> Recording:
        return cls.from_dict(json.loads(Path(path).read_text()))


class Recorder:
    """A runner that runs each trial with ``runner`` and records it in :attr:`trials`, in the
    order the search asked for them (one slot: the search runs one trial at a time)."""

    def __init__(self, runner: TrialRunner, start_ahead: Callable[..., None] | None = None) -> None:
        self.runner = runner
        self.trials: list[RecordedTrial] = []
        self._start_ahead = start_ahead
        self._lock = threading.Lock()

    def __call__(
        self,
        spec: TrialSpec,
        on_event: Callable[[WorkerMessage], None] | None = None,
        *,
        cancel: threading.Event | None = None,
        source: Any = None,
    ) -> TrialResult:
        result = self.runner(spec, on_event, cancel=cancel, source=source)
        with self._lock:
            self.trials.append(RecordedTrial(spec, result))
        return result

    def start_ahead(self, specs: Sequence[TrialSpec], cancel: threading.Event | None) -> None:
        if self._start_ahead is not None:
            self._start_ahead(specs, cancel)


class ReplayDiverged(AssertionError):
    """The search asked for another trial than the recorded search did at that point."""


class Replay:
    """A runner that gives the search the recorded results, in order, and checks that it asks
    for the recorded trials: the n-th call must be the n-th recorded spec."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.asked: list[TrialSpec] = []

    def __call__(
        self,
        spec: TrialSpec,
        on_event: Callable[[WorkerMessage], None] | None = None,
        *,
        cancel: threading.Event | None = None,
        source: Any = None,
    ) -> TrialResult:
        n = len(self.asked)
        self.asked.append(spec)
        trials = self.recording.trials
        if n >= len(trials):
            raise ReplayDiverged(
                f"trial {n + 1} ({spec.setup.label}) was asked for, and the recorded search "
                f"ended after {len(trials)} trials"
            )
        expected = trials[n].spec
        # How long to measure is not what is measured: a pruning threshold, or the seconds
        # the least steps or the warm-up may take, set by a newer search does not part it
        # from the recorded one.
        asked = dataclasses.replace(
            spec,
            prune_below=expected.prune_below,
            min_steps_seconds=expected.min_steps_seconds,
            warmup_seconds=expected.warmup_seconds,
        )
        if expected.to_dict() != asked.to_dict():
            raise ReplayDiverged(
                f"trial {n + 1}: the recorded search ran {expected.setup.label} "
                f"({expected.to_dict()}), this one asks for {spec.setup.label} ({spec.to_dict()})"
            )
        return trials[n].result
