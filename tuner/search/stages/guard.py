"""The numerical guard: each precision's best setup against IEEE float32 at the same batch size
(and accumulation), seed and data; a loss gap over the tolerance rejects it.
"""

from __future__ import annotations

from tuner.policies import FLOAT32
from tuner.said import setting
from tuner.search.measures import (
    Candidate,
    Measured,
    first_ok,
    loss_gap,
    reference_of,
    too_few_steps,
)
from tuner.search.stage import Stage
from tuner.search.stages.context import SearchContext, unsafe_text
from tuner.search.wording import pct
from tuner.setup import TF32, Setup
from tuner.trials.result import TrialStatus


def left(ctx: SearchContext) -> int:
    """The float32 references the guard is expected to run: one for each precision's pick that
    has none at its batch size yet (the plan's count, :meth:`SearchContext.plan`)."""
    picks = [c for p in ctx.precisions if p != FLOAT32 and (c := ctx.pick(p)) is not None]
    return sum(reference_of(c.setup) not in ctx.evaluator.known for c in picks)


def finalists(ctx: SearchContext, allow_new_trials: bool) -> list[Candidate]:
    """Each precision's best setup, all but IEEE float32 checked against it. float32 is
    picked last: the guard may run float32 at batch sizes its own ladder never reached, and
    the float32 candidate (what a speed-up is stated against) must know every float32
    trial. When a budget ended the search (``allow_new_trials`` false) the leading candidate
    still runs its check, in the time the other stages left for it
    (:meth:`SearchContext.reserved`); the others are checked against what ran."""
    others = {p: c for p in ctx.precisions if p != FLOAT32 and (c := ctx.pick(p)) is not None}
    leader = max(others.values(), key=lambda c: c.runs[0].speed, default=None)
    # The leader's check first; under a time budget the others' run in the time it left,
    # the final's first turn kept (issue 50), else they are checked against what ran.
    ordered = sorted(others.values(), key=lambda c: c is not leader)
    ctx.concurrently(
        ordered,
        lambda cand: check(ctx, cand, cand is leader or (allow_new_trials and ctx.affords_check())),
    )
    f32 = ctx.pick(FLOAT32) if FLOAT32 in ctx.precisions else None
    if f32 is not None:
        f32.loss_gap = 0.0
    for policy, m in ctx.unsafe.items():
        # Never recommended; its figures (taken with the fix applied) still say what the
        # policy would gain once the model is fixed.
        runs = [m] if m.result.samples_per_second else []
        others[policy] = Candidate(m.result.spec.setup, runs, rejected=unsafe_text(m, ctx.baseline))
    finalists = [f32 if p == FLOAT32 else others.get(p) for p in ctx.precisions]
    return [c for c in finalists if c is not None]


def check(ctx: SearchContext, cand: Candidate, allow_new_trials: bool) -> None:
    """Compare a candidate with IEEE float32 at the same batch size (and accumulation),
    seed and data; set its loss gap, or why it is rejected."""
    reference = float32_at(ctx, cand.setup, allow_new_trials)
    if reference is None:
        cand.rejected = lacking(ctx, cand.setup)
        return
    mine = cand.runs[0]
    if not reference.result.ok:
        # float32 does not fit (or fails) where the candidate runs: compare the two at the
        # largest batch where both ran; precision, not batch size, is on trial.
        pair = common_batch(ctx, cand, allow_new_trials)
        if pair is None:
            cand.rejected = (
                f"float32 at batch size {cand.setup.batch_size} "
                f"{ctx.failure(reference)} and no smaller batch to "
                "compare at"
            )
            return
        mine, reference = pair
        ctx.note(
            f"{cand.setup.precision} was compared with float32 at batch size "
            f"{reference.result.spec.batch_size}: float32 does not run at batch size "
            f"{cand.setup.batch_size}"
        )
    cand.guard_trial = reference.number
    gap = loss_gap(mine.result, reference.result, ctx.settings.guard_steps)
    cand.loss_gap = gap
    if gap is None:
        cand.rejected = too_few_steps(mine.result)
    elif gap > ctx.settings.loss_tolerance:
        cand.rejected = (
            f"loss gap to float32 {pct(gap)} over the tolerance {ctx.settings.loss_tolerance:.0%}"
        )


def lacking(ctx: SearchContext, setup: Setup) -> str:
    """Why a candidate the budget left unchecked is not recommended: the one check it lacks,
    and how to finish it."""
    return (
        f"not compared with float32 at batch size {setup.batch_size} (the budget ended "
        f"first); {setting('resume', ctx.evaluator.session.name)} runs that check"
    )


def reference_at(ctx: SearchContext, batch_size: int, like: Setup) -> Setup:
    """IEEE float32 at ``batch_size``, grouping its losses as ``like`` does, with the
    accumulation that keeps the global batch."""
    return reference_of(ctx.at_batch(like, batch_size))


def common_batch(
    ctx: SearchContext, cand: Candidate, allow_new_trials: bool
) -> tuple[Measured, Measured] | None:
    """The candidate's setup and float32 (with the candidate's steps per execution) at the
    largest smaller batch where float32 ran; where the candidate has not run there and no new
    trial may (or can) run, the largest smaller batch where both ran."""
    fits = sorted(
        s.batch_size
        for s, runs in ctx.evaluator.known.items()
        if s == reference_at(ctx, s.batch_size, s)
        and s.batch_size < cand.setup.batch_size
        and first_ok(runs) is not None
    )
    for batch_size in reversed(fits):
        there = ctx.at_batch(cand.setup, batch_size)
        mine = ctx.recall_or_measure(there, Stage.GUARD, allow_new_trials)
        reference = float32_at(ctx, there, allow_new_trials)
        if mine is not None and mine.result.ok and reference is not None and reference.result.ok:
            return mine, reference
    return None


def float32_at(ctx: SearchContext, setup: Setup, allow_new_trials: bool) -> Measured | None:
    """IEEE float32 at ``setup``'s batch size, accumulation and steps per execution:
    recalled, or run. The steps per execution must match: a trial of several steps per
    execution reports one loss per execution (its steps' mean) and warms up in whole
    executions, so only the same grouping compares step for step."""
    batch_size = setup.batch_size
    key = reference_of(setup)
    if key not in ctx.evaluator.known:
        # float32 with TF32 matmuls keeps the same tensors: where it ran out of memory,
        # IEEE float32 does too (on an H200 the guard spent 69 s learning it again).
        oom_below = [
            runs[0]
            for s, runs in ctx.evaluator.known.items()
            if s.precision in (FLOAT32, TF32)
            and ctx.plain(s)
            and s.batch_size <= batch_size
            and runs[0].result.status is TrialStatus.OOM
        ]
        if oom_below:  # it will not fit a larger batch either
            return min(oom_below, key=lambda m: m.result.spec.batch_size)
        if allow_new_trials:
            ctx.announce(
                Stage.GUARD,
                f"float32 reference at batch size {batch_size}{ctx.accumulating(batch_size)}",
            )
    return ctx.recall_or_measure(key, Stage.GUARD, allow_new_trials)
