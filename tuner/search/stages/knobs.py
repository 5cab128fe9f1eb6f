"""The execution knobs on a precision's pick, each adopted only when it pays beyond the noise
floor: XLA, then steps per execution where the step is short enough for the host's per-call
overhead to show; and the confirming run of the leading pick.
"""

from __future__ import annotations

from collections.abc import Callable

from tuner.policies import TORCH
from tuner.search.measures import KnobTrial, Measured
from tuner.search.stage import Stage, knob_stage
from tuner.search.stages.context import SPE_LADDER, SPE_STEP_MS, SearchContext
from tuner.setup import KNOBS, Setup
from tuner.trials.result import TrialStatus


def try_xla(ctx: SearchContext, precision: str, base: Measured) -> Measured:
    """``base`` with XLA when that is faster beyond the noise floor, else ``base``. A model
    XLA cannot compile (``unsupported``) ends XLA for every precision; another failure
    ends it for this one."""
    if ctx.xla_skipped():
        return base
    setup = base.result.spec.setup
    tried = setup.replace(xla=True)
    ctx.announce(knob_stage("xla"), f"XLA for {precision} at batch size {setup.batch_size}")
    m = ctx.measure(tried, knob_stage("xla"))
    found = _record_try(ctx, precision, "xla", setup, tried, base, m)
    if found.status != "ok":
        why, message = _failure_words(ctx, m)
        detail = f" ({message})" if message else ""
        if m.result.status is TrialStatus.UNSUPPORTED:
            ctx.knobs_skipped["xla"] = (
                f"the model does not compile under XLA (trial #{m.number}{detail})"
            )
            ctx.note(
                f"XLA: {precision} at batch size {setup.batch_size} is unsupported"
                f"{detail}; the search goes on without XLA"
            )
        else:
            ctx.note(
                f"XLA: {precision} at batch size {setup.batch_size} {why}{detail}; "
                f"{precision} goes on without XLA"
            )
        return base
    return m if found.adopted else base


def try_steps_per_execution(ctx: SearchContext, precision: str, current: Measured) -> Measured:
    """Steps per execution up :data:`SPE_LADDER` from ``current``, while each rung is faster
    beyond the noise floor; run only when the median step is under :data:`SPE_STEP_MS`,
    where the host's per-call overhead shows."""
    p50 = current.result.step_time_ms.get("p50")
    if ctx.settings.backend == TORCH or p50 is None or not p50 < SPE_STEP_MS:
        reason = (
            "Keras runs one step per execution on the torch backend"
            if ctx.settings.backend == TORCH
            else "no step time was measured"
            if p50 is None
            else f"the median step takes {p50:.1f} ms, not under {SPE_STEP_MS:g} ms, so "
            "the host's per-call overhead is inside the noise"
        )
        ctx.record_knob(
            KnobTrial(
                precision,
                "steps_per_execution",
                current.result.spec.setup,
                None,
                current.speed,
                trials=(current.number,),
                reason=reason,
            )
        )
        return current
    ctx.announce(
        knob_stage("steps_per_execution"),
        f"steps per execution for {precision} (median step {p50:.1f} ms)",
    )
    for steps in SPE_LADDER:
        setup = current.result.spec.setup
        if steps <= setup.steps_per_execution:
            continue
        tried = setup.replace(steps_per_execution=steps)
        m = ctx.measure(tried, knob_stage("steps_per_execution"))
        found = _record_try(ctx, precision, "steps_per_execution", setup, tried, current, m)
        if found.status != "ok":
            why, message = _failure_words(ctx, m)
            ctx.note(
                f"{precision} with {steps} steps per execution: {why}"
                + (f" ({message})" if message else "")
            )
            break
        if not found.adopted:
            break
        current = m
    return current


def confirm_leader(ctx: SearchContext, picks: dict[str, tuple[Measured, Measured]]) -> None:
    """Measure the fastest pick once more, so that it stands on the median of its runs
    (:meth:`SearchContext.standing`) in choosing which picks look around them and in what its own
    neighbours must beat.

    One measurement can be luck (on this project's CPU one setup swings up to 2x between
    runs), and the fastest pick is the one most likely to owe its place to it. The
    re-measurement is the one the remeasure stage takes next when this pick still leads
    there, so it is recalled then, not run again."""
    if not picks:
        return
    current = max((current for _, current in picks.values()), key=lambda m: m.speed)
    stored = [r.number for r in ctx.evaluator.known.get(current.result.spec.setup, [])]
    at = stored.index(current.number) if current.number in stored else len(stored) - 1
    leader = current.result.spec.setup.precision
    ctx.announce(Stage.REMEASURE, f"confirming {leader}'s lead before looking around the picks")
    ctx.measure(current.result.spec.setup, Stage.REMEASURE, repeat=at + 1)


def _failure_words(ctx: SearchContext, m: Measured) -> tuple[str, str]:
    """How a knob's try failed (or that it did not fit the memory budget), and its error."""
    r = m.result
    why = "over the memory budget" if r.ok else ctx.failure(m)
    return why, r.error.message if r.error and not r.ok else ""


def _record_try(
    ctx: SearchContext,
    precision: str,
    knob: str,
    setup: Setup,
    tried: Setup,
    base: Measured,
    m: Measured,
) -> KnobTrial:
    """Record a knob's try ``m`` of ``tried`` against ``base`` (at ``setup``): adopted when
    it fits and is faster beyond the noise floor; failed (its status, and why) when it does
    not fit."""
    trials = (base.number, m.number)
    if not ctx.fits(m):
        why, message = _failure_words(ctx, m)
        found = KnobTrial(
            precision,
            knob,
            setup,
            tried,
            base.speed,
            None,
            trials,
            status=m.result.status.value,
            reason=message or why,
        )
    else:
        adopted = m.speed > base.speed * (1 + ctx.settings.noise_floor)
        found = KnobTrial(precision, knob, setup, tried, base.speed, m.speed, trials, adopted, "ok")
    ctx.record_knob(found)
    return found


#: What each knob's stage runs (by the knob's name): given the context, a precision and its
#: pick so far, the pick it leaves (the same one where the knob did not pay).
TRIES: dict[str, Callable[[SearchContext, str, Measured], Measured]] = {
    "xla": try_xla,
    "steps_per_execution": try_steps_per_execution,
}

#: The knob stages, in the order they run on a precision's pick (the order of
#: :data:`~tuner.setup.KNOBS`), each from the pick the one before it left: every knob declared
#: with a ``stage`` (docs/architecture.md, "Adding a knob").
STAGES: tuple[Callable[[SearchContext, str, Measured], Measured], ...] = tuple(
    TRIES[knob.name] for knob in KNOBS if knob.stage
)
