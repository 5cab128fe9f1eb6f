"""The values a search measures and the maths that compares them, apart from the algorithm
that decides what to measure (:mod:`tuner.search.strategy`): what a trial measured
(:class:`Measured`), a setup that may be recommended (:class:`Candidate`), a knob stage's
finding (:class:`KnobTrial`), setups measured back to back (:class:`Paired`, :func:`within`,
:func:`decide`, :func:`settled`), the loss gap to float32, and the search's outcome. The
recommendation (:mod:`tuner.search.recommend`) reads these without the algorithm.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tuner.policies import FLOAT32
from tuner.record import from_data, to_data
from tuner.search.space import SearchSettings
from tuner.search.stage import EXPLORING
from tuner.setup import KNOBS, LossScale, Setup, losses_grouped
from tuner.trials.result import TrialResult


@dataclass(frozen=True)
class Measured:
    """A trial result with its number in the session."""

    number: int
    result: TrialResult
    #: the stage that ran it (baseline, policies, batch, refine, loss-scale, xla,
    #: steps-per-execution, guard, remeasure)
    stage: str = ""

    @property
    def speed(self) -> float:
        """Effective samples/s: a step the loss scaler skipped trained nothing
        (:attr:`TrialResult.trained_samples_per_second`, the trial's one figure)."""
        return self.result.trained_samples_per_second or 0.0

    @property
    def memory_per_sample(self) -> float:
        peak = self.result.peak_memory_mb
        return peak / self.result.spec.batch_size if peak else math.inf


@dataclass
class Candidate:
    """A setup that may be recommended, with every measurement of it."""

    setup: Setup
    runs: list[Measured] = field(default_factory=list)
    loss_gap: float | None = None
    guard_trial: int | None = None
    rejected: str | None = None

    @property
    def speed(self) -> float:
        """Median effective samples/s; 0 for a setup that never measured (a policy that fails
        on this model)."""
        return statistics.median(r.speed for r in self.runs) if self.runs else 0.0

    @property
    def spread(self) -> tuple[float, float]:
        speeds = [r.speed for r in self.runs] or [0.0]
        return min(speeds), max(speeds)

    @property
    def relative_spread(self) -> float:
        low, high = self.spread
        return (high - low) / self.speed if self.speed else 0.0

    @property
    def memory_per_sample(self) -> float:
        if not self.runs:
            return math.inf
        return statistics.median(r.memory_per_sample for r in self.runs)

    @property
    def peak_memory_mb(self) -> float | None:
        peaks = [r.result.peak_memory_mb for r in self.runs if r.result.peak_memory_mb]
        return statistics.median(peaks) if peaks else None

    def simplicity(self) -> tuple[int, ...]:
        """Lower is simpler: float32 over mixed, IEEE over TF32, dynamic over fixed, no knobs,
        the smaller batch."""
        return self.setup.simplicity()


@dataclass(frozen=True)
class KnobTrial:
    """What a knob stage found for one precision: a knob value tried against the precision's
    pick, and whether it was adopted; or, with ``tried`` None, why the stage did not run.

    Attributes:
        precision: the precision (``Setup.precision``) whose pick the knob was tried on.
        knob: ``xla``, ``steps_per_execution`` or ``neighbourhood`` (a move to a better
            neighbour of the pick: ``base`` to ``tried``).
        base: the setup it was compared with (the pick, with the knobs adopted before it).
        tried: the setup with the knob set; None when the stage did not run.
        base_speed: the base's effective samples/s.
        speed: the tried setup's effective samples/s; None when it failed or did not run.
        trials: the base's trial(s) and the tried setup's trial.
        adopted: the knob paid beyond the noise floor and the pick keeps it.
        status: how the tried trial ended (``ok``, ``unsupported``, ``oom``, ...).
        reason: why the stage did not run, or why the trial failed.
    """

    precision: str
    knob: str
    base: Setup
    tried: Setup | None
    base_speed: float
    speed: float | None = None
    trials: tuple[int, ...] = ()
    adopted: bool = False
    status: str | None = None
    reason: str | None = None

    @property
    def gain(self) -> float | None:
        """The tried setup's speed over the base's (1.2: 20% faster); None without both."""
        if self.speed is None or not self.base_speed:
            return None
        return self.speed / self.base_speed


@dataclass
class SearchOutcome:
    """What a search found: candidates, rejections, notes; the recommendation is made from it."""

    candidates: list[Candidate]
    baseline: Measured | None
    abandoned: dict[str, str]
    notes: list[str]
    stopped_early: str | None
    measured: dict[Setup, list[Measured]]
    memory_budget_mb: float | None = None
    #: every knob stage's finding, in the order they ran (and the stages skipped per precision)
    knobs: list[KnobTrial] = field(default_factory=list)
    #: knob -> why no precision tried it (``--xla off``, a CPU under ``--xla auto``, a model
    #: XLA cannot compile)
    knobs_skipped: dict[str, str] = field(default_factory=dict)
    #: the setups measured back to back, in turns (the runoffs, the final), in the order
    #: they ran
    paired: list[Paired] = field(default_factory=list)
    #: the precision the user's training runs in today, unchanged (``float32+tf32`` where the
    #: backend's float32 defaults to TF32 on this device, see ``space.default_float32``): what
    #: the recommendation's speed-up is stated against
    reference: str = "float32"
    #: what the backend's float32 computes in by default on this device, in words, where TF32
    #: exists (``space.DEFAULT_NOTES``); None elsewhere
    reference_note: str | None = None
    #: the stages a time budget cut short to keep their successors' first trials
    #: (``StageCut``), by :func:`~tuner.search.stage.budget_group`, in the order they were cut
    cut_short: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Paired:
    """Setups measured back to back, in turns: each turn ran every one of them once, one
    after the other, so a turn's runs share the machine's state (a slow minute, a busy
    neighbour, a warm cache) and the ratio of two of them is free of it. On this project's
    CPUs one setup's figure swings up to 2x between runs minutes apart while the ratio of two
    setups run back to back stays within a few percent, so two setups are compared on the
    median of their per-turn ratios, not on their figures taken at different times.

    Attributes:
        stage: the stage that measured them (``runoff``: a precision's leading setups;
            ``final``: the leading precisions' picks).
        setups: the setups, in the order of the columns of ``speeds`` and ``trials``.
        speeds: per turn, each setup's effective samples/s (0 for a run that failed).
        trials: per turn, each setup's trial number.
    """

    stage: str
    setups: tuple[Setup, ...]
    speeds: tuple[tuple[float, ...], ...]
    trials: tuple[tuple[int, ...], ...]

    def ratios(self, a: Setup, b: Setup) -> list[float]:
        """``b``'s speed over ``a``'s, turn by turn, over the turns where both ran ok."""
        i, j = self.setups.index(a), self.setups.index(b)
        return [turn[j] / turn[i] for turn in self.speeds if turn[i] > 0 and turn[j] > 0]

    def ratio(self, a: Setup, b: Setup) -> float | None:
        """The median of :meth:`ratios` (1.05: ``b`` 5% faster than ``a``); None when fewer
        than two turns ran both ok, or when either was not measured here."""
        if a not in self.setups or b not in self.setups:
            return None
        ratios = self.ratios(a, b)
        return statistics.median(ratios) if len(ratios) >= 2 else None

    def numbers(self, *setups: Setup) -> tuple[int, ...]:
        """The trials of ``setups`` (all when none is named), in the order they ran."""
        columns = [self.setups.index(s) for s in setups] if setups else range(len(self.setups))
        return tuple(sorted(turn[c] for turn in self.trials for c in columns))

    def to_dict(self) -> dict[str, Any]:
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Paired:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: a turn does not have one figure and one trial per setup.
        """
        paired = from_data(cls, data)
        setups, speeds, trials = paired.setups, paired.speeds, paired.trials
        if any(len(t) != len(setups) for t in (*speeds, *trials)) or len(speeds) != len(trials):
            raise ValueError("a paired comparison whose turns do not match its setups")
        return paired


def paired_ratio(paired: Sequence[Paired], a: Setup, b: Setup) -> float | None:
    """``b``'s speed over ``a``'s from the last comparison that measured both back to back;
    None when none did."""
    for p in reversed(paired):
        ratio = p.ratio(a, b)
        if ratio is not None:
            return ratio
    return None


def within(ratio: float, margin: float) -> bool:
    """Whether two setups whose speeds stand in ``ratio`` are within ``margin`` of each other,
    the same whichever is on top: ``1 - margin <= ratio <= 1 / (1 - margin)``."""
    return 1 - margin <= ratio <= 1 / (1 - margin)


def decide(ratios: dict[Setup, float], margin: float) -> Setup:
    """Of setups with their speeds relative to one of them: the simplest whose speed is within
    ``margin`` of the fastest's (:func:`within`)."""
    fastest = max(ratios.values())
    return min(
        (s for s, r in ratios.items() if within(r / fastest, margin)),
        key=lambda s: s.simplicity(),
    )


def settled(bounds: dict[Setup, tuple[float, float]], margin: float) -> bool:
    """Whether :func:`decide` chooses the same setup for every ratio within its bounds (the
    range the ratio's median can still take): the setup chosen at the bounds' middle stays
    within the margin of the fastest even at its lowest against the others at their highest,
    and no simpler setup can come within the margin even at its highest against the others at
    their lowest."""
    middle = {s: (lo + hi) / 2 for s, (lo, hi) in bounds.items()}
    chosen = decide(middle, margin)

    def others(s: Setup, end: int) -> float:
        return max((b[end] for t, b in bounds.items() if t != s), default=0.0)

    low = bounds[chosen][0]
    if low < (1 - margin) * max(others(chosen, 1), low):
        return False
    for s in bounds:
        high = bounds[s][1]
        if s.simplicity() < chosen.simplicity() and high >= (1 - margin) * max(others(s, 0), high):
            return False
    return True


def first_ok(runs: Sequence[Measured]) -> Measured | None:
    """The first of a setup's runs that ended ok: the one the search uses for that setup (a run
    that crashed or timed out may come before it, retried)."""
    return next((r for r in runs if r.result.ok), None)


def held(runs: Sequence[Measured]) -> list[Measured]:
    """A setup's ok runs whose figures hold (:attr:`TrialResult.holds`), or all its ok runs
    where none holds: what the setup stands on. A figure that did not hold in an exploring
    stage was measured again at once (issue 70), and the run that held stands in its place."""
    ok = [r for r in runs if r.result.ok]
    return [r for r in ok if r.result.holds] or ok


def first_held(runs: Sequence[Measured]) -> Measured | None:
    """The first of a setup's runs that ended ok on a figure that holds, else its first ok run
    (:func:`held`): the one the search uses for that setup."""
    found = held(runs)
    return found[0] if found else None


def representative(runs: Sequence[Measured]) -> Measured:
    """The run that stands for a setup: its first ok run that holds (:func:`first_held`), else
    its last (failed) run."""
    return first_held(runs) or runs[-1]


def median_bounds(paired: Paired, turns: int) -> dict[Setup, tuple[float, float]] | None:
    """The range each setup's median ratio to the first can still take once all ``turns``
    (an odd number) have run, whatever the turns left measure; None while some setup has too
    few turns for that to be bounded, or when ``turns`` is even."""
    if turns % 2 == 0:
        return None
    first = paired.setups[0]
    left = turns - len(paired.speeds)
    middle = (turns - 1) // 2
    bounds = {first: (1.0, 1.0)}
    for s in paired.setups[1:]:
        known = sorted(paired.ratios(first, s))
        if middle - left < 0 or len(known) <= middle:
            return None
        bounds[s] = (known[middle - left], known[middle])
    return bounds


def reference_of(setup: Setup) -> Setup:
    """The IEEE float32 setup whose losses ``setup``'s are compared with (what the numerical
    guard checks against): the same batch size and backend, and the same value of every knob
    that groups the losses (:attr:`~tuner.knobs.Knob.groups_losses`: accumulation, steps per
    execution); every other knob at its default."""
    return Setup(
        FLOAT32, setup.batch_size, LossScale("none"), backend=setup.backend, **losses_grouped(setup)
    )


#: Fewer common measured steps than this leave no loss window to compare (:func:`loss_gap`).
MIN_GAP_STEPS = 4


def too_few_steps(result: TrialResult, reference: int | None = None) -> str:
    """Why ``result`` has no loss gap though float32 ran (trial ``reference``): its loss window
    is too short, and a pruned trial's why."""
    against = f" trial #{reference}" if reference is not None else ""
    pruned = " (it stopped measuring early: pruned)" if result.pruned else ""
    return f"too few measured steps to compare its loss with float32{against}{pruned}"


@dataclass(frozen=True)
class TrialGap:
    """One trial's loss gap to IEEE float32 (:func:`loss_gap`), or why it has none.

    Attributes:
        gap: the relative gap (``inf`` where either trial's loss was not finite); None when
            there is none to give (``why`` says why).
        reference: the number of the float32 trial it was compared with, where there is one.
        reference_batch: that trial's batch size.
        why: why there is no gap; None when there is one.
    """

    gap: float | None
    reference: int | None = None
    reference_batch: int | None = None
    why: str | None = None

    def words(self) -> str:
        """The gap and what it compares, or why there is none, in a sentence."""
        if self.gap is None:
            return f"No loss gap: {self.why}."
        return (
            f"{self.gap:.2%} against float32 trial #{self.reference} at batch size "
            f"{self.reference_batch}: the same seed and data, the mean loss over the last "
            "quarter (at least 4) of the steps both measured."
        )


def trial_loss_gaps(
    trials: Mapping[int, TrialResult], window: int | None = None
) -> dict[int, TrialGap]:
    """Every trial's loss gap to IEEE float32, the numerical guard's comparison for each trial:
    against the first ok float32 trial of the same model, seed and warm-up at
    :func:`reference_of` its setup (the one the guard recalls), over ``window`` measured steps
    (the guard's, by default). Each trial of a lower precision that ended ok has an entry: its
    gap, or why it has none. A trial of IEEE float32 (with or without knobs: the precision the
    others are compared with, as the guard has it) and one that did not end ok have none.

    Args:
        trials: results by their number in the session.
        window: the measured steps compared (their last quarter); the search's
            ``guard_steps`` when None.
    """
    steps = window if window is not None else SearchSettings().guard_steps
    references: dict[tuple[Setup, str, int, int], int] = {}
    for number in sorted(trials):
        spec = trials[number].spec
        key = (spec.setup, spec.model, spec.seed, spec.warmup_steps)
        if trials[number].ok and spec.setup == reference_of(spec.setup):
            references.setdefault(key, number)
    gaps = {}
    for number, result in trials.items():
        setup = result.spec.setup
        if not result.ok or setup.precision == FLOAT32:
            continue
        spec = result.spec
        found = references.get((reference_of(setup), spec.model, spec.seed, spec.warmup_steps))
        if found is None:
            grouped = "".join(
                f" and {said}"
                for knob in KNOBS
                if knob.groups_losses and (said := knob.say(setup)) is not None
            )
            gaps[number] = TrialGap(
                None,
                why=f"no float32 trial at batch size {setup.batch_size}{grouped} ran in this "
                "session (the search runs one for each setup it may recommend)",
            )
            continue
        reference = trials[found]
        gap = loss_gap(result, reference, steps)
        if gap is None:
            why = too_few_steps(result, found)
            gaps[number] = TrialGap(None, found, reference.spec.batch_size, why=why)
        else:
            gaps[number] = TrialGap(gap, found, reference.spec.batch_size)
    return gaps


class Staged(Protocol):
    """A trial as a face lists it: its number in the session, the stage that ran it, its
    result (None: it closed without one)."""

    @property
    def number(self) -> int: ...

    @property
    def stage(self) -> str: ...

    @property
    def result(self) -> TrialResult | None: ...


def figure_notes(trials: Iterable[Staged]) -> dict[int, str]:
    """By trial number, what the trials table says of each trial whose figure did not hold
    (:attr:`TrialResult.holds`) and of the run that measured it again (issue 70): ``its mean
    step 98 ms was 75.4x its median 1.3 ms: the figure did not hold, measured again in #4``,
    and on #4 ``measured again: the first figure (#3) did not hold``. An exploring stage
    (:data:`~tuner.search.stage.EXPLORING`) measures such a figure again at once, in the same
    stage; elsewhere the note says only that it did not hold."""
    notes: dict[int, str] = {}
    waiting: dict[tuple[Setup, str], int] = {}  # the runs owed their second look
    for t in sorted(trials, key=lambda t: t.number):
        r = t.result
        if r is None:
            continue
        first = waiting.pop((r.spec.setup, t.stage), None)
        if first is not None:
            notes[first] += f", measured again in #{t.number}"
            notes[t.number] = f"measured again: the first figure (#{first}) did not hold"
            if r.ok and not r.holds:
                notes[t.number] += f"; this one neither ({r.unheld_words})"
        elif r.ok and not r.holds:
            notes[t.number] = f"{r.unheld_words}: the figure did not hold"
            if t.stage in EXPLORING:
                waiting[(r.spec.setup, t.stage)] = t.number
    return notes


def loss_gap(candidate: TrialResult, reference: TrialResult, window: int) -> float | None:
    """Relative gap between two trials' mean loss over the last quarter (at least
    :data:`MIN_GAP_STEPS` steps) of the candidate's first ``window`` measured steps that the
    reference measured after as many updates (same seed, same data). A float16 trial whose loss
    scale skipped steps while it came down (calibration, issue 35) starts measuring after fewer
    updates than its float32 reference:
    its step k is compared with the reference's step that had applied as many, not with the
    reference's step k. Skips among the measured steps are not re-aligned: they count against
    the setup, as a run that keeps skipping trains less. Both must run the same steps per
    execution (see :func:`tuner.search.stages.guard.float32_at`)."""
    shift = reference.updates_before - candidate.updates_before
    # Candidate step i pairs with reference step i - shift.
    first = max(0, shift)
    last = min(len(candidate.losses), window, len(reference.losses) + shift)
    n = last - first
    if n < MIN_GAP_STEPS:
        return None
    # At least MIN_GAP_STEPS steps averaged: a short window's last steps of early training
    # differ by chance (Keras' ResNet50 at 32x32, mixed_bfloat16 b96 against float32 over 8
    # steps on a 2-core CPU: 8.5% over the last 2, 2.1% over the last 4; issue 50).
    tail = range(last - max(MIN_GAP_STEPS, n // 4), last)
    a = [candidate.losses[i] for i in tail]
    b = [reference.losses[i - shift] for i in tail]
    if not all(math.isfinite(v) for v in a + b):
        return math.inf
    mean_a, mean_b = statistics.fmean(a), statistics.fmean(b)
    return abs(mean_a - mean_b) / max(abs(mean_b), 1e-12)


def choose(
    setups: list[Measured],
    settings: SearchSettings,
    speed: Callable[[Measured], float] | None = None,
) -> Measured | None:
    """The best of ``setups`` for the objective: the fastest (``speed``), or the least memory
    per sample among those within the throughput floor of the fastest (``memory``: 80%,
    ``balanced``: 95%). ``speed``: what a setup's figure is (a run's own by default; the
    leader's, :meth:`SearchContext.leading`, the median of its setup's runs)."""
    if not setups:
        return None
    rate = speed or (lambda m: m.speed)
    # An exact tie goes to the smaller batch (the same speed for less memory), whichever
    # order the setups were measured in (a ladder that leapt met the larger first).
    fastest = max(setups, key=lambda m: (rate(m), -m.result.spec.batch_size))
    if settings.objective == "speed":
        return fastest
    floor = settings.memory_throughput_floor if settings.objective == "memory" else 0.95
    eligible = [m for m in setups if rate(m) >= floor * rate(fastest)]
    return min(eligible, key=lambda m: (m.memory_per_sample, -rate(m)))


def simplest(c: Candidate) -> tuple[tuple[int, ...], str, str]:
    """Sort key, simplest first; the names make the order total, so a choice among tied setups
    never depends on the order they were measured in."""
    return c.simplicity(), str(c.setup.policy), str(c.setup.loss_scale)


def score(cand: Candidate, viable: list[Candidate], settings: SearchSettings) -> float:
    if settings.objective == "speed":
        return cand.speed
    floor = settings.memory_throughput_floor if settings.objective == "memory" else 0.95
    fastest = max(c.speed for c in viable)
    if cand.speed < floor * fastest:
        return -math.inf
    return -cand.memory_per_sample


def noise(a: Candidate, b: Candidate, settings: SearchSettings) -> float:
    """The relative difference that is noise between two setups: the larger of the noise floor
    and their measured spreads."""
    return max(settings.noise_floor, a.relative_spread, b.relative_spread)


def overlap(a: Candidate, b: Candidate) -> bool:
    """Whether the measured ranges of samples/s overlap."""
    return a.spread[0] <= b.spread[1] and b.spread[0] <= a.spread[1]


def speed_ratio(a: Candidate, b: Candidate, paired: list[Paired]) -> float:
    """``b``'s speed over ``a``'s: from their runs back to back where they were measured so,
    else from their medians."""
    ratio = paired_ratio(paired, a.setup, b.setup)
    return ratio if ratio is not None else b.speed / a.speed


def tie(
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
    margin = noise(a, b, settings)
    if settings.objective == "speed":
        ratio = paired_ratio(paired or [], a.setup, b.setup)
        if ratio is not None:
            return within(ratio, settings.noise_floor)
        return overlap(a, b) or abs(a.speed - b.speed) <= margin * max(a.speed, b.speed)
    if not (
        math.isfinite(score(a, viable, settings)) and math.isfinite(score(b, viable, settings))
    ):
        return False  # below the objective's throughput floor
    low = min(a.memory_per_sample, b.memory_per_sample)
    return abs(a.memory_per_sample - b.memory_per_sample) <= margin * low
