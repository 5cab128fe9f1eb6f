"""The memory plot's seconds: a session's time, counted from what its trials' records keep.

A live search and the same session opened from History must place every trial at the same
second (the README promises one seconds axis). A reopened session has its trials' records
only, so both count the same parts of a trial (issue 33: reopened, the peaks sat 8-10 s
before where the live run had put them, which counted the wall clock between trials and a
gap at each resume, where the reopened one summed the trials' own seconds):

- a trial starts where the trials before it ended, and lasts its own seconds:
  ``timings.total_s``, from its worker's start (start-up included) to its result, on the same
  clock as the worker's memory samples' ``t``. The time a search spends between trials
  (storage, planning) is in no record, so it is not on the axis either;
- trials that ran at once (``--parallel``) start together, each where the axis had got to when
  it began; reopened, storage's open and close times give that order;
- a trial stopped under a search lasts until it was stopped (the window's clock live, storage's
  open and close times reopened), and the search that resumes after it starts
  :data:`RESUME_GAP_S` later: a gap, not a line from the last run's end.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from tuner import api

#: The gap on the axis between a stopped trial and the resumed search's first trial.
RESUME_GAP_S = 2.0


class SessionClock:
    """Where each trial sits on the memory plot's axis, in seconds of the session.

    Attributes:
        end: where the axis has got to: the end of the trial that ended last.
    """

    def __init__(self) -> None:
        self.end = 0.0
        #: each running trial: its start on the axis, and on the wall (``time.monotonic``)
        self._running: dict[int, tuple[float, float | None]] = {}
        self._gap = False  # a trial was stopped: the next one starts after a gap

    def start(self, number: int, wall: float | None = None) -> float:
        """Trial ``number`` starts (at ``wall``, live); returns its start on the axis."""
        if self._gap:
            self.end += RESUME_GAP_S
            self._gap = False
        self._running[number] = (self.end, wall)
        return self.end

    def at(self, number: int, t: float) -> float | None:
        """Where ``t`` seconds into trial ``number`` sits (None: it is not running)."""
        start = self._running.get(number)
        return None if start is None else start[0] + t

    def at_wall(self, number: int, wall: float) -> float | None:
        """Where the moment ``wall`` (``time.monotonic``) of trial ``number`` sits (None: it is
        not running, or ``wall`` is before its start)."""
        start = self._running.get(number)
        if start is None or start[1] is None or wall < start[1]:
            return None
        return start[0] + wall - start[1]

    def seconds_since_start(self, number: int, wall: float) -> float | None:
        """How long trial ``number`` has run at ``wall``, as the window saw it."""
        start = self._running.get(number)
        return None if start is None or start[1] is None else max(0.0, wall - start[1])

    def finish(self, number: int, seconds: float | None) -> float:
        """Trial ``number`` ended after ``seconds`` (its ``timings.total_s``); returns its end
        on the axis, where its memory peak is marked. A trial not started here (recalled, or
        run elsewhere) starts now."""
        if number not in self._running:
            self.start(number)
        start, _ = self._running.pop(number)
        end = start + max(0.0, seconds or 0.0)
        self.end = max(self.end, end)
        return end

    def stop(self, number: int, seconds: float | None) -> None:
        """Trial ``number`` was stopped under its search after ``seconds``: the next trial
        starts after a gap."""
        self.finish(number, seconds)
        self._gap = True

    @classmethod
    def of_session(cls, trials: Iterable[api.StoredTrial]) -> tuple[SessionClock, dict[int, float]]:
        """A stored session's clock, and each finished trial's end on its axis: its trials
        started and closed in the order storage saw them (by number where it did not say), a
        trial closed without a result as stopped."""
        clock = cls()
        ends: dict[int, float] = {}
        stored = list(trials)
        # (when, 0 for a close and 1 for a start, the trial): at one instant a close comes
        # first, the trial that ended having freed the slot the next one took.
        steps: list[tuple[datetime | None, int, api.StoredTrial]] = []
        if all(t.started is not None and t.closed is not None for t in stored):
            steps = [(t.started, 1, t) for t in stored] + [(t.closed, 0, t) for t in stored]
            steps.sort(key=lambda s: (s[0], s[1], s[2].number))
        else:
            for t in sorted(stored, key=lambda t: t.number):
                steps += [(None, 1, t), (None, 0, t)]
        for _when, is_start, trial in steps:
            if is_start:
                clock.start(trial.number)
            elif trial.result is not None:
                ends[trial.number] = clock.finish(trial.number, trial.result.timings.total_s)
            else:
                seconds = (
                    (trial.closed - trial.started).total_seconds()
                    if trial.started is not None and trial.closed is not None
                    else None
                )
                clock.stop(trial.number, seconds)
        return clock, ends
