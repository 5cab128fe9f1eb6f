"""What a search tells its listeners while it runs: frozen event records.

:func:`tuner.api.tune` calls ``on_event`` with one of these at a time, on the search's thread;
the CLI renders them with rich, the window turns them into Qt signals on the GUI thread. They
are frozen so that they can cross a thread safely, and each has a ``to_dict``/:func:`from_dict`
round trip so a search can be recorded as JSON lines and replayed (tests/app/data/).

In order: :class:`SessionOpened`, then :class:`PlanUpdated` and :class:`StageStarted` as the
search moves on, per trial :class:`TrialStarted`, many :class:`WorkerReported` (the worker's own
messages, see :mod:`tuner.trials.messages`) and :class:`TrialFinished` (then
:class:`LeaderChanged` when the setup the search leads with, or its figure, moved), and at the
end :class:`Recommended`.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Union

from tuner.record import added, from_data, to_data
from tuner.search.records import Recommendation
from tuner.setup import Setup
from tuner.trials.messages import WorkerMessage, parse_message
from tuner.trials.result import TrialResult
from tuner.trials.spec import TrialSpec


class _Event:
    """An event's JSON form: its ``type`` and its declared fields (:mod:`tuner.record`)."""

    type: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, **to_data(self)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        return from_data(cls, data)


@dataclass(frozen=True)
class SessionOpened(_Event):
    """The search's session is open (created, or continued when ``resumed``)."""

    type: ClassVar[str] = "session"
    name: str
    model: str
    resumed: bool = False


@dataclass(frozen=True)
class PlanUpdated(_Event):
    """``done`` trials are closed and about ``planned`` in all are expected; the plan left is
    priced at ``seconds`` (the trials left at the search's measured cost per trial, within the
    budget; None before a trial ran) and ``budget_left`` seconds of the time budget remain
    (None: no time budget)."""

    type: ClassVar[str] = "plan"
    done: int
    planned: int
    seconds: float | None = added()
    budget_left: float | None = added()

    def words(self) -> str:
        """The plan as a line: trials left, their expected time, the budget left."""
        left = max(0, self.planned - self.done)
        text = f"about {left} trial{'s' if left != 1 else ''} left"
        if self.seconds:
            text += f", ~{minutes(self.seconds)}"
        if self.budget_left is not None:
            text += f"; {minutes(self.budget_left)} of the time budget left"
        return text


def minutes(seconds: float) -> str:
    """``95`` -> ``1 min 35 s``; under a minute in seconds."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60} min" + (f" {seconds % 60} s" if seconds % 60 else "")


@dataclass(frozen=True)
class StageStarted(_Event):
    """A stage of the search began (baseline, policies, batch, loss-scale, xla,
    steps-per-execution, guard, remeasure). Trials between the ladder's rungs carry the stage
    ``refine``, which starts no stage of its own."""

    type: ClassVar[str] = "stage"
    stage: str
    message: str


@dataclass(frozen=True)
class TrialStarted(_Event):
    """Trial ``number`` is starting its worker."""

    type: ClassVar[str] = "trial_started"
    number: int
    stage: str
    spec: TrialSpec


@dataclass(frozen=True)
class WorkerReported(_Event):
    """A message from trial ``number``'s worker (a :class:`~tuner.trials.messages.StepMessage`,
    a :class:`~tuner.trials.messages.PhaseMessage`, ...) or the parent's
    :class:`~tuner.trials.messages.MemoryMessage` sample of it."""

    type: ClassVar[str] = "worker"
    number: int
    message: WorkerMessage

    # The worker's message is written under "event", and read as the worker's messages are.
    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "number": self.number, "event": self.message.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerReported:
        # The message never raises: one this version cannot read is kept as it came.
        return cls(int(data["number"]), parse_message(data["event"]))


@dataclass(frozen=True)
class TrialFinished(_Event):
    """Trial ``number`` ended with ``result`` (any status)."""

    type: ClassVar[str] = "trial_finished"
    number: int
    stage: str
    result: TrialResult


@dataclass(frozen=True)
class LeaderChanged(_Event):
    """The search now leads with ``setup`` at ``samples_per_second``: the median of its runs
    ``trials`` (one run's figure until it ran again), so that a first run that was an outlier
    stands corrected as soon as the setup is measured again. What a face marks as the best
    so far; at the end the recommendation's setup and figure replace it."""

    type: ClassVar[str] = "leader"
    setup: Setup
    samples_per_second: float
    trials: tuple[int, ...]

    def words(self) -> str:
        """``mixed_bfloat16 b256 none at 6,869 samples/s (median of #8, #15)``."""
        numbers = ", ".join(f"#{n}" for n in self.trials)
        runs = f"median of {numbers}" if len(self.trials) > 1 else f"trial {numbers}"
        return f"{self.setup.label} at {self.samples_per_second:,.0f} samples/s ({runs})"


@dataclass(frozen=True)
class Recommended(_Event):
    """The search ended with this recommendation."""

    type: ClassVar[str] = "recommendation"
    recommendation: Recommendation


SearchEvent = Union[  # noqa: UP007 - a runtime alias: `|` on classes needs Python 3.10+ only,
    # but `from __future__ import annotations` does not cover an assignment
    SessionOpened,
    PlanUpdated,
    StageStarted,
    TrialStarted,
    WorkerReported,
    TrialFinished,
    LeaderChanged,
    Recommended,
]


#: Each event of :data:`SearchEvent` by its ``type``.
EVENTS: dict[str, type[_Event]] = {e.type: e for e in typing.get_args(SearchEvent)}


def from_dict(data: dict[str, Any]) -> SearchEvent:
    """Inverse of the events' ``to_dict``.

    Raises:
        ValueError: an unknown ``type`` or a malformed event.
    """

    kind = data.get("type")
    event = EVENTS.get(kind) if isinstance(kind, str) else None
    if event is None:
        raise ValueError(f"unknown search event type {kind!r}")
    try:
        return event.from_dict(data)  # type: ignore[no-any-return]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed {kind} event: {exc!r}") from None
