"""What a trial's worker tells its parent, as frozen records: one class per message ``type``.

On the wire (:mod:`tuner.trials.events`) a message is a JSON object with a ``type`` field,
written by :meth:`tuner.worker.channel.Channel.emit`. The parent turns each one into a record
here with :func:`parse_message` and hands the records to its listeners (``on_event`` of
:func:`tuner.trials.runner.run_trial`; a search wraps them in
:class:`tuner.search.events.WorkerReported`), so the CLI and the window read attributes, never
keys.

:func:`parse_message` never raises: a field that is missing takes its default, and a ``type``
it does not know (a newer worker) or a message it cannot read (a hazard without its kind)
becomes an :class:`OtherMessage` that keeps the raw dict. Each record's :meth:`to_dict` writes
the wire form back (non-finite floats spelled ``"nan"``/``"inf"`` as the channel spells them),
so a recorded search replays with the same messages.

The types, in the order a worker sends them: :class:`ImportedMessage` (a worker started ahead),
:class:`StartedMessage`, :class:`PhaseMessage`, :class:`HazardMessage`,
:class:`NumericsMessage`, :class:`WarningMessage`, :class:`StepMessage`,
:class:`ResultMessage` or :class:`ErrorMessage`, and :class:`ReadyMessage` (a warm worker
waits for its next trial). The parent adds :class:`MemoryMessage` samples of the worker.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Union, get_args

from tuner.record import from_data, to_data
from tuner.trials.events import as_float, encode_floats
from tuner.trials.hazards import Hazard
from tuner.trials.result import InputRate, Measured, StageTimes

if TYPE_CHECKING:
    from typing_extensions import Self


def _float(value: Any) -> float | None:
    """A number the wire carries (``"nan"`` and ``"inf"`` included), or None."""
    return None if value is None else as_float(value)


@dataclass(frozen=True, kw_only=True)
class _Message:
    """What every message has: ``t``, seconds since the worker's trial began (the parent's
    clock for :class:`MemoryMessage`); None when the line did not say."""

    type: ClassVar[str]
    t: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The wire form: ``type``, ``t`` and the message's own fields."""
        data: dict[str, Any] = encode_floats({"type": self.type, "t": self.t, **self._fields()})
        return data

    def _fields(self) -> dict[str, Any]:
        """The message's own fields, as they are declared (:mod:`tuner.record`)."""
        return to_data(self, exclude=("t",))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        """The record of its wire form; a missing field takes its default.

        Raises:
            TypeError, ValueError: a field that is not what its record declares.
        """
        return from_data(cls, data)


@dataclass(frozen=True, kw_only=True)
class ImportedMessage(_Message):
    """A worker started ahead has imported its frameworks and waits for a trial."""

    type: ClassVar[str] = "imported"


@dataclass(frozen=True, kw_only=True)
class StartedMessage(_Message):
    """The worker has the trial: its process id, the device it trains on (``cpu``,
    ``gpu:0``), the versions it runs, and whether it is a warm worker's later trial."""

    type: ClassVar[str] = "started"
    pid: int | None = None
    device: str | None = None
    versions: dict[str, str] = field(default_factory=dict)
    warm: bool = False


@dataclass(frozen=True, kw_only=True)
class PhaseMessage(_Message):
    """The worker moved on to ``phase``: ``build``, ``prepare``, ``probe``, ``warmup``,
    ``measure`` or ``input`` (:data:`tuner.trials.events.PHASES` says each in words)."""

    type: ClassVar[str] = "phase"
    phase: str = ""


@dataclass(frozen=True, kw_only=True)
class HazardMessage(_Message):
    """A precision hazard the numerics probe or the model checks found, before the first
    step (the trial's result lists it too)."""

    type: ClassVar[str] = "hazard"
    hazard: Hazard

    def _fields(self) -> dict[str, Any]:
        return self.hazard.to_dict()

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HazardMessage:
        """Raises:
        ValueError: the hazard lacks a field or has an unknown kind or severity."""
        return cls(t=_float(data.get("t")), hazard=Hazard.from_dict(data))


@dataclass(frozen=True, kw_only=True)
class NumericsMessage(_Message):
    """The numerics probe's measurements (``TrialResult.numerics``), as the probe wrote them:
    a free-form mapping of figure names to JSON values."""

    type: ClassVar[str] = "numerics"
    figures: dict[str, Any] = field(default_factory=dict)

    def _fields(self) -> dict[str, Any]:
        return dict(self.figures)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NumericsMessage:
        figures = {k: v for k, v in data.items() if k not in ("type", "t")}
        return cls(t=_float(data.get("t")), figures=figures)


@dataclass(frozen=True, kw_only=True)
class PredictionMessage(_Message):
    """The trial's peak memory, predicted before its first step from the compiled step
    (``TrialResult.memory_prediction``; :func:`tuner.worker.training.predict_peak` says how):
    ``peak_mb``, ``live_mb``, ``step_mb``, ``limit_mb``, ``limit_source``, ``method``,
    ``parts_mb`` and ``compile_s`` (the ahead-of-time compile, which the warm-up then skips)."""

    type: ClassVar[str] = "prediction"
    figures: dict[str, Any] = field(default_factory=dict)

    def _fields(self) -> dict[str, Any]:
        return dict(self.figures)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PredictionMessage:
        figures = {k: v for k, v in data.items() if k not in ("type", "t")}
        if _float(figures.get("peak_mb")) is None:
            raise ValueError("a prediction without peak_mb")
        return cls(t=_float(data.get("t")), figures=figures)


@dataclass(frozen=True, kw_only=True)
class WarningMessage(_Message):
    """Something the user should know about the trial (``code`` names it for programs):
    widths that keep Tensor Cores idle, a probe that could not compare, a fix applied."""

    type: ClassVar[str] = "warning"
    code: str = ""
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class StepMessage(_Message):
    """One training step of ``phase`` (``warmup`` or ``measure``): its number in the phase,
    its loss and loss scale (None without one), whether the loss scale skipped it, whether
    its loss was not finite, and its time per step in milliseconds."""

    type: ClassVar[str] = "step"
    phase: str = ""
    step: int | None = None
    loss: float | None = None
    loss_scale: float | None = None
    skipped: bool = False
    nonfinite: bool = False
    time_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class ResultMessage(_Message, Measured, StageTimes):
    """The trial's measured figures: its :class:`~tuner.trials.result.Measured` record and
    :class:`~tuner.trials.result.StageTimes`, which the trial's
    :class:`~tuner.trials.result.TrialResult` keeps as they are (:mod:`tuner.trials.runner`),
    and what only the verdict (:func:`tuner.trials.outcome.classify`) reads."""

    type: ClassVar[str] = "result"
    #: what the device trained at, from batches already in memory: the trial's
    #: ``device_samples_per_second`` (its ``samples_per_second`` is what fit reaches)
    samples_per_second: float | None = None
    skipped_flags: tuple[bool, ...] = ()  #: which measured steps the loss scale skipped
    weights_finite: bool | None = None  #: the weights after training hold no inf/NaN

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ResultMessage:
        return from_data(cls, data, input=InputRate.read(data.get("input")))


@dataclass(frozen=True, kw_only=True)
class ErrorMessage(_Message):
    """The trial failed in the worker: the facts :func:`tuner.trials.outcome.classify` turns
    into a status (the worker never decides one).

    Attributes:
        exception: the exception's class name.
        message: what went wrong, in one line (or the user's own message in full).
        location: ``file:line`` in the user's code, when it was there.
        phase: the worker's phase when it failed (``import``, ``build``, ...).
        oom: the backend called it out of memory.
        user_code: the user's code raised it.
        internal: mptune's own code raised it (a bug).
        policy_caused: it fails only under the trial's policy; float32 trains the same batch.
        unsupported: XLA cannot compile the model, which trains without it.
        predicted: out of memory as predicted before any step (no step ran; the worker is
            as it was before the trial).
        traceback: the formatted traceback.
    """

    type: ClassVar[str] = "error"
    exception: str | None = None
    message: str = ""
    location: str | None = None
    phase: str = ""
    oom: bool = False
    user_code: bool = False
    internal: bool = False
    policy_caused: bool = False
    unsupported: bool = False
    predicted: bool = False
    traceback: str | None = None


@dataclass(frozen=True, kw_only=True)
class ObservedMessage(_Message):
    """What a training script trains today, read back from the model and data its own ``fit``
    got (issue 70): the worker of :func:`tuner.trials.observe.observe_script` sends it and
    ends, training nothing.

    Attributes:
        setup: the :class:`~tuner.setup.Setup` it trains, as ``Setup.to_dict`` writes it;
            None where that is no setup mptune can run (``reason`` says why).
        at: where the script sets each part, by part (``policy``, ``batch_size``,
            ``compile``), as ``file:line``.
        reason: why the script's own setup cannot run as a trial; None where it can.
    """

    type: ClassVar[str] = "observed"
    setup: dict[str, Any] | None = None
    at: dict[str, str] = field(default_factory=dict)
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class ReadyMessage(_Message):
    """A warm worker finished its trial and waits for the next one (the runner's business:
    listeners never get it)."""

    type: ClassVar[str] = "ready"


@dataclass(frozen=True, kw_only=True)
class MemoryMessage(_Message):
    """The parent's sample of the worker's resident memory, in MiB, and of its CPU use since
    the last sample (percent of the machine's cores; None at the first), for the live plots."""

    type: ClassVar[str] = "memory"
    rss_mb: float | None = None
    cpu_percent: float | None = None


@dataclass(frozen=True)
class OtherMessage:
    """A message of a type this version does not know, or one it could not read: the raw
    dict, kept whole so that a recording replays it unchanged.

    Attributes:
        kind: the message's ``type`` as written (``""`` when it had none).
        data: the message as it came.
        problem: why a known type could not be read (None for an unknown type).
    """

    type: ClassVar[str] = "other"
    kind: str
    data: dict[str, Any]
    problem: str | None = None

    @property
    def t(self) -> float | None:
        try:
            return _float(self.data.get("t"))
        except (TypeError, ValueError):
            return None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)


WorkerMessage = Union[  # noqa: UP007 - a runtime alias: `from __future__` does not cover it
    ImportedMessage,
    StartedMessage,
    PhaseMessage,
    HazardMessage,
    NumericsMessage,
    PredictionMessage,
    WarningMessage,
    StepMessage,
    ResultMessage,
    ErrorMessage,
    ObservedMessage,
    ReadyMessage,
    MemoryMessage,
    OtherMessage,
]

#: Reads each known ``type``'s dict (may raise; :func:`parse_message` catches it): every record
#: of :data:`WorkerMessage` but :class:`OtherMessage`, which holds what none of them reads.
_READERS: dict[str, Callable[[dict[str, Any]], WorkerMessage]] = {
    cls.type: cls.from_dict for cls in get_args(WorkerMessage) if cls is not OtherMessage
}


def parse_message(data: dict[str, Any]) -> WorkerMessage:
    """The record of one worker message (a dict as :class:`~tuner.trials.events.EventReader`
    returns it, or a record's :meth:`to_dict`); never raises.

    A missing field takes its default; an unknown ``type``, or a known one whose fields cannot
    be read (a number that is not one, a hazard of an unknown kind), gives an
    :class:`OtherMessage` with the dict as it came.
    """
    if not isinstance(data, dict):
        return OtherMessage("", {"value": data}, "not a JSON object")
    kind = data.get("type")
    reader = _READERS.get(kind) if isinstance(kind, str) else None
    if reader is None:
        return OtherMessage(str(kind or ""), dict(data))
    try:
        return reader(data)
    except (TypeError, ValueError, AttributeError) as exc:
        return OtherMessage(str(kind), dict(data), f"{type(exc).__name__}: {exc}")
