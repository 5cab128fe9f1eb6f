"""What a search recommends, as stored in a session and shown by every face: the
:class:`Recommendation`, its :class:`Alternative` setups and the :class:`KnobEvidence` for each
execution knob; or, for a search that failed in the model's own code, its
:class:`SessionFailure`. Records only: the decision that makes them is
:mod:`tuner.search.recommend`, their wording :mod:`tuner.search.wording`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tuner.errors import EXIT_TRIAL_FAILED, MptuneError
from tuner.hardware.gpu_use import UnusedGpu
from tuner.record import added, from_data, to_data
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
    samples_per_second: float | None = None
    speedup_vs_float32: float | None = None
    loss_gap: float | None = None
    rejected: str | None = None
    trials: tuple[int, ...] = ()
    #: lowest and highest samples/s measured; None in alternatives stored by earlier versions
    spread: tuple[float, float] | None = added()
    #: the median of its runs' samples/s before the steps the loss scale skipped are taken
    #: off (:attr:`samples_per_second` is what they trained); None where none was skipped
    measured_samples_per_second: float | None = added()

    def to_dict(self) -> dict[str, Any]:
        """The setup's fields, then the alternative's own (:mod:`tuner.record`)."""
        return {**self.setup.to_dict(), **to_data(self, exclude=("setup",))}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Alternative:
        setup = Setup.from_dict({k: data[k] for k in SETUP_FIELDS if k in data})
        spread = data.get("spread")
        if not (isinstance(spread, list) and len(spread) == 2 and None not in spread):
            data = {k: v for k, v in data.items() if k != "spread"}  # unreadable: none
        return from_data(cls, data, setup=setup)

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


@dataclass(frozen=True)
class Recommendation:
    """The chosen setup and the evidence for it. ``to_dict`` is what ``tune --json`` prints and
    what a session stores; it keeps the setup's fields at the top level too, as sessions stored
    before :class:`~tuner.setup.Setup` existed have them."""

    setup: Setup
    samples_per_second: float
    samples_per_second_spread: tuple[float, float]
    #: the baseline's: float32 at the starting batch size, or what a script runs today
    #: (:attr:`today`)
    baseline_samples_per_second: float | None
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
    unused_gpu: UnusedGpu | None = added()  # said only where a GPU went unused
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
    reference_at: str | None = added()
    #: what the script's fit does that the figures leave out (validation, callbacks, class or
    #: sample weights), and one validation pass's seconds at the setup's batch size
    left_out: tuple[str, ...] = added(())
    validation_s: float | None = added()
    #: the distribution the script trains in (``MirroredStrategy``) and over how many devices:
    #: the batch size is fit's global batch, each device takes its share
    distribution: str | None = added()
    replicas: int = added(1)
    #: what a training script trains today, observed and run unchanged as the baseline
    #: (issue 70), in words with the lines that set it: :attr:`speedup_vs_baseline` is
    #: against it. None: the baseline is float32 at the starting batch size (a model file, a
    #: built-in, or a script whose own setup could not run as a trial)
    today: str | None = added()
    #: a trap in what the user runs today (issue 71: trial #0 does not train, or fails, under
    #: its own precision), in one line with its evidence and fix: "your run today does not
    #: train: ... Fix: ...". Said first; no speed-up is stated against that run. None: none
    today_trap: str | None = added()

    @property
    def input_bound(self) -> bool:
        """The input holds ``fit`` below what the device could train at."""
        return input_bound(self.device_samples_per_second, self.input)

    def to_dict(self) -> dict[str, Any]:
        """Its declared fields (:mod:`tuner.record`; one added since recommendations were first
        stored is written where it says something), and the setup's fields at the top level as
        well, as recommendations were first stored."""
        return {**to_data(self), **self.setup.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Recommendation:
        """Inverse of :meth:`to_dict`; reads recommendations stored by earlier versions too
        (the setup's fields at the top level only).

        Raises:
            ValueError: the data names no valid setup, lacks a figure or is malformed.
        """
        setup_data = (
            data.get("setup")
            if isinstance(data.get("setup"), dict)
            else {k: data[k] for k in SETUP_FIELDS if k in data}
        )
        setup = Setup.from_dict(setup_data)
        if not isinstance(data.get("samples_per_second_spread"), list):
            raise ValueError("the recommendation has no measured spread")
        try:
            return from_data(cls, data, setup=setup)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"an incomplete or malformed recommendation: {exc}") from None


def plain_knobs(setup: Setup) -> tuple[KnobEvidence, ...]:
    """The knobs of a recommendation stored before they had evidence: their settings only."""
    return tuple(
        KnobEvidence(knob.evidence, knob.setting(setup), knob.setting(setup)) for knob in KNOBS
    )
