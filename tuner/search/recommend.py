"""From a search outcome to a recommendation a user can trust, with its evidence."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from tuner.errors import EXIT_TRIAL_FAILED, MptuneError
from tuner.policies import FLOAT32, POLICIES, TENSORFLOW
from tuner.search.measures import (
    Candidate,
    KnobTrial,
    Paired,
    SearchOutcome,
    first_ok,
    paired_ratio,
    within,
)
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.wording import and_join
from tuner.setup import BACKEND_NAMES, SETUP_FIELDS, TF32, LossScale, Setup
from tuner.trials.hazards import Hazard, merge

#: Other processes' share of the CPU above which the machine counts as busy. On a 2-core
#: machine one core kept busy by something else is 0.5 and takes the core a trial's input
#: pipeline or second op thread would use; half of that (0.25) already slows a trial noticeably
#: and unevenly, while the odd short burst on an otherwise idle machine stays well below it.
BUSY_LOAD = 0.25


class NoViableSetup(MptuneError):
    """Every setup failed or was rejected; the message lists why. Not bad input: the model may
    simply not fit this machine, so the CLI exits 1."""

    exit_code = EXIT_TRIAL_FAILED


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
    setting: str
    detail: str
    gain: float | None = None
    trials: tuple[int, ...] = ()

    #: The row label of each knob in the evidence.
    LABELS: ClassVar[dict[str, str]] = {
        "xla": "XLA",
        "steps_per_execution": "Steps per execution",
        "tf32": "TF32",
        "global_batch": "Global batch",
    }

    @property
    def label(self) -> str:
        return self.LABELS.get(self.knob, self.knob)

    def to_dict(self) -> dict[str, Any]:
        return {
            "knob": self.knob,
            "setting": self.setting,
            "detail": self.detail,
            "gain": self.gain,
            "trials": list(self.trials),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KnobEvidence:
        gain = data.get("gain")
        return cls(
            str(data["knob"]),
            str(data.get("setting", "")),
            str(data.get("detail", "")),
            None if gain is None else float(gain),
            tuple(int(n) for n in data.get("trials") or ()),
        )


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
    speedup_vs_float32: float | None  #: against the best float32 setup
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

    def to_dict(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(self.setup.to_dict())
        data["setup"] = self.setup.to_dict()
        data["samples_per_second_spread"] = list(self.samples_per_second_spread)
        data["trials"] = list(self.trials)
        data["alternatives"] = [alt.to_dict() for alt in self.alternatives]
        data["ties"] = [alt.to_dict() for alt in self.ties]
        data["not_tried"] = [dict(item) for item in self.not_tried]
        data["notes"] = list(self.notes)
        data["versions"] = dict(self.versions)
        data["hazards"] = [h.to_dict() for h in self.hazards]
        data["knobs"] = [k.to_dict() for k in self.knobs]
        data["paired"] = [p.to_dict() for p in self.paired]
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
        try:
            values["paired"] = tuple(Paired.from_dict(p) for p in values.get("paired") or ())
        except (KeyError, TypeError) as exc:
            raise ValueError(f"a malformed paired comparison: {exc}") from None
        for key in ("trials", "not_tried", "notes"):
            values[key] = tuple(values.get(key, ()))
        try:
            return cls(**values)
        except TypeError as exc:
            raise ValueError(f"an incomplete recommendation: {exc}") from None


def recommend(
    outcome: SearchOutcome,
    space: SearchSpace,
    settings: SearchSettings,
    hardware: dict[str, Any] | None = None,
) -> Recommendation:
    """Choose among the outcome's candidates; never a winner inside the noise.

    Raises:
        NoViableSetup: nothing ran ok and passed the numerical guard.
    """
    viable = [c for c in outcome.candidates if c.rejected is None]
    if not viable:
        raise NoViableSetup(_no_viable_message(outcome))
    paired = outcome.paired
    leader = max(viable, key=lambda c: _score(c, viable, settings))
    if settings.objective == "speed":
        # Setups measured back to back are ranked on the ratio of their runs, not on figures
        # taken minutes apart on a machine that drifts.
        for c in viable:
            ratio = paired_ratio(paired, leader.setup, c.setup)
            if ratio is not None and ratio > 1:
                leader = c
    # Setups whose figures overlap are a tie, and a tie goes to the simplest of them: which of
    # them measured a little faster this time is noise, and must not decide the answer.
    tied = [c for c in viable if c is leader or _tie(c, leader, viable, settings, paired)]
    chosen = min(tied, key=_simplest)
    ties = sorted(
        (c for c in viable if c is not chosen and _tie(c, chosen, viable, settings, paired)),
        key=_simplest,
    )
    tie_note = None
    if chosen is not leader:
        ratio = paired_ratio(paired, chosen.setup, leader.setup)
        against = (
            f"{ratio:.3f}x {_label(chosen)} on the median of their runs back to back"
            if ratio is not None
            else f"{leader.speed:,.0f} samples/s against {chosen.speed:,.0f}"
        )
        tie_note = (
            f"{_label(leader)} measured {against}: inside the measurement noise, so the "
            f"simpler {_label(chosen)} is recommended"
        )

    f32_best = _best_float32(outcome)
    # float32's pick measured back to back with the chosen setup (in the final) is the float32
    # a speed-up is stated against: a figure of another float32 setup taken minutes earlier,
    # on a machine that drifts, does not contradict what the two measured side by side.
    f32_best = next(
        (
            c
            for c in viable
            if c.setup.precision == FLOAT32
            and paired_ratio(paired, c.setup, chosen.setup) is not None
        ),
        f32_best,
    )
    f32_same = outcome.measured.get(
        Setup(
            FLOAT32,
            chosen.setup.batch_size,
            LossScale("none"),
            gradient_accumulation_steps=chosen.setup.gradient_accumulation_steps,
            backend=chosen.setup.backend,
        )
    )
    f32_same_run = first_ok(f32_same) if f32_same else None
    f32_same_ok = f32_same_run.result if f32_same_run else None
    baseline = outcome.baseline.result if outcome.baseline and outcome.baseline.result.ok else None
    memory_saving = None
    if (
        chosen.setup.policy != FLOAT32
        and f32_same_ok
        and f32_same_ok.peak_memory_mb
        and chosen.peak_memory_mb
    ):
        memory_saving = 1 - chosen.peak_memory_mb / f32_same_ok.peak_memory_mb
    first = chosen.runs[0].result
    trials = sorted(
        {r.number for r in chosen.runs}
        | ({chosen.guard_trial} if chosen.guard_trial is not None else set())
    )
    busy = _busy(outcome, trials)
    batch_note = _batch_note(chosen.setup, space)
    notes = list(outcome.notes) + [n for n in (tie_note, batch_note, busy) if n]
    speedup = _ratio(f32_best, chosen, paired) if f32_best and f32_best.speed else None
    return Recommendation(
        setup=chosen.setup,
        samples_per_second=chosen.speed,
        samples_per_second_spread=chosen.spread,
        baseline_samples_per_second=baseline.samples_per_second if baseline else None,
        float32_samples_per_second=f32_best.speed if f32_best else None,
        speedup_vs_float32=speedup,
        speedup_vs_baseline=(
            chosen.speed / baseline.samples_per_second
            if baseline and baseline.samples_per_second
            else None
        ),
        memory_saving=memory_saving,
        peak_memory_mb=chosen.peak_memory_mb,
        memory_kind=first.memory_kind,
        loss_gap=chosen.loss_gap,
        skipped_steps=first.skipped_steps,
        reason=_reason(chosen, f32_best, viable, outcome, hardware, ties, settings),
        trials=tuple(trials),
        objective=settings.objective,
        alternatives=tuple(
            _alternative(c, f32_best) for c in outcome.candidates if c is not chosen
        ),
        not_tried=tuple(_not_tried(outcome, space)),
        notes=tuple(notes),
        device=first.device,
        versions=dict(first.versions),
        ties=tuple(_alternative(c, f32_best) for c in ties),
        busy=busy,
        hazards=merge(*(m.result.hazards for runs in outcome.measured.values() for m in runs)),
        knobs=_knob_evidence(chosen.setup, outcome, space),
        global_batch=space.global_batch,
        user_batch=space.user_batch,
        paired=tuple(p for p in paired if chosen.setup in p.setups),
    )


def _batch_note(setup: Setup, space: SearchSpace) -> str | None:
    """What the recommended batch size means for the user's learning rate: the global batch
    kept, or a batch size that differs from the user's own."""
    if space.global_batch is not None:
        acc = setup.gradient_accumulation_steps
        how = (
            f"batch size {setup.batch_size} x {acc} gradient accumulation steps"
            if acc > 1
            else f"batch size {setup.batch_size}, no gradient accumulation"
        )
        return (
            f"the global batch {space.global_batch} is kept (--global-batch): {how}, "
            f"{setup.global_batch} samples per optimizer update, so a learning rate tuned for "
            f"{space.global_batch} still applies"
        )
    mine, theirs = setup.global_batch, space.user_batch
    if theirs is None or mine == theirs:
        return None
    return (
        f"the recommended batch size {mine} differs from yours ({theirs}): each optimizer "
        f"update averages {mine} samples instead of {theirs}, so a learning rate tuned for "
        f"{theirs} may no longer fit. Scale it by {mine}/{theirs} = {mine / theirs:.3g} (the "
        'linear scaling rule, Goyal et al. 2017, "Accurate, Large Minibatch SGD", with a '
        f"warm-up for a large factor) or tune it again; or search with --global-batch {theirs} "
        "to keep your batch"
    )


def _knob_evidence(
    setup: Setup, outcome: SearchOutcome, space: SearchSpace
) -> tuple[KnobEvidence, ...]:
    """The evidence for each knob of the recommended ``setup``, from its precision's knob
    stages."""
    mine = [k for k in outcome.knobs if k.precision == setup.precision]
    items = []
    moves = [k for k in mine if k.knob in ("neighbourhood", "runoff") and k.tried is not None]
    xla = [k for k in mine if k.knob == "xla" and k.tried is not None]
    setting = "on" if setup.xla else "off"
    moved = _moved(moves, lambda s: s.xla, setup.xla)
    if moved is not None:
        items.append(moved_evidence("xla", setting, moved, xla))
    elif xla:
        k = xla[-1]
        items.append(KnobEvidence("xla", setting, f"{setting}: {_knob_line(k)}", k.gain, k.trials))
    else:
        why = outcome.knobs_skipped.get("xla") or "the search ended before its XLA stage"
        items.append(KnobEvidence("xla", setting, f"{setting}: not tried ({why})"))

    spe = [k for k in mine if k.knob == "steps_per_execution"]
    setting = str(setup.steps_per_execution)
    tried = [k for k in spe if k.tried is not None]
    moved = _moved(moves, lambda s: s.steps_per_execution, setup.steps_per_execution)
    if moved is not None:
        items.append(moved_evidence("steps_per_execution", setting, moved, tried))
    elif tried:
        adopted = [k for k in tried if k.adopted]
        gain = (
            adopted[-1].speed / tried[0].base_speed
            if adopted and adopted[-1].speed and tried[0].base_speed
            else tried[0].gain
        )
        numbers = tuple(sorted({n for k in tried for n in k.trials}))
        items.append(
            KnobEvidence(
                "steps_per_execution",
                setting,
                f"{setting}: " + "; ".join(_knob_line(k) for k in tried),
                gain,
                numbers,
            )
        )
    else:
        why = spe[-1].reason if spe and spe[-1].reason else "the search ended before this stage"
        items.append(KnobEvidence("steps_per_execution", setting, f"{setting}: not tried ({why})"))

    if setup.tf32:
        detail = (
            "on: float32 storage with TensorFloat-32 matmuls and convolutions (NVIDIA compute "
            "capability 8.0 and later); its loss gap to IEEE float32 is under Loss gap"
        )
    elif setup.policy.is_mixed:
        detail = f"not applicable: {setup.policy} computes in {setup.policy.compute_dtype}"
    elif any(s.tf32 for s in outcome.measured):
        detail = f"off: IEEE float32 matmuls; {TF32} was tried (see its alternative)"
    else:
        detail = (
            "off: IEEE float32 matmuls (TF32 needs an NVIDIA GPU of compute capability 8.0 or "
            "later)"
        )
    items.append(KnobEvidence("tf32", "on" if setup.tf32 else "off", detail))

    acc = setup.gradient_accumulation_steps
    steps = (
        f"batch size {setup.batch_size} x {acc} accumulation steps"
        if acc > 1
        else (f"batch size {setup.batch_size}, no gradient accumulation")
    )
    if space.global_batch is not None:
        detail = f"{setup.global_batch}, kept (--global-batch): {steps}"
    elif space.user_batch is not None and space.user_batch != setup.global_batch:
        detail = (
            f"{setup.global_batch} ({steps}); yours is {space.user_batch}: see the note on the "
            "learning rate"
        )
    else:
        detail = f"{setup.global_batch} ({steps})"
    items.append(KnobEvidence("global_batch", str(setup.global_batch), detail))
    return tuple(items)


def _moved(moves: list[KnobTrial], value: Any, final: Any) -> KnobTrial | None:
    """The neighbourhood move that brought the knob to its final value, if one did."""
    for k in reversed(moves):
        assert k.tried is not None
        if value(k.tried) == final and value(k.base) != final:
            return k
    return None


def moved_evidence(
    knob: str, setting: str, move: KnobTrial, stage: list[KnobTrial]
) -> KnobEvidence:
    """A knob the pick's neighbourhood set: the move, and what its own stage had found."""
    assert move.tried is not None
    numbers = ", ".join(f"#{n}" for n in move.trials)
    how = (
        "in a runoff of setups within the noise of each other, measured in turns"
        if move.knob == "runoff"
        else "around the pick, with the other knobs"
    )
    detail = (
        f"{setting}: found {how}: {move.tried.label} ran "
        f"{move.gain or 0:.2f}x {move.base.label} ({move.speed or 0:,.0f} vs "
        f"{move.base_speed:,.0f} samples/s, trials {numbers})"
    )
    if len(move.trials) > 2:  # a setup measured more than once stands on its median
        detail += "; a setup measured more than once stands on the median of its trials"
    if stage:
        detail += "; on its own: " + "; ".join(_knob_line(k) for k in stage)
    return KnobEvidence(knob, setting, detail, move.gain, move.trials)


def _knob_line(k: KnobTrial) -> str:
    """One knob trial in words: ``XLA at batch size 128: 1.18x (1,180 vs 1,000 samples/s,
    trials #5, #9), adopted``."""
    assert k.tried is not None
    what = "XLA" if k.knob == "xla" else f"{k.tried.steps_per_execution} steps per execution"
    where = f"{what} at batch size {k.base.batch_size}"
    numbers = ", ".join(f"#{n}" for n in k.trials)
    if k.speed is None:
        return (
            f"{where}: {k.status}"
            + (f" ({k.reason})" if k.reason else "")
            + (f" (trial {numbers})" if numbers else "")
        )
    gain = k.gain or 0.0
    verdict = (
        "adopted"
        if k.adopted
        else "within the noise floor, not adopted"
        if gain >= 1
        else "slower, not adopted"
    )
    return (
        f"{where}: {gain:.2f}x ({k.speed:,.0f} vs {k.base_speed:,.0f} samples/s, trials "
        f"{numbers}), {verdict}"
    )


def _simplest(c: Candidate) -> tuple[tuple[int, ...], str, str]:
    """Sort key, simplest first; the names make the order total, so a choice among tied setups
    never depends on the order they were measured in."""
    return c.simplicity(), str(c.setup.policy), str(c.setup.loss_scale)


def _best_float32(outcome: SearchOutcome) -> Candidate | None:
    """The fastest float32 setup over every ok float32 run of the session within the memory
    budget (the ladder's, the guard's references, the re-measurements): a speed-up is never
    stated against a float32 figure that another float32 trial beats."""
    budget = outcome.memory_budget_mb
    best: Candidate | None = None
    for setup, runs in outcome.measured.items():
        if setup.precision != FLOAT32:
            continue  # TF32 is not the float32 a speed-up is stated against
        ok = [
            r
            for r in runs
            if r.result.ok
            and not (
                budget is not None
                and r.result.peak_memory_mb is not None
                and r.result.peak_memory_mb > budget
            )
        ]
        if ok and (best is None or Candidate(setup, ok).speed > best.speed):
            best = Candidate(setup, ok)
    return best


def _busy(outcome: SearchOutcome, evidence: list[int]) -> str | None:
    """A note when other processes' CPU use was high enough to skew the figures, else None
    (also when no trial knows its background load)."""
    loads = {
        m.number: m.result.background_load
        for runs in outcome.measured.values()
        for m in runs
        if m.result.background_load is not None
    }
    if not loads:
        return None
    mine = [loads[n] for n in evidence if n in loads] or list(loads.values())
    median, peak = statistics.median(mine), max(loads.values())
    if median <= BUSY_LOAD and peak <= BUSY_LOAD:
        return None
    busy = sorted(n for n, load in loads.items() if load > BUSY_LOAD)
    shown = ", ".join(f"#{n}" for n in busy[:6]) + (
        f" and {len(busy) - 6} more" if len(busy) > 6 else ""
    )
    return (
        f"the machine was busy: other processes used {'up to ' if len(busy) > 1 else ''}"
        f"{peak:.0%} of the CPU during trial{'s' if len(busy) > 1 else ''} {shown} "
        f"(median {median:.0%} over the recommendation's trials); the figures may be low and "
        "uneven: re-run on an idle machine"
    )


def _score(cand: Candidate, viable: list[Candidate], settings: SearchSettings) -> float:
    if settings.objective == "speed":
        return cand.speed
    floor = settings.memory_throughput_floor if settings.objective == "memory" else 0.95
    fastest = max(c.speed for c in viable)
    if cand.speed < floor * fastest:
        return -math.inf
    return -cand.memory_per_sample


def _noise(a: Candidate, b: Candidate, settings: SearchSettings) -> float:
    """The relative difference that is noise between two setups: the larger of the noise floor
    and their measured spreads."""
    return max(settings.noise_floor, a.relative_spread, b.relative_spread)


def _overlap(a: Candidate, b: Candidate) -> bool:
    """Whether the measured ranges of samples/s overlap."""
    return a.spread[0] <= b.spread[1] and b.spread[0] <= a.spread[1]


def _ratio(a: Candidate, b: Candidate, paired: list[Paired]) -> float:
    """``b``'s speed over ``a``'s: from their runs back to back where they were measured so,
    else from their medians."""
    ratio = paired_ratio(paired, a.setup, b.setup)
    return ratio if ratio is not None else b.speed / a.speed


def _tie(
    a: Candidate,
    b: Candidate,
    viable: list[Candidate],
    settings: SearchSettings,
    paired: list[Paired] | None = None,
) -> bool:
    """Whether nothing measured separates ``a`` and ``b`` for the objective (symmetric). Two
    setups measured back to back tie when the median of their per-turn ratios is within the
    noise floor: their own spreads, taken on a machine that drifts between turns, do not
    enter (they grow with every run while the ratio holds)."""
    noise = _noise(a, b, settings)
    if settings.objective == "speed":
        ratio = paired_ratio(paired or [], a.setup, b.setup)
        if ratio is not None:
            return within(ratio, settings.noise_floor)
        return _overlap(a, b) or abs(a.speed - b.speed) <= noise * max(a.speed, b.speed)
    if not (
        math.isfinite(_score(a, viable, settings)) and math.isfinite(_score(b, viable, settings))
    ):
        return False  # below the objective's throughput floor
    low = min(a.memory_per_sample, b.memory_per_sample)
    return abs(a.memory_per_sample - b.memory_per_sample) <= noise * low


def _label(c: Candidate) -> str:
    return c.setup.describe()


def _short(setup: Setup) -> str:
    """``mixed_bfloat16 b128``, with the loss scale where it is not the policy's default and
    the knobs that are not at theirs (``float32+tf32 b64 xla spe4``)."""
    default = setup.loss_scale == LossScale.default_for(setup.policy)
    return " ".join(
        (
            f"{setup.precision} b{setup.batch_size}",
            *(() if default else (str(setup.loss_scale),)),
            *setup.knobs,
        )
    )


def _subject(setup: Setup) -> str:
    """``float32+tf32 at batch size 128``, with the knobs: ``... with XLA and 4 steps per
    execution``."""
    backend_words = () if setup.backend == TENSORFLOW else (f"on {BACKEND_NAMES[setup.backend]}",)
    knobs = [w for w in setup.knob_words() if w not in backend_words]  # said after the knobs
    with_knobs = f" with {and_join(knobs)}" if knobs else ""
    backend = "" if setup.backend == TENSORFLOW else f" on {BACKEND_NAMES[setup.backend]}"
    return f"{setup.precision} at batch size {setup.batch_size}{with_knobs}{backend}"


def _figures(spread: tuple[float, float] | None, speed: float | None) -> str:
    if spread is None:
        return _fmt(speed, ",.0f")
    low, high = spread
    return f"{low:,.0f}" if round(low) == round(high) else f"{low:,.0f}-{high:,.0f}"


def _tie_text(
    setup: Setup,
    spread: tuple[float, float],
    speed: float,
    ties: tuple[Alternative, ...],
) -> str:
    """``a and b tie within the measurement noise (spreads ... samples/s)``."""
    names = [_short(setup)] + [_short(t.setup) for t in ties]
    figures = [_figures(spread, speed)] + [_figures(t.spread, t.samples_per_second) for t in ties]
    spreads = and_join(figures)
    return f"{and_join(names)} tie within the measurement noise (spreads {spreads} samples/s)"


def _hardware_phrase(hardware: dict[str, Any] | None, device: str | None) -> str:
    if not hardware:
        return ""
    gpus = hardware.get("gpus") or []
    if device and device.startswith("gpu") and gpus:
        gpu = gpus[0]
        units = (gpu.get("units") or {}).get("summary") or "no Tensor Cores"
        return (
            f"the {gpu.get('name', 'GPU')} (compute capability "
            f"{gpu.get('compute_capability', '?')}) has {units}"
        )
    flags = set((hardware.get("cpu") or {}).get("flags") or [])
    model = (hardware.get("cpu") or {}).get("model") or "this CPU"
    low = sorted(flags & {"avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16", "bf16", "fp16"})
    if low:
        return f"{model} has {', '.join(low)} units, and training ran on the CPU"
    return f"{model} has no bfloat16/float16 units, and training ran on the CPU"


def _reason(
    chosen: Candidate,
    f32: Candidate | None,
    viable: list[Candidate],
    outcome: SearchOutcome,
    hardware: dict[str, Any] | None,
    ties: list[Candidate],
    settings: SearchSettings,
) -> str:
    device = chosen.runs[0].result.device
    hw = _hardware_phrase(hardware, device)
    because = f" ({hw})" if hw else ""
    precision, subject = chosen.setup.precision, _subject(chosen.setup)
    gap = f"{chosen.loss_gap:.2%}" if chosen.loss_gap is not None else "n/a"
    tie = ""
    if ties:
        alts = tuple(_alternative(c, None) for c in ties)
        tie = (
            _tie_text(chosen.setup, chosen.spread, chosen.speed, alts)
            + f", so the simpler {_short(chosen.setup)} is recommended"
        )
    if ties and (precision == FLOAT32 or any(c.setup.precision == FLOAT32 for c in ties)):
        # A tie with float32: no speed-up to state.
        tail = "" if precision == FLOAT32 else f"; loss gap to float32 {gap}"
        return f"{tie}{because}{tail}."
    tie_sentence = (
        f" It ties with {and_join([_short(c.setup) for c in ties])} within the measurement noise "
        "and is the simpler setup."
        if ties
        else ""
    )
    if precision == FLOAT32:
        others = [c for c in viable if c.setup.precision != FLOAT32]
        rel = ", ".join(
            f"{c.setup.precision} reached {c.speed / chosen.speed:.2f}x"
            for c in others
            if chosen.speed
        )
        abandoned = ", ".join(
            f"{p} is unsafe for this model (its hazard says why and how to fix the model)"
            if _is_unsafe(why)
            else f"{p} was dropped ({why})"
            for p, why in outcome.abandoned.items()
        )
        detail = "; ".join(x for x in (rel, abandoned) if x)
        return f"{subject} is the best setup here{because}" + (f": {detail}." if detail else ".")
    if f32 is None or not f32.speed:
        return (
            f"{subject} is the only setup that "
            f"worked{because}; loss gap to float32 {gap}.{tie_sentence}"
        )
    ratio = _ratio(f32, chosen, outcome.paired)
    figures = f"({chosen.speed:,.0f} vs {f32.speed:,.0f} samples/s)"
    if paired_ratio(outcome.paired, f32.setup, chosen.setup) is not None:
        figures = f"{figures[:-1]}, measured back to back)"
    if paired_ratio(outcome.paired, f32.setup, chosen.setup) is not None:
        inside = within(ratio, settings.noise_floor)
    else:
        inside = _overlap(chosen, f32) or abs(ratio - 1) <= _noise(chosen, f32, settings)
    if inside:
        verdict = f"as fast as float32 here within the measurement noise {figures}"
    elif ratio > 1:
        verdict = f"{ratio:.2f}x faster than float32 here {figures}"
    else:
        verdict = f"{ratio:.2f}x as fast as float32 here but leaner in memory {figures}"
    return (
        f"{subject} is {verdict}{because}, with a loss gap "
        f"of {gap} to float32 at the same batch size and seed.{tie_sentence}"
    )


def _alternative(c: Candidate, f32: Candidate | None) -> Alternative:
    if not c.runs:  # it never measured (a policy that fails on this model)
        return Alternative(c.setup, None, None, c.loss_gap, c.rejected)
    return Alternative(
        c.setup,
        c.speed,
        c.speed / f32.speed if f32 and f32.speed else None,
        c.loss_gap,
        c.rejected,
        tuple(sorted(r.number for r in c.runs)),
        c.spread if c.runs else None,
    )


def _not_tried(outcome: SearchOutcome, space: SearchSpace) -> list[dict[str, str]]:
    items = [
        {"what": policy, "why": "not in the search space (--policies or the hardware prior)"}
        for policy in POLICIES
        if policy not in space.policies
    ]
    first = (
        "its first batch size that fits the global batch"
        if space.global_batch is not None
        else f"batch size {space.start_batch}"
    )
    items += [
        {
            "what": f"{policy} beyond {first}",
            "why": "unsafe for this model (see its hazard)" if _is_unsafe(why) else why,
        }
        for policy, why in outcome.abandoned.items()
    ]
    if "xla" in outcome.knobs_skipped:
        items.append({"what": "XLA", "why": outcome.knobs_skipped["xla"]})
    if outcome.stopped_early:
        items.append({"what": "the rest of the search", "why": outcome.stopped_early})
    return items


def _is_unsafe(why: str) -> bool:
    """Whether a reason a policy was dropped is the numerics probe's (its hazards tell more)."""
    return "is unsafe for this model" in why


def _no_viable_message(outcome: SearchOutcome) -> str:
    reasons = []
    for setup, runs in sorted(outcome.measured.items(), key=lambda item: item[0].key):
        if first_ok(runs) is None:
            r = runs[-1].result
            again = " (ran twice)" if len(runs) > 1 else ""
            reasons.append(
                f"{setup.label}: {r.status.value}{again}"
                + (f" ({r.error.message})" if r.error else "")
            )
    reasons += [f"{_label(c)}: {c.rejected}" for c in outcome.candidates if c.rejected]
    shown = "; ".join(reasons[:6]) + (f"; and {len(reasons) - 6} more" if len(reasons) > 6 else "")
    return "no viable setup: " + (shown or "no trial finished")


def _fmt(value: Any, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def evidence_rows(rec: Recommendation) -> list[tuple[str, str]]:
    """A recommendation as labelled lines of plain text, the same for the CLI and the GUI."""
    low, high = rec.samples_per_second_spread
    setup = rec.setup
    rows = [
        ("Setup", _setup_text(setup)),
        (
            "Throughput",
            f"{rec.samples_per_second:,.0f} samples/s (measured "
            f"{_fmt(low, ',.0f')} to {_fmt(high, ',.0f')})",
        ),
        (
            "Against float32",
            f"{_fmt(rec.speedup_vs_float32, '.2f')}x the best float32 "
            f"setup, {_fmt(rec.speedup_vs_baseline, '.2f')}x float32 at "
            "the starting batch size",
        ),
        (
            "Memory",
            f"{_fmt(rec.peak_memory_mb, ',.0f')} MB peak"
            + (_memory_against_float32(rec.memory_saving) if rec.memory_saving is not None else ""),
        ),
        ("Loss gap", f"{rec.loss_gap:.2%} to float32" if rec.loss_gap is not None else "n/a"),
        *((k.label, k.detail) for k in rec.knobs or _plain_knobs(setup)),
        ("Evidence", "trials " + ", ".join(f"#{n}" for n in rec.trials)),
        ("Why", rec.reason),
    ]
    for p in rec.paired:
        rows.append(("Final" if p.stage == "final" else "Runoff", paired_text(p, setup)))
    if rec.ties:
        text = _tie_text(rec.setup, rec.samples_per_second_spread, rec.samples_per_second, rec.ties)
        rows.append(("Tie", f"{text}; re-run on an idle machine to separate them"))
    if rec.busy:
        rows.append(("Busy machine", rec.busy[0].upper() + rec.busy[1:]))
    for alt in rec.alternatives:
        verdict = alt.rejected or f"{_fmt(alt.speedup_vs_float32, '.2f')}x float32"
        if alt.rejected and alt.speedup_vs_float32 is not None and "throughput" not in verdict:
            verdict += f" (measured {alt.speedup_vs_float32:.2f}x float32)"
        rows.append(
            (
                "Alternative",
                f"{alt.setup.label}: {_fmt(alt.samples_per_second, ',.0f')} samples/s, {verdict}",
            )
        )
    for hazard in rec.hazards:
        label = "Unsafe" if hazard.unsafe else "Hazard"
        rows.append((label, hazard.describe()))
    rows += [("Not tried", f"{item['what']}: {item['why']}") for item in rec.not_tried]
    rows += [("Note", note) for note in rec.notes if note != rec.busy]
    return rows


def paired_text(p: Paired, chosen: Setup) -> str:
    """``float32 b1024 spe16 and mixed_bfloat16 b768 spe16 measured back to back in 3 turns:
    mixed_bfloat16 b768 spe16 ran 1.31x float32 b1024 spe16 (1.28, 1.31, 1.35; trials #30,
    ...)``: each other setup against ``chosen``."""
    others = [s for s in p.setups if s != chosen]
    parts = []
    for s in others:
        ratios = p.ratios(s, chosen)
        median = statistics.median(ratios) if ratios else None
        each = ", ".join(f"{r:.2f}" for r in ratios) or "no turn ran both"
        parts.append(f"{_fmt(median, '.2f')}x {_short(s)} ({each})")
    numbers = ", ".join(f"#{n}" for n in p.numbers())
    return (
        f"{and_join([_short(s) for s in p.setups])} measured back to back in {len(p.speeds)} "
        f"turns: {_short(chosen)} ran " + "; ".join(parts) + f" (trials {numbers})"
    )


def _memory_against_float32(saving: float) -> str:
    """``, 12% less than float32 at this batch size`` (or more, or the same)."""
    if round(saving, 2) == 0:
        return ", the same as float32 at this batch size"
    more_or_less = "less" if saving > 0 else "more"
    return f", {abs(saving):.0%} {more_or_less} than float32 at this batch size"


def _setup_text(setup: Setup) -> str:
    """``float32+tf32, batch size 128, loss scale none, XLA, 4 steps per execution``."""
    parts = [
        str(setup.precision),
        f"batch size {setup.batch_size}",
        f"loss scale {setup.loss_scale}",
        *setup.knob_words(),
    ]
    return ", ".join(parts)


def _plain_knobs(setup: Setup) -> tuple[KnobEvidence, ...]:
    """The knobs of a recommendation stored before they had evidence: their settings only."""
    acc = setup.gradient_accumulation_steps
    tf32 = (
        f"not applicable: {setup.policy} computes in {setup.policy.compute_dtype}"
        if setup.policy.is_mixed
        else "on"
        if setup.tf32
        else "off"
    )
    return (
        KnobEvidence("xla", "on" if setup.xla else "off", "on" if setup.xla else "off"),
        KnobEvidence(
            "steps_per_execution",
            str(setup.steps_per_execution),
            str(setup.steps_per_execution),
        ),
        KnobEvidence("tf32", "on" if setup.tf32 else "off", tf32),
        KnobEvidence(
            "global_batch",
            str(setup.global_batch),
            f"{setup.global_batch}"
            + (f" (batch size {setup.batch_size} x {acc} accumulation steps)" if acc > 1 else ""),
        ),
    )
