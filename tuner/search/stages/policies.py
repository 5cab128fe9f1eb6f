"""The first two stages: float32 at the starting batch size (the baseline), then every other
precision there; a precision clearly behind on both speed and memory is abandoned.
"""

from __future__ import annotations

import math

from tuner.policies import FLOAT32, FULL_OF_MIXED
from tuner.said import setting
from tuner.search.measures import Measured
from tuner.search.records import MODEL_ERROR, ModelFailed, SessionFailure
from tuner.search.stage import Stage
from tuner.search.stages.context import SearchContext, unsafe_text
from tuner.search.wording import times
from tuner.setup import Setup
from tuner.trials.hazards import TITLES, TRAPS
from tuner.trials.result import TrialStatus

#: A policy is abandoned at the starting batch when it is this much slower than the best...
ABANDON_SLOWER = 0.25
#: ...and does not use at least this much less memory per sample.
ABANDON_MEMORY = 0.05
#: A full half policy (issue 71) is offered where at most this share of the model's weights
#: train: a frozen backbone, LoRA (Keras keeps LoRA's adapters in float32 under any policy).
#: There it halves the frozen weights' memory; where most weights train, their optimizer's
#: state and hyperparameters would be half too (AdamW's beta_2 0.999 is 1.0 in bfloat16).
FROZEN_SHARE = 0.5


def offer_full_half(ctx: SearchContext, baseline: Measured) -> list[str]:
    """The full half policies the search tries beside the mixed ones it has (``bfloat16``
    beside ``mixed_bfloat16``, ``float16`` beside ``mixed_float16``), added to its precisions
    and said in a note: where the baseline's trained model reads back at most
    :data:`FROZEN_SHARE` of its weights trainable. None elsewhere: never a silent default. A
    policy offered is kept only where its trainable weights move (else its trial is
    ``unsafe``, ``not_training``) and its loss stays within the guard's gap."""
    trained = baseline.result.trained
    share = trained.trainable_share if trained is not None else None
    if share is None or share > FROZEN_SHARE:
        return []
    offered = [
        FULL_OF_MIXED[p]
        for p in ctx.precisions
        if p in FULL_OF_MIXED and FULL_OF_MIXED[p] not in ctx.precisions
    ]
    if not offered:
        return []
    ctx.try_also(
        offered,
        f"{' and '.join(offered)} (weights in the half type too) tried: {share:.1%} of the "
        "model's weights train (a frozen backbone or LoRA), so it can halve the frozen "
        "weights' memory; kept only where its trainable weights move and its loss stays within "
        "the guard's gap",
    )
    return offered


def todays_baseline(ctx: SearchContext, own: Setup) -> Measured | None:
    """What a training script trains today (``own``, observed: issue 70), run unchanged as the
    search's baseline, trial #0; None where it cannot run as a trial (out of memory, over the
    memory budget, a failure that is not the model's own), said in a note: float32 at the
    starting batch size is then the reference, as for a model file.

    Raises:
        ModelFailed: the model fails in its own code.
    """
    ctx.plan(4 * len(ctx.precisions) + 4)
    ctx.announce(Stage.BASELINE, f"what you run today: {ctx.space.user_setup_words}")
    ctx.evaluator.start_ahead(
        [own]
        + [ctx.start_setup(p, ctx.space.start_batch) for p in ctx.precisions if p != own.precision]
    )
    m = _first_of(ctx, own)
    if ctx.fits(m):
        ctx.set_baseline(m)
        return m
    why = "over the memory budget" if m.result.ok else ctx.failure(m)
    message = f" ({m.result.error.message})" if m.result.error else ""
    trap = next((h for h in m.result.hazards if h.kind in TRAPS and h.unsafe), None)
    if trap is not None:  # issue 71: the recommendation says it first, with its fix
        why = "does not train" if m.result.losses else "fails"
        message = f" ({TITLES[trap.kind]})"
    ctx.note(
        f"what you run today ({ctx.space.user_setup_words}) {why} as a trial (#{m.number})"
        f"{message}: the speed-ups are stated against float32 at the starting batch size"
    )
    return None


def first_trial(ctx: SearchContext, policy: str, batch_size: int) -> Measured:
    """``policy`` at ``batch_size``, the search's first trial of it; a failure in the user's
    own code there ends the search at once (no setup could run): an exception it raised, or
    a worker that hung or ended while the model's own code built it (the phase and, for a
    hang, where it hung are said).

    Raises:
        ModelFailed: the model fails in its own code.
    """
    return _first_of(ctx, ctx.at_batch(Setup(policy, batch_size), batch_size))


def _first_of(ctx: SearchContext, setup: Setup) -> Measured:
    """:func:`first_trial` of ``setup``."""
    m = ctx.measure(setup, Stage.BASELINE)
    if m.result.model_failed:
        err = m.result.error
        where = f"{err.location}: " if err and err.location else ""
        what = f"{where}{err.message if err else 'unknown error'}"
        if m.result.status is TrialStatus.TIMEOUT:
            # Where it hung is the location (the stack it dumped is in the trial's record).
            what += f" (raise {setting('timeout')} if building it only needs longer)"
        raise ModelFailed(
            f"the model fails in its own code, so no search can run: {what}",
            SessionFailure(MODEL_ERROR, what, m.number),
        )
    return m


def fitting_baseline(ctx: SearchContext, policy: str, start: int) -> Measured:
    """The baseline: ``policy`` at ``start``, or, when it does not fit there (out of memory,
    or over the memory budget), at the largest rung below that does, halving: the precisions
    are compared where the reference runs, and a reference that never ran could guard none of
    them. With a global batch the ladder keeps it instead (``ladder.shrink_to_fit``). The last
    trial, as it ended, when none fits."""
    m = first_trial(ctx, policy, start)
    if ctx.space.global_batch is not None:
        return m
    size = start
    while ctx.too_big(m) and (lower := ctx.rung_below(size)) is not None:
        why = "over the memory budget" if m.result.ok else ctx.failure(m)
        ctx.note(
            f"{policy} at batch size {size} {why}: the search starts at batch size {lower}, "
            "where it fits, and compares every precision there"
        )
        size = lower
        m = first_trial(ctx, policy, size)
    return m


def abandon_laggards(ctx: SearchContext, at_start: dict[str, Measured]) -> None:
    """Drop, with the reason, each precision that failed or is unsafe at the start, and each
    that is clearly behind the fastest there (slower by :data:`ABANDON_SLOWER` and, unless
    the objective is speed, no leaner in memory); float32 and the user's own float32 stay."""
    usable = {p: m for p, m in at_start.items() if m.result.ok}
    for policy, m in at_start.items():
        if m.result.status is TrialStatus.UNSAFE:
            ctx.abandon(policy, unsafe_text(m, ctx.baseline), unsafe=m)
        elif not m.result.ok:
            ctx.abandon(
                policy,
                f"{ctx.failure(m)} at batch size "
                f"{m.result.spec.batch_size}: "
                f"{m.result.error.message if m.result.error else ''}",
            )
    if not usable:
        return
    fastest = max(m.speed for m in usable.values())
    leanest = min(m.memory_per_sample for m in usable.values())
    for policy, m in usable.items():
        if policy in (FLOAT32, ctx.reference):
            # float32 is the guard's reference; the user's float32 as it runs today (TF32
            # where that is the default) is what a speed-up is stated against: never dropped.
            continue
        slower = m.speed < (1 - ABANDON_SLOWER) * fastest
        no_memory_gain = (
            m.memory_per_sample >= (1 - ABANDON_MEMORY) * leanest
            if math.isfinite(leanest)
            else True
        )
        if slower and (no_memory_gain or ctx.settings.objective == "speed"):
            ctx.abandon(
                policy,
                f"clearly behind at batch size {m.result.spec.batch_size}: "
                f"{times(m.speed / fastest)} the fastest policy's throughput"
                + ("" if not no_memory_gain else " and no memory saving"),
            )
