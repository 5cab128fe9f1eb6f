"""From a search outcome to a recommendation a user can trust, with its evidence: the decision.
The records it makes are :mod:`tuner.search.records`, their words :mod:`tuner.search.wording`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Any

from tuner.hardware.gpu_use import UnusedGpu, unused_in_search
from tuner.hardware.profile import HardwareProfile
from tuner.policies import FLOAT32, POLICIES
from tuner.said import setting
from tuner.search.measures import (
    Candidate,
    KnobTrial,
    Paired,
    SearchOutcome,
    first_ok,
    paired_ratio,
    score,
    simplest,
    speed_ratio,
    tie,
)
from tuner.search.records import (
    Alternative,
    KnobEvidence,
    NoViableSetup,
    Recommendation,
)
from tuner.search.space import SearchSettings, SearchSpace
from tuner.search.wording import (
    batch_note,
    busy,
    evidence_rows,
    is_unsafe,
    knob_line,
    no_viable_message,
    reason,
    tie_text,
)
from tuner.setup import KNOBS, Decided, Knob, LossScale, Setup
from tuner.trials.hazards import NOT_TRAINING, TRAPS, merge


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
    # The one rule behind every figure stated here: a setup's figure is the median of all its
    # measured runs (a re-measurement the search took after its stages, or that a budget left
    # unused, included), and every ratio names the run or median it is against.
    candidates = _with_today([on_all_runs(c, outcome) for c in outcome.candidates], outcome, space)
    viable = [c for c in candidates if c.rejected is None]
    if not viable:
        raise NoViableSetup(no_viable_message(outcome))
    paired = outcome.paired
    chosen, leader, ties = _choose(viable, settings, paired)
    tie_note = tie_text(chosen, leader, paired) if chosen is not leader else None
    f32_best = _float32_to_compare(outcome, viable, chosen)
    baseline = _baseline(outcome)
    today = _today(outcome, space)
    memory_saving = _memory_saving(outcome, chosen)
    first = chosen.runs[0].result
    baseline_trials = _numbers(baseline) if baseline else ()
    trials = _evidence(chosen, f32_best, baseline)
    reference = _reference(outcome, candidates, chosen, f32_best)
    busy_note = busy(outcome, trials)
    # Where the backend's default is not a precision the search measures (PyTorch's TF32
    # convolutions with IEEE matmuls), the figures are against IEEE float32: say so.
    default_note = outcome.reference_note if outcome.reference == FLOAT32 else None
    notes = list(outcome.notes) + [
        n for n in (tie_note, batch_note(chosen.setup, space), busy_note, default_note) if n
    ]
    said = reason(chosen, f32_best, viable, outcome, hardware, ties, settings, reference)
    return Recommendation(
        setup=chosen.setup,
        samples_per_second=chosen.speed,
        samples_per_second_spread=chosen.spread,
        baseline_samples_per_second=baseline.speed if baseline else None,
        speedup_vs_baseline=(
            chosen.speed / baseline.speed if baseline and baseline.speed else None
        ),
        memory_saving=memory_saving,
        peak_memory_mb=chosen.peak_memory_mb,
        memory_kind=first.memory_kind,
        loss_gap=chosen.loss_gap,
        skipped_steps=first.skipped_steps,
        reason=_today_first(said, chosen, baseline, today, trap := today_trap(outcome, space)),
        trials=tuple(trials),
        objective=settings.objective,
        alternatives=tuple(Alternative.of(c, f32_best) for c in candidates if c is not chosen),
        not_tried=tuple(_not_tried(outcome, space)),
        notes=tuple(notes),
        device=first.device,
        unused_gpu=_unused_gpu(hardware, settings, first.device),
        versions=dict(first.versions),
        ties=tuple(Alternative.of(c, f32_best) for c in ties),
        busy=busy_note,
        hazards=merge(*(m.result.hazards for runs in outcome.measured.values() for m in runs)),
        knobs=_knob_evidence(chosen.setup, outcome, space),
        global_batch=space.global_batch,
        user_batch=space.user_batch,
        paired=tuple(p for p in paired if chosen.setup in p.setups),
        reference=outcome.reference,
        reference_samples_per_second=reference.speed if reference else None,
        speedup_vs_reference=(
            speed_ratio(reference, chosen, paired) if reference and reference.speed else None
        ),
        baseline_trials=baseline_trials,
        setup_trials=_numbers(chosen),
        reference_at=space.user_policy_at if outcome.reference == space.user_policy else None,
        today=today,
        today_trap=trap,
        **_against_float32(chosen, f32_best, paired),
        **_fed(chosen),
        **_as_the_script_runs(chosen),
    )


def _unused_gpu(
    hardware: dict[str, Any] | None, settings: SearchSettings, ran_on: str | None
) -> UnusedGpu | None:
    """The GPU the search's trials left unused, read from the profile it stored."""
    profile = HardwareProfile.from_dict(hardware) if hardware else None
    return unused_in_search(profile, settings.backend, settings.device, ran_on)


def _as_the_script_runs(chosen: Candidate) -> dict[str, Any]:
    """What a training script's fit does that the chosen setup's figures leave out, and the
    distribution it trains in, read back by its trials (issue 49); nothing for a model file."""
    found: dict[str, Any] = {}
    for m in chosen.runs:
        script, trained = m.result.script, m.result.trained
        if script is not None and "left_out" not in found:
            found["left_out"] = script.left_out
        if script is not None and script.validation_s is not None:
            found["validation_s"] = script.validation_s
        if trained is not None and trained.replicas > 1:
            found["distribution"], found["replicas"] = trained.distribution, trained.replicas
    return found


def _against_float32(
    chosen: Candidate, f32: Candidate | None, paired: list[Paired]
) -> dict[str, Any]:
    """The speed-up against float32 and what it is against: the float32 setup, the median of
    its runs and their trials, and whether it is the median of per-turn ratios measured back to
    back. 1.0 exactly when the chosen setup is float32 itself."""
    if f32 is None or not f32.speed:
        return {
            "float32_samples_per_second": f32.speed if f32 else None,
            "speedup_vs_float32": None,
        }
    return {
        "float32_setup": f32.setup,
        "float32_samples_per_second": f32.speed,
        "float32_trials": _numbers(f32),
        "speedup_vs_float32": 1.0 if f32 is chosen else speed_ratio(f32, chosen, paired),
        "float32_paired": f32 is not chosen
        and paired_ratio(paired, f32.setup, chosen.setup) is not None,
    }


def _today(outcome: SearchOutcome, space: SearchSpace) -> str | None:
    """What a training script trains today in words (issue 70), where the search's baseline is
    that setup, run unchanged; None where the baseline is float32 at the starting batch size."""
    own, base = space.user_setup, outcome.baseline
    if own is None or base is None or base.result.spec.setup != own:
        return None
    return space.user_setup_words


def today_trap(outcome: SearchOutcome, space: SearchSpace) -> str | None:
    """A trap in what a training script runs today (issue 71), as the recommendation's first
    line: its first trial (#0, the setup run unchanged) carries an unsafe trap hazard of its
    own precision (:data:`~tuner.trials.hazards.TRAPS`), or weights that did not move.
    ``your run today does not train: <evidence>. Fix: <fix>``, or ``... fails: ...`` where
    the trial could not train at all. None where it has none."""
    own = space.user_setup
    runs = outcome.measured.get(own, []) if own is not None else []
    if own is None or not runs:
        return None
    first = min(runs, key=lambda m: m.number).result
    found = [
        h
        for h in first.hazards
        if h.kind in TRAPS and h.policy == own.policy.name and (h.unsafe or h.kind == NOT_TRAINING)
    ]
    if not found:
        return None
    hazard = merge(found)[0]
    verb = "fails" if first.error is not None and not first.losses else "does not train"
    at = f" (at {hazard.at})" if hazard.at else ""
    return f"your run today {verb}: {hazard.evidence}{at}. Fix: {hazard.fix}"


def _with_today(
    candidates: list[Candidate], outcome: SearchOutcome, space: SearchSpace
) -> list[Candidate]:
    """The candidates, with what a training script runs today among them (issue 71): the user
    keeps it without any check of ours, so a search that a budget ended before its precision's
    best batch was compared with float32 (the whole precision rejected) never recommends a
    setup slower than it. Only where no pick of its precision stands, and not where today's
    run failed or carries an unsafe hazard (a trap: the run does not train); a candidate of
    the same setup rejected for a check it lacked gives way to it."""
    base = outcome.baseline
    if (
        space.user_setup is None
        or base is None
        or not base.result.ok
        or any(h.unsafe for h in base.result.hazards)
    ):
        return candidates
    setup = base.result.spec.setup
    if any(c.setup.precision == setup.precision and c.rejected is None for c in candidates):
        return candidates  # its precision's pick stands for it
    today = on_all_runs(Candidate(setup, [base]), outcome)
    if setup.precision == FLOAT32:
        today.loss_gap = 0.0
    return [c for c in candidates if c.setup != setup] + [today]


def _today_first(
    said: str,
    chosen: Candidate,
    baseline: Candidate | None,
    today: str | None,
    trap: str | None = None,
) -> str:
    """The recommendation's reason, led by a trap in what the script runs today (issue 71),
    else by the speed-up against it where that is the baseline (issue 70): the figure its
    user will see."""
    if trap is not None:
        return f"{trap[0].upper()}{trap[1:]}. {said}"
    if today is None or baseline is None or not baseline.speed:
        return said
    if chosen.setup == baseline.setup:
        return f"What you run today is the best setup measured here ({today}). {said}"
    ratio = chosen.speed / baseline.speed  # as speedup_vs_baseline states it
    return (
        f"{ratio:.2f}x what you run today ({today}: {chosen.speed:,.0f} vs "
        f"{baseline.speed:,.0f} samples/s). {said}"
    )


def _baseline(outcome: SearchOutcome) -> Candidate | None:
    """The baseline (float32 at the starting batch size, or what a training script trains
    today: issue 70), on all its runs; None where it did not run ok."""
    if outcome.baseline is None or not outcome.baseline.result.ok:
        return None
    return on_all_runs(Candidate(outcome.baseline.result.spec.setup, [outcome.baseline]), outcome)


def _evidence(chosen: Candidate, *against: Candidate | None) -> list[int]:
    """The trials behind the figures: the chosen setup's runs, its float32 reference in the
    guard, and the runs of each figure a ratio is stated ``against``."""
    numbers = {r.number for r in chosen.runs}
    if chosen.guard_trial is not None:
        numbers.add(chosen.guard_trial)
    for c in against:
        if c is not None and c.speed:
            numbers.update(_numbers(c))
    return sorted(numbers)


def on_all_runs(c: Candidate, outcome: SearchOutcome) -> Candidate:
    """``c`` standing on every run of its setup that ended ok, in the order they ran: the
    figure of a setup measured more than once is the median of all its runs, whichever stage
    took them (the stages decide on the runs they knew then; what is stated at the end knows
    them all). A candidate with no ok run (an unsafe policy's, measured with its fix) keeps
    the runs it has."""
    runs = [m for m in outcome.measured.get(c.setup, []) if m.result.ok]
    if not runs:
        return c
    return replace(c, runs=sorted(runs, key=lambda m: m.number))


def _numbers(c: Candidate) -> tuple[int, ...]:
    return tuple(sorted(m.number for m in c.runs))


def _fed(chosen: Candidate) -> dict[str, Any]:
    """The device's rate and the input's for the chosen setup (medians over its runs; the
    input's run is the one with the median rate), where its trials timed the input."""
    timed = sorted(
        (r.result for r in chosen.runs if r.result.input is not None),
        key=lambda r: r.input.samples_per_second if r.input else 0.0,
    )
    devices = [r.device_samples_per_second for r in timed if r.device_samples_per_second]
    if not timed or not devices:
        return {}
    return {
        "device_samples_per_second": statistics.median(devices),
        "input": timed[len(timed) // 2].input,
    }


def _choose(
    viable: list[Candidate], settings: SearchSettings, paired: list[Paired]
) -> tuple[Candidate, Candidate, list[Candidate]]:
    """The chosen candidate, the leader it was chosen for (the same unless a simpler one ties
    with it), and the candidates that tie with the chosen one, simplest first."""
    leader = max(viable, key=lambda c: score(c, viable, settings))
    if settings.objective == "speed":
        # Setups measured back to back are ranked on the ratio of their runs, not on figures
        # taken minutes apart on a machine that drifts.
        for c in viable:
            ratio = paired_ratio(paired, leader.setup, c.setup)
            if ratio is not None and ratio > 1:
                leader = c
    # Setups whose figures overlap are a tie, and a tie goes to the simplest of them: which of
    # them measured a little faster this time is noise, and must not decide the answer.
    tied = [c for c in viable if c is leader or tie(c, leader, viable, settings, paired)]
    chosen = min(tied, key=simplest)
    ties = sorted(
        (c for c in viable if c is not chosen and tie(c, chosen, viable, settings, paired)),
        key=simplest,
    )
    return chosen, leader, ties


def _float32_to_compare(
    outcome: SearchOutcome, viable: list[Candidate], chosen: Candidate
) -> Candidate | None:
    """The float32 setup a speed-up is stated against: the chosen setup itself where it is
    float32 (never another median of itself), else float32's pick measured back to back
    with the chosen setup (in the final) where there is one, else the best float32 setup. A
    figure of another float32 setup taken minutes earlier, on a machine that drifts, does not
    contradict what the two measured side by side."""
    if chosen.setup.precision == FLOAT32:
        return chosen
    return next(
        (
            c
            for c in viable
            if c.setup.precision == FLOAT32
            and paired_ratio(outcome.paired, c.setup, chosen.setup) is not None
        ),
        _best_float32(outcome),
    )


def _reference(
    outcome: SearchOutcome,
    candidates: list[Candidate],
    chosen: Candidate,
    f32_best: Candidate | None,
) -> Candidate | None:
    """The best setup of the precision the user's training runs in today (IEEE float32's is
    the float32 a speed-up is stated against anyway); the chosen one itself when it is of
    that precision. Guarded or not: it is what the user runs."""
    if outcome.reference == FLOAT32:
        return f32_best
    if chosen.setup.precision == outcome.reference:
        return chosen
    mine = [c for c in candidates if c.setup.precision == outcome.reference and c.speed]
    return max(mine, key=lambda c: c.speed, default=None)


def _memory_saving(outcome: SearchOutcome, chosen: Candidate) -> float | None:
    """The share of float32's peak memory, at the chosen batch size, that the chosen mixed
    setup saves; None for float32, or without both peaks."""
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
    if (
        chosen.setup.policy != FLOAT32
        and f32_same_ok
        and f32_same_ok.peak_memory_mb
        and chosen.peak_memory_mb
    ):
        return 1 - chosen.peak_memory_mb / f32_same_ok.peak_memory_mb
    return None


def _knob_evidence(
    setup: Setup, outcome: SearchOutcome, space: SearchSpace
) -> tuple[KnobEvidence, ...]:
    """The evidence for each knob of the recommended ``setup``, from its precision's knob
    stages, in the order of :data:`~tuner.knobs.KNOBS`."""
    found = _Found(setup, outcome, space)
    return tuple(
        _tried_evidence(knob, found) if knob.decided is None else _decided_evidence(knob, found)
        for knob in KNOBS
    )


@dataclass(frozen=True)
class _Found:
    """What the knob stages found for the recommended setup's precision."""

    setup: Setup
    outcome: SearchOutcome
    space: SearchSpace

    @property
    def mine(self) -> list[KnobTrial]:
        return [k for k in self.outcome.knobs if k.precision == self.setup.precision]

    @property
    def moves(self) -> list[KnobTrial]:
        return [
            k for k in self.mine if k.knob in ("neighbourhood", "runoff") and k.tried is not None
        ]


def _tried_evidence(knob: Knob, found: _Found) -> KnobEvidence:
    """A knob's evidence from its own stage's tries (XLA's one try, steps per execution's
    ladder, and any knob declared with a ``stage``): how the recommended setup came by its
    value (a move around the pick, its tries on this precision's pick), or why it was not
    tried (skipped, and why; or the search ended before its stage)."""
    setup = found.setup
    mine = [k for k in found.mine if k.knob == knob.name]
    setting = knob.setting(setup)
    tried = [k for k in mine if k.tried is not None]
    value = getattr(setup, knob.name)
    moved = _moved(found.moves, lambda s: getattr(s, knob.name), value)
    if moved is not None:
        return moved_evidence(knob.evidence, setting, moved, tried)
    if len(tried) == 1:
        k = tried[0]
        return KnobEvidence(knob.evidence, setting, f"{setting}: {knob_line(k)}", k.gain, k.trials)
    if tried:
        adopted = [k for k in tried if k.adopted]
        gain = (
            adopted[-1].speed / tried[0].base_speed
            if adopted and adopted[-1].speed and tried[0].base_speed
            else tried[0].gain
        )
        numbers = tuple(sorted({n for k in tried for n in k.trials}))
        return KnobEvidence(
            knob.evidence,
            setting,
            f"{setting}: " + "; ".join(knob_line(k) for k in tried),
            gain,
            numbers,
        )
    why = (
        found.outcome.knobs_skipped.get(knob.name)
        or (mine[-1].reason if mine and mine[-1].reason else None)
        or f"the search ended before its {knob.words} stage"
    )
    return KnobEvidence(knob.evidence, setting, f"{setting}: not tried ({why})")


def _decided_evidence(knob: Knob, found: _Found) -> KnobEvidence:
    """The evidence of a knob another stage decides (TF32: the policies; the global batch:
    the ladder), in its row's words (:attr:`~tuner.knobs.Knob.decided`)."""
    assert knob.decided is not None
    setup, space = found.setup, found.space
    tried = any(getattr(s, knob.name) != knob.default for s in found.outcome.measured)
    facts = Decided(tried, space.global_batch, space.user_batch)
    return KnobEvidence(knob.evidence, knob.setting(setup), knob.decided(setup, facts))


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
        # Its stage's own finding, taken alone and earlier: outweighed by the move above, so
        # it says how it compared, not that it was not adopted (the setup has the knob).
        detail += "; this outweighs its stage's first measurement, taken alone: " + "; ".join(
            knob_line(k, adoption=False) for k in stage
        )
    return KnobEvidence(knob, setting, detail, move.gain, move.trials)


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


def _not_tried(outcome: SearchOutcome, space: SearchSpace) -> list[dict[str, str]]:
    why = f"not in the search space ({setting('policies')} or the hardware prior)"
    items = [{"what": policy, "why": why} for policy in POLICIES if policy not in space.policies]
    first = (
        "its first batch size that fits the global batch"
        if space.global_batch is not None
        else f"batch size {space.start_batch}"
    )
    items += [
        {
            "what": f"{policy} beyond {first}",
            "why": "unsafe for this model (see its hazard)" if is_unsafe(why) else why,
        }
        for policy, why in outcome.abandoned.items()
    ]
    items += [
        {"what": knob.label, "why": outcome.knobs_skipped[knob.name]}
        for knob in KNOBS
        if knob.name in outcome.knobs_skipped
    ]
    if outcome.stopped_early:
        items.append({"what": "the rest of the search", "why": outcome.stopped_early})
    return items


__all__ = [
    "Alternative",
    "KnobEvidence",
    "NoViableSetup",
    "Recommendation",
    "evidence_rows",
    "recommend",
]
