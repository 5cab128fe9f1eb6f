"""The window's trial counts, from one place: the progress bar, the status line and the table
read them here, so that they agree at every moment (live, after Stop, after Resume, after
opening a past session)."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.api import minutes

#: What the progress bar says once no search runs, by how the last one ended.
_ENDED = {
    "done": "{trials}, finished",
    "stopped": "{trials}, stopped",
    "failed": "{trials}, failed",
}


def trials(n: int) -> str:
    """``1 trial``, ``21 trials``."""
    return f"{n} trial{'' if n == 1 else 's'}"


@dataclass
class TrialCounts:
    """Counts of one session's trials as the window shows them.

    Attributes:
        finished: trials with a row in the table: run now, recalled from the session, or
            stopped before they finished.
        running: trials running now.
        left: the engine's estimate of the trials not closed yet, running ones included
            (``PlanUpdated.planned - done``); None before the engine made a plan.
        state: ``idle`` (nothing shown), ``searching``, or how the shown session (live, or
            opened from History) ended: ``done``, ``stopped``, ``failed``.
        seconds_per_trial: what the engine's plan priced each trial left at (its seconds
            over its trials left, within the time budget); None before it priced one.
    """

    finished: int = 0
    running: int = 0
    left: int | None = None
    state: str = "idle"
    seconds_per_trial: float | None = None

    def planned(self, done: int, planned: int, seconds: float | None) -> None:
        """The engine's plan (:class:`tuner.api.PlanUpdated`): trials and their time left."""
        self.left = max(0, planned - done)
        self.seconds_per_trial = seconds / self.left if seconds and self.left else None

    @property
    def seconds_left(self) -> float | None:
        """The plan's time for the trials still left (one fewer with each trial that ends)."""
        if self.seconds_per_trial is None or not self.left:
            return None
        return self.left * self.seconds_per_trial

    @property
    def total(self) -> int:
        """The trials the search will have: those finished, and what is left, never fewer
        than the ones running now (the engine's estimate can fall short of them)."""
        if self.state != "searching":
            return self.finished
        return self.finished + max(self.running, self.left or 0)

    @property
    def busy(self) -> bool:
        """A search that has no count to show yet (starting, before its first plan)."""
        return self.state == "searching" and self.left is None and not self.finished

    def bar_format(self) -> str:
        """The progress bar's text (Qt's ``%v``/``%m`` placeholders where they apply)."""
        if self.state == "idle":
            return "no trials yet"
        if self.state == "searching":
            running = f", {self.running} running" if self.running > 1 else ""
            seconds = self.seconds_left
            # Under a second is no time worth saying (a scripted search's trials).
            left = f", ~{minutes(seconds)} left" if seconds and seconds >= 1 else ""
            return f"%v / %m trials{running}{left}"
        return _ENDED[self.state].format(trials=trials(self.finished))
