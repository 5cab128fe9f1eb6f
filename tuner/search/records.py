"""What a search recommends, as stored in a session and shown by every face: the
:class:`Recommendation`, its :class:`Alternative` setups and the :class:`KnobEvidence` for each
execution knob; or, for a search that failed in the model's own code, its
:class:`SessionFailure`. Records only: the decision that makes them is
:mod:`tuner.search.recommend`, their wording :mod:`tuner.search.wording`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from tuner.errors import EXIT_TRIAL_FAILED, MptuneError
from tuner.hardware.gpu_use import UnusedGpu
from tuner.record import from_data, to_data
from tuner.search.measures import Candidate, Paired
from tuner.setup import KNOBS, SETUP_FIELDS, Setup
from tuner.trials.hazards import Hazard
from tuner.trials.result import InputRate, input_bound


class NoViableSetup(MptuneError):
    """Every setup failed or was rejected; the message lists why. Not bad input: the model may
    simply not fit this machine, so the CLI exits 1."""

    exit_code = EXIT_TRIAL_FAILED


#: A session's failure kind when its model failed in its own code (``build_model`` returned
#: None, a shape mismatch): no setup could run until the model file is fixed.
MODEL_ERROR = "model error"


@dataclass(frozen=True)
class SessionFailure:
    """Why a session's search ended without a recommendation where it failed rather than
    stopped; stored with the session (its ``failure`` attribute) until a search of it runs
    again.

    Attributes:
        kind: the failure in a word or two, for a list of sessions (:data:`MODEL_ERROR`).
        message: what failed, as the trial said it (``file:line: message``).
        trial: the trial it failed in.
    """

    kind: str
    message: str
    trial: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return to_data(self)

    @classmethod
    def from_dict(cls, data: Any) -> SessionFailure | None:
        """The stored failure; None for none (or one that cannot be read)."""
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            return None
        trial = data.get("trial")
        return cls(
            data["kind"], str(data.get("message") or ""), trial if isinstance(trial, int) else None
        )


class ModelFailed(MptuneError):
    """The search ended because the model failed in its own code: no setup can run. The
    session records :attr:`failure`; a search of it after the model is fixed runs the failed
    trial again (the evaluator never recalls a ``user_error``)."""

    def __init__(self, message: str, failure: SessionFailure) -> None:
        super().__init__(message)
        self.failure = failure


@dataclass(frozen=True)
class Alternative:
    """A candidate that was not recommended, with its figures or why it was rejected."""

    setup: Setup
    samples_per_second: float | None
    speedup_vs_float32: float | None
    loss_gap: float | None
    rejected: str | None
    trials: tuple[int, ...] = ()
    #: lowest and highest samples/s measured; None in alternatives stored by earlier versions
    spread: tuple[float, float] | None = None
    #: the median of its runs' samples/s before the steps the loss scale skipped are taken
    #: off (:attr:`samples_per_second` is what they trained); None where none was skipped
    measured_samples_per_second: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            **self.setup.to_dict(),
            "samples_per_second": self.samples_per_second,
            "speedup_vs_float32": self.speedup_vs_float32,
            "loss_gap": self.loss_gap,
            "rejected": self.rejected,
            "trials": list(self.trials),
        }
        if self.spread is not None:
            data["spread"] = list(self.spread)
        if self.measured_samples_per_second is not None:
            data["measured_samples_per_second"] = self.measured_samples_per_second
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Alternative:
        return cls(
            Setup.from_dict({k: data[k] for k in SETUP_FIELDS if k in data}),
            data.get("samples_per_second"),
            data.get("speedup_vs_float32"),
            data.get("loss_gap"),
            data.get("rejected"),
            tuple(data.get("trials", ())),
            _pair(data.get("spread")),
            data.get("measured_samples_per_second"),
        )

    @classmethod
    def of(cls, c: Candidate, f32: Candidate | None) -> Alternative:
        """The alternative a candidate is, with its speed-up against float32's ``f32``."""
        if not c.runs:  # it never measured (a policy that fails on this model)
            return cls(c.setup, None, None, c.loss_gap, c.rejected)
        raw = statistics.median(r.result.samples_per_second or 0.0 for r in c.runs)
        return cls(
            c.setup,
            c.speed,
            c.speed / f32.speed if f32 and f32.speed else None,
            c.loss_gap,
            c.rejected,
            tuple(sorted(r.number for r in c.runs)),
            c.spread if c.runs else None,
            raw if round(raw) != round(c.speed) else None,
        )


@dataclass(frozen=True)
class KnobEvidence:
    """One execution knob of the recommended setup and the evidence for its setting.

    Attributes:
        knob: ``xla``, ``steps_per_execution``, ``tf32`` or ``global_batch``.
        setting: the recommended setup's value, in words (``on``, ``off``, ``4``, ``512``).
        detail: what was measured or why it was not tried, in words.
        gain: the measured speed of the knob's setting over the setup without it (1.2: 20%
            faster); None when no stage compared them.
        trials: the trials behind the figures.
    """

    knob: str
    setting: str = ""
    detail: str = ""
    gain: float | None = None
    trials: tuple[int, ...] = ()

    #: The row label of each knob in the evidence.
    LABELS: ClassVar[dict[str, str]] = {knob.evidence: knob.label for knob in KNOBS}

    @property
    def label(self) -> str:
        return self.LABELS.get(self.knob, self.knob)

    def to_dict(self) -> dict[str, Any]:
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KnobEvidence:
        return from_data(cls, data, knob=str(data["knob"]))


def _pair(value: Any) -> tuple[float, float] | None:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    low, high = value
    return (float(low), float(high)) if low is not None and high is not None else None


@dataclass(frozen=True)
class Recommendation:
    """The chosen setup and the evidence for it. ``to_dict`` is what ``tune --json`` prints and
    what a session stores; it keeps the setup's fields at the top level too, as sessions stored
    before :class:`~tuner.setup.Setup` existed have them."""

    setup: Setup
    samples_per_second: float
    samples_per_second_spread: tuple[float, float]
    baseline_samples_per_second: float | None  #: float32 at the starting batch size
    float32_samples_per_second: float | None  #: float32 at its own best batch size
    speedup_vs_float32: float | None  #: against :attr:`float32_setup`
    speedup_vs_baseline: float | None
    memory_saving: float | None  #: share of float32's peak memory (same batch size) saved
    peak_memory_mb: float | None
    memory_kind: str | None
    loss_gap: float | None
    skipped_steps: int
    reason: str
    trials: tuple[int, ...]
    objective: str
    alternatives: tuple[Alternative, ...] = ()
    not_tried: tuple[dict[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    device: str | None = None
    #: NVML saw NVIDIA GPUs the backend could not use, and the trials ran on the CPU
    #: (:mod:`tuner.hardware.gpu_use`); None when no GPU went unused
    unused_gpu: UnusedGpu | None = None
    versions: dict[str, str] = field(default_factory=dict)
    #: viable setups whose measurements overlap the chosen one's, or lie within the noise
    ties: tuple[Alternative, ...] = ()
    #: what other processes used of the CPU during the trials, when that was enough to skew them
    busy: str | None = None
    #: precision hazards the search found, for every policy it probed (unsafe first)
    hazards: tuple[Hazard, ...] = ()
    #: each execution knob of the setup (XLA, steps per execution, TF32, the global batch) and
    #: its evidence; empty in recommendations stored before the knobs existed
    knobs: tuple[KnobEvidence, ...] = ()
    #: the samples per optimizer update the search kept (``--global-batch``); None: not kept
    global_batch: int | None = None
    #: the batch size the user trains with (``--start-batch`` or the model file's
    #: ``BATCH_SIZE``); None: unknown
    user_batch: int | None = None
    #: the setups measured back to back that decided the pick: its precision's runoff and the
    #: final between the leading precisions; empty in recommendations stored before them
    paired: tuple[Paired, ...] = ()
    #: the precision the user's training runs in today, unchanged (``float32+tf32`` where the
    #: backend's float32 defaults to TF32 on the device), its best setup's samples/s, and the
    #: recommended setup's speed-up against it; ``float32`` in recommendations stored before
    reference: str = "float32"
    reference_samples_per_second: float | None = None
    speedup_vs_reference: float | None = None
    #: what the device trains the setup at from batches in memory, and fit's own loop on the
    #: user's input (issue 35; before it the input timed alone, :attr:`samples_per_second` the
    #: lower of the two); None: not timed, as in recommendations stored before it was
    device_samples_per_second: float | None = None
    input: InputRate | None = None
    #: what :attr:`speedup_vs_float32` is against: the float32 setup, the trials whose median
    #: :attr:`float32_samples_per_second` is, and whether the ratio is instead the median of
    #: per-turn ratios measured back to back (:attr:`paired`); None and () in recommendations
    #: stored before they were named
    float32_setup: Setup | None = None
    float32_trials: tuple[int, ...] = ()
    float32_paired: bool = False
    #: the trials whose median :attr:`baseline_samples_per_second` is
    baseline_trials: tuple[int, ...] = ()
    #: the trials whose median :attr:`samples_per_second` is: every ok run of the setup
    setup_trials: tuple[int, ...] = ()
    #: where a training script sets :attr:`reference` itself (``train.py:9``): what the user
    #: runs today is the script's own choice (issue 49); None: not set by a script
    reference_at: str | None = None
    #: what the script's fit does that the figures leave out (validation, callbacks, class or
    #: sample weights), and one validation pass's seconds at the setup's batch size
    left_out: tuple[str, ...] = ()
    validation_s: float | None = None
    #: the distribution the script trains in (``MirroredStrategy``) and over how many devices:
    #: the batch size is fit's global batch, each device takes its share
    distribution: str | None = None
    replicas: int = 1

    #: Fields written only where they say something, so that recommendations stored before
    #: them read and compare as they were written.
    _SAID_WHEN_SET = ("reference_at", "left_out", "validation_s", "distribution", "replicas")

    @property
    def input_bound(self) -> bool:
        """The input holds ``fit`` below what the device could train at."""
        return input_bound(self.device_samples_per_second, self.input)

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["input"] = self.input.to_dict() if self.input else None
        data.update(self.setup.to_dict())
        data["setup"] = self.setup.to_dict()
        data["samples_per_second_spread"] = list(self.samples_per_second_spread)
        data["trials"] = list(self.trials)
        data["alternatives"] = [alt.to_dict() for alt in self.alternatives]
        data["ties"] = [alt.to_dict() for alt in self.ties]
        data["not_tried"] = [dict(item) for item in self.not_tried]
        data["notes"] = list(self.notes)
        data["versions"] = dict(self.versions)
        # Said only where a GPU went unused: recommendations without it read as before.
        unused = data.pop("unused_gpu")
        if unused is not None:
            data["unused_gpu"] = unused.to_dict()
        data["hazards"] = [h.to_dict() for h in self.hazards]
        data["knobs"] = [k.to_dict() for k in self.knobs]
        data["paired"] = [p.to_dict() for p in self.paired]
        data["float32_setup"] = self.float32_setup.to_dict() if self.float32_setup else None
        data["float32_trials"] = list(self.float32_trials)
        data["baseline_trials"] = list(self.baseline_trials)
        data["setup_trials"] = list(self.setup_trials)
        data["left_out"] = list(self.left_out)
        defaults = fields_defaults()
        for key in self._SAID_WHEN_SET:
            if data[key] == defaults[key]:
                del data[key]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recommendation:
        """Inverse of :meth:`to_dict`; reads recommendations stored by earlier versions too.

        Raises:
            ValueError: the data names no valid setup or lacks a figure.
        """
        setup_data = (
            data.get("setup")
            if isinstance(data.get("setup"), dict)
            else {k: data[k] for k in SETUP_FIELDS if k in data}
        )
        values = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        values["setup"] = Setup.from_dict(setup_data)
        try:
            values["samples_per_second_spread"] = tuple(values["samples_per_second_spread"])
        except (KeyError, TypeError):
            raise ValueError("the recommendation has no measured spread") from None
        values["alternatives"] = tuple(
            Alternative.from_dict(a) for a in values.get("alternatives", ())
        )
        values["ties"] = tuple(Alternative.from_dict(a) for a in values.get("ties") or ())
        values["hazards"] = tuple(Hazard.from_dict(h) for h in values.get("hazards") or ())
        values["knobs"] = tuple(KnobEvidence.from_dict(k) for k in values.get("knobs") or ())
        unused = values.get("unused_gpu")
        values["unused_gpu"] = UnusedGpu.from_dict(unused) if isinstance(unused, dict) else None
        fed = values.get("input")
        try:
            values["input"] = InputRate.from_dict(fed) if isinstance(fed, dict) else None
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a malformed input rate: {exc}") from None
        try:
            values["paired"] = tuple(Paired.from_dict(p) for p in values.get("paired") or ())
        except (KeyError, TypeError) as exc:
            raise ValueError(f"a malformed paired comparison: {exc}") from None
        f32 = values.get("float32_setup")
        values["float32_setup"] = Setup.from_dict(f32) if isinstance(f32, dict) else None
        for key in (
            "trials",
            "not_tried",
            "notes",
            "float32_trials",
            "baseline_trials",
            "setup_trials",
            "left_out",
        ):
            values[key] = tuple(values.get(key) or ())
        try:
            return cls(**values)
        except TypeError as exc:
            raise ValueError(f"an incomplete recommendation: {exc}") from None


def fields_defaults() -> dict[str, Any]:
    """Each of :class:`Recommendation`'s fields that has a plain default, with it (as
    :meth:`Recommendation.to_dict` writes it)."""
    from dataclasses import MISSING

    found = {}
    for f in fields(Recommendation):
        if f.default is not MISSING:
            found[f.name] = list(f.default) if isinstance(f.default, tuple) else f.default
    return found


def plain_knobs(setup: Setup) -> tuple[KnobEvidence, ...]:
    """The knobs of a recommendation stored before they had evidence: their settings only."""
    return tuple(
        KnobEvidence(knob.evidence, knob.setting(setup), knob.setting(setup)) for knob in KNOBS
    )
