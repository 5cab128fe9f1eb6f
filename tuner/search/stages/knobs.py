"""The execution knobs on a precision's pick, each adopted only when it pays beyond the noise
floor: XLA, then steps per execution where the step is short enough for the host's per-call
overhead to show, then rematerialisation where a batch size ran out of memory (or the objective
weighs memory); and the confirming run of the leading pick.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from tuner.policies import TORCH
from tuner.search.measures import KnobTrial, Measured
from tuner.search.stage import Stage, knob_stage
from tuner.search.stages.context import SPE_STEP_MS, SearchContext
from tuner.setup import KNOBS, SPE_LADDER, Knob, Setup, same_memory
from tuner.trials.result import TrialStatus


def try_once(knob: Knob) -> Callable[[SearchContext, str, Measured], Measured]:
    """The stage of a knob without a search of its own in :data:`TRIES` (XLA): one trial of
    the pick with the knob at its example value (:meth:`Knob.example`), adopted when faster
    beyond the noise floor. A model that refuses the knob (``unsupported``) ends it for every
    precision; another failure ends it for this one."""
    stage, words = knob_stage(knob.name), knob.words

    def try_it(ctx: SearchContext, precision: str, base: Measured) -> Measured:
        if ctx.knob_skipped(knob):
            return base
        setup = base.result.spec.setup
        # A pick that has the knob already (a script that compiles with it: issue 70) tries
        # it off, and keeps it unless that measured faster.
        on = getattr(setup, knob.name) != knob.default
        tried = setup.replace(**{knob.name: knob.default if on else knob.example()})
        ctx.announce(
            stage,
            f"{words}{' off' if on else ''} for {precision} at batch size {setup.batch_size}",
        )
        m = ctx.measure(tried, stage)
        found = _record_try(ctx, precision, knob.name, setup, tried, base, m)
        if found.status == "ok":
            return m if found.adopted else base
        why, message = _failure_words(ctx, m)
        detail = f" ({message})" if message else ""
        if m.result.status is TrialStatus.UNSUPPORTED:
            ctx.skip_knob(knob.name, f"{knob.refused_words} (trial #{m.number}{detail})")
            ctx.note(
                f"{words}: {precision} at batch size {setup.batch_size} is unsupported"
                f"{detail}; the search goes on without {words}"
            )
        else:
            ctx.note(
                f"{words}: {precision} at batch size {setup.batch_size} {why}{detail}; "
                f"{precision} goes on without {words}"
            )
        return base

    try_it.__name__ = try_it.__qualname__ = f"try_{knob.name}"
    return try_it


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


def try_remat(ctx: SearchContext, precision: str, current: Measured) -> Measured:
    """Rematerialisation, where it can pay: at the smallest batch size of ``precision`` that
    ran out of memory (or over the memory budget) up to the one the user trains with (it may
    fit with the activations recomputed), adopted when faster than the pick beyond the noise
    floor; under ``--objective memory``/``balanced`` at the pick's own batch size, adopted when
    it needs less memory per sample beyond the noise floor at the objective's throughput
    floor. Elsewhere it costs compute and saves memory nobody needs: not tried, and why."""
    setup = current.result.spec.setup
    target, reason = _remat_target(ctx, precision, setup)
    if target is None:
        found = KnobTrial(precision, "remat", setup, None, current.speed, trials=(current.number,))
        ctx.record_knob(dataclasses.replace(found, reason=reason))
        return current
    tried = target.replace(remat=True)
    stage = knob_stage("remat")
    ctx.announce(stage, f"rematerialisation for {precision} at batch size {tried.batch_size}")
    m = ctx.measure(tried, stage)
    found = _record_try(ctx, precision, "remat", setup, tried, current, m, _remat_pays(ctx))
    if found.status != "ok":
        why, message = _failure_words(ctx, m)
        ctx.note(
            f"{precision} with rematerialisation at batch size {tried.batch_size}: {why}"
            + (f" ({message})" if message else "")
        )
        return current
    return m if found.adopted else current


def _remat_target(ctx: SearchContext, precision: str, setup: Setup) -> tuple[Setup | None, str]:
    """Where :func:`try_remat` tries rematerialisation (None, and why not, where it cannot pay)."""
    objective = ctx.settings.objective
    if setup.remat:
        return None, "the pick rematerialises already"
    if objective != "speed":
        return setup, ""
    asked = ctx.space.user_batch
    too_big = sorted(
        s.batch_size
        for s, runs in ctx.evaluator.known.items()
        if s.precision == precision
        and same_memory(s, setup)
        and runs
        and s.batch_size > setup.batch_size
        and ctx.too_big(runs[-1])
    )
    within = [b for b in too_big if asked is not None and b <= asked]
    if within:
        return ctx.at_batch(setup, within[0]), ""
    yours = f" up to yours ({asked})" if asked is not None else " of yours"
    return None, (
        f"it trades speed for memory: the objective is speed, and no batch size{yours} ran "
        "out of memory"
    )


def _remat_pays(ctx: SearchContext) -> Callable[[Measured, Measured], tuple[bool, str]]:
    """Whether rematerialisation's run beats the pick's for the objective, and what it was
    judged by: faster beyond the noise floor (speed), or less memory per sample beyond it at
    the objective's throughput floor (memory, balanced)."""
    settings = ctx.settings
    if settings.objective == "speed":
        return lambda base, m: (m.speed > base.speed * (1 + settings.noise_floor), "")
    floor = settings.memory_throughput_floor if settings.objective == "memory" else 0.95

    def pays(base: Measured, m: Measured) -> tuple[bool, str]:
        leaner = m.memory_per_sample < base.memory_per_sample * (1 - settings.noise_floor)
        fast = m.speed >= floor * base.speed
        judged = (
            f"the {settings.objective} objective: {m.memory_per_sample:.3g} vs "
            f"{base.memory_per_sample:.3g} MB per sample"
            + ("" if fast else f", under {floor:.0%} of its speed")
        )
        return leaner and fast, judged

    return pays


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
    pays: Callable[[Measured, Measured], tuple[bool, str]] | None = None,
) -> KnobTrial:
    """Record a knob's try ``m`` of ``tried`` against ``base`` (at ``setup``): adopted when
    it fits and ``pays`` (which also says what it judged by, where not by speed; faster beyond
    the noise floor where None); failed (its status, and
    why) when it does not fit."""
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
        adopted, judged = (
            pays(base, m) if pays else (m.speed > base.speed * (1 + ctx.settings.noise_floor), "")
        )
        found = KnobTrial(precision, knob, setup, tried, base.speed, m.speed, trials, adopted, "ok")
        found = dataclasses.replace(found, reason=judged or None)
    ctx.record_knob(found)
    if found.adopted:
        ctx.move_pick(precision, setup, m)
    return found


#: The knobs whose stage is a search of its own (by the knob's name): given the context, a
#: precision and its pick so far, the pick it leaves (the same one where the knob did not pay).
#: Every other knob with a ``stage`` is tried once (:func:`try_once`).
TRIES: dict[str, Callable[[SearchContext, str, Measured], Measured]] = {
    "steps_per_execution": try_steps_per_execution,
    "remat": try_remat,
}

#: The knob stages, in the order they run on a precision's pick (the order of
#: :data:`~tuner.knobs.KNOBS`), each from the pick the one before it left: every knob declared
#: with a ``stage`` (docs/architecture.md, "Adding a knob").
STAGES: tuple[Callable[[SearchContext, str, Measured], Measured], ...] = tuple(
    TRIES.get(knob.name) or try_once(knob) for knob in KNOBS if knob.stage
)
