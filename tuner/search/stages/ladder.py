"""A precision's batch sizes: up the ladder's rungs until a batch does not fit, throughput stops
growing or the memory budget is reached, refined between rungs where it pays; with a global
batch, down the divisors of it instead.
"""

from __future__ import annotations

import math

from tuner.search.measures import Measured
from tuner.search.stage import Stage
from tuner.search.stages.context import SearchContext, multiple_of_8
from tuner.setup import Setup


def climb(ctx: SearchContext, precision: str, first: Measured) -> None:
    """Up the ladder's rungs from ``first`` while each rung is faster beyond the noise
    floor and fits; down them when the first step up does not pay; then refined between the
    last fit and the first failure, or around the knee where throughput stopped growing."""
    rungs = ctx.space.rungs()
    base = first.result.spec.setup
    stage = Stage.BATCH
    start_index = rungs.index(base.batch_size)
    best = first
    seen = {base.batch_size: first}  # the rungs this ladder measured, not what else is known
    failed_at: int | None = None
    growth = 0.0
    stalled = False
    for b in rungs[start_index + 1 :]:
        m = ctx.measure(ctx.at_batch(base, b), stage)
        seen[b] = m
        if not ctx.fits(m):
            failed_at = b
            why = "over the memory budget" if m.result.ok else ctx.failure(m)
            ctx.note(f"{precision}: batch size {b} {why}; larger batches skipped")
            break
        gain = m.speed / best.speed - 1 if best.speed else math.inf
        if gain < ctx.settings.noise_floor:
            if m.speed > best.speed:
                best = m
            stalled = True
            break
        best, growth = m, gain
    if best is first and start_index > 0:
        # Going up did not pay: see whether a smaller batch is faster.
        for b in reversed(rungs[:start_index]):
            m = ctx.measure(ctx.at_batch(base, b), stage)
            seen[b] = m
            if not m.result.ok:
                ctx.note(f"{precision}: batch size {b} {ctx.failure(m)}; smaller batches skipped")
                break
            if m.speed < best.speed * (1 + ctx.settings.noise_floor):
                break
            best = m
    if not ctx.space.refine:
        return
    if failed_at is not None and growth > 0.10 and best.result.spec.batch_size < failed_at:
        middle = multiple_of_8((best.result.spec.batch_size + failed_at) // 2)
        if best.result.spec.batch_size < middle < failed_at:
            ctx.measure(ctx.at_batch(base, middle), Stage.REFINE)
    elif stalled:
        refine_knee(ctx, base, best, seen)


def refine_knee(ctx: SearchContext, base: Setup, best: Measured, seen: dict[int, Measured]) -> None:
    """The ladder stopped because throughput stopped growing: the peak may lie between the
    best rung and a neighbour. Try the multiple of 8 midway to the faster neighbour; when it
    beats the best rung beyond the noise, one more midway step on towards that neighbour.
    At most two trials."""
    b = best.result.spec.batch_size
    below = max((s for s in seen if s < b), default=None)
    above = min((s for s in seen if s > b), default=None)
    near = [seen[s] for s in (below, above) if s is not None and ctx.fits(seen[s])]
    if not near:
        return
    target = max(near, key=lambda m: (m.speed, m.result.spec.batch_size)).result.spec
    for _ in range(2):
        middle = multiple_of_8((b + target.batch_size) // 2)
        if not min(b, target.batch_size) < middle < max(b, target.batch_size):
            return
        m = ctx.measure(ctx.at_batch(base, middle), Stage.REFINE)
        if not ctx.fits(m) or m.speed <= best.speed * (1 + ctx.settings.noise_floor):
            return
        best, b = m, middle


def climb_global(ctx: SearchContext, precision: str, fit: Measured) -> None:
    """With a global batch: the policies stage found the largest per-step batch that fits
    (from the global batch down). Refine between it and the smallest that did not fit, then
    walk down (a smaller step can be faster on some hardware) while it pays beyond the
    noise. Every setup keeps ``batch_size * gradient_accumulation_steps`` at the global
    batch."""
    if not ctx.fits(fit):
        return
    base = fit.result.spec.setup
    size = base.batch_size
    best = fit
    failed = ctx.failed_above.get(precision)
    if ctx.space.refine and failed is not None:
        between = [r for r in ctx.space.rungs() if size < r < failed]
        if between:
            middle = min(between, key=lambda r: (abs(2 * r - size - failed), r))
            m = ctx.measure(ctx.at_batch(base, middle), Stage.REFINE)
            if ctx.fits(m) and m.speed > best.speed:
                best = m
    while (lower := ctx.rung_below(size)) is not None:
        m = ctx.measure(ctx.at_batch(base, lower), Stage.BATCH)
        if not m.result.ok:
            ctx.note(f"{precision}: batch size {lower} {ctx.failure(m)}; smaller batches skipped")
            break
        if m.speed <= best.speed * (1 + ctx.settings.noise_floor):
            break
        best, size = m, lower


def shrink_to_fit(ctx: SearchContext, m: Measured, stage: str) -> Measured:
    """With a global batch: ``m``, or when it did not fit (out of memory, or over the
    memory budget) the first smaller per-step batch that does, halving down the divisors of
    the global batch (more accumulation steps, the same samples per update). Without one:
    ``m`` as it is."""
    global_batch = ctx.space.global_batch
    if global_batch is None:
        return m
    setup = m.result.spec.setup
    while ctx.too_big(m):
        b = m.result.spec.batch_size
        ctx.failed_above[setup.precision] = b
        why = "over the memory budget" if m.result.ok else ctx.failure(m)
        lower = ctx.rung_below(b)
        if lower is None:
            ctx.note(
                f"{setup.precision}: batch size {b} {why}; no smaller per-step batch "
                f"divides the global batch {global_batch}"
            )
            return m
        ctx.note(
            f"{setup.precision}: batch size {b} {why}; trying batch size {lower} with "
            f"{global_batch // lower} accumulation steps (global batch {global_batch} kept)"
        )
        m = ctx.measure(ctx.at_batch(setup, lower), stage)
    return m
