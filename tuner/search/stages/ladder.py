"""A precision's batch sizes: up the ladder's rungs until a batch does not fit, throughput stops
growing or the memory budget is reached, refined between rungs where it pays; with a global
batch, down the divisors of it instead.

On a GPU, where memory ends a ladder and every rung costs a minute, the ladder leaps: peak
memory grows near-linearly with the batch size, so from two measured rungs a line predicts the
largest rung within the memory budget; the ladder measures that one next and bisects between
it and the last rung that paid (:func:`leap`). An out-of-memory error teaches the line: the
memory the card really gives is at most what the line predicted there.
"""

from __future__ import annotations

import math

from tuner.search.measures import Measured
from tuner.search.stage import Stage
from tuner.search.stages.context import SearchContext, multiple_of_8
from tuner.setup import Setup
from tuner.trials.fit import memory_line as fit_memory_line
from tuner.trials.result import TrialStatus


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
    target = ctx.leaps.get(precision) or leap_target(ctx, base, base.batch_size)
    if target is not None:
        best, failed_at, stalled = leap(ctx, base, best, target, seen)
        growth = step_growth(ctx, first, best)
    for b in rungs[rungs.index(best.result.spec.batch_size) + 1 :]:
        if failed_at is not None or stalled or predicted_over(ctx, base, b):
            break
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
        target = leap_target(ctx, base, b)
        if target is not None:
            best, failed_at, stalled = leap(ctx, base, best, target, seen)
            growth = step_growth(ctx, m, best) if best is not m else growth
    if best is first and start_index > 0:
        best = descend(ctx, base, best, seen)  # going up did not pay
    if not ctx.space.refine:
        return
    if failed_at is not None and growth > 0.10 and best.result.spec.batch_size < failed_at:
        middle = multiple_of_8((best.result.spec.batch_size + failed_at) // 2)
        if best.result.spec.batch_size < middle < failed_at:
            ctx.measure(ctx.at_batch(base, middle), Stage.REFINE)
    elif stalled:
        refine_knee(ctx, base, best, seen)


def descend(ctx: SearchContext, base: Setup, best: Measured, seen: dict[int, Measured]) -> Measured:
    """Down the rungs below ``best`` while each is faster beyond the noise; the best found."""
    rungs = ctx.space.rungs()
    for b in reversed(rungs[: rungs.index(best.result.spec.batch_size)]):
        m = ctx.measure(ctx.at_batch(base, b), Stage.BATCH)
        seen[b] = m
        if not m.result.ok:
            ctx.note(f"{base.precision}: batch size {b} {ctx.failure(m)}; smaller batches skipped")
            break
        if m.speed < best.speed * (1 + ctx.settings.noise_floor):
            break
        best = m
    return best


def scout(ctx: SearchContext, precision: str, first: Measured) -> None:
    """On a GPU under a budget, before any ladder climbs: this precision's leap (the largest
    rung its memory predicts within the limit), so that a budget that ends mid-ladders has
    seen every precision near its largest batch, not one precision's every rung."""
    base = first.result.spec.setup
    if not ctx.fits(first):
        return
    target = leap_target(ctx, base, base.batch_size)
    if target is not None:
        ctx.leap(precision, target)
        ctx.measure(ctx.at_batch(base, target), Stage.BATCH)


def predicted_over(ctx: SearchContext, base: Setup, batch_size: int) -> bool:
    """On a GPU: whether the precision's memory line (through two rungs or more) puts
    ``batch_size`` over the limit an out-of-memory error taught; the ladder stops there
    instead of running out of memory once more."""
    if not ctx.device.gpu:
        return False
    points = {
        m.result.spec.batch_size
        for m in ctx.usable(base.precision)
        if ctx.plain(m.result.spec.setup)
    }
    line, limit = memory_line(ctx, base.precision), memory_limit(ctx)
    if len(points) < 2 or line is None or limit is None:
        return False
    over = line[0] + line[1] * batch_size > limit
    if over:
        ctx.note(
            f"{base.precision}: batch size {batch_size} predicted at "
            f"{line[0] + line[1] * batch_size:,.0f} MB, over the {limit:,.0f} MB that fit: "
            "not run"
        )
    return over


def step_growth(ctx: SearchContext, low: Measured, high: Measured) -> float:
    """The throughput's growth per rung between two measured rungs of a ladder."""
    rungs = ctx.space.rungs()
    steps = rungs.index(high.result.spec.batch_size) - rungs.index(low.result.spec.batch_size)
    if steps <= 0 or not low.speed:
        return 0.0
    return float((high.speed / low.speed) ** (1 / steps) - 1)


def memory_line(ctx: SearchContext, precision: str) -> tuple[float, float] | None:
    """Peak memory (MB) against batch size for ``precision`` at the default knobs, as
    ``(fixed, per_sample)``: the least-squares line through its measured rungs; from one rung,
    memory in proportion to the batch (which overstates the growth, so a leap from it falls
    short rather than past the limit); None without a rung, or where memory does not grow
    with the batch."""
    points = {
        m.result.spec.batch_size: m.result.peak_memory_mb
        for m in ctx.usable(precision)
        if ctx.plain(m.result.spec.setup) and m.result.peak_memory_mb
    }
    line = fit_memory_line((b, peak) for b, peak in points.items() if peak)
    if line is None or line[1] <= 0:
        return None
    return line


def memory_limit(ctx: SearchContext) -> float | None:
    """The memory a trial may use: the budget, lowered to what an out-of-memory error showed
    the card really gives (the line's prediction where a batch ran out of memory)."""
    limit = ctx.evaluator.memory_budget_mb
    for setup, runs in ctx.evaluator.known.items():
        line = memory_line(ctx, setup.precision)
        if runs[0].result.status is TrialStatus.OOM and ctx.plain(setup) and line is not None:
            predicted = line[0] + line[1] * setup.batch_size - 1  # just under what ran out
            limit = predicted if limit is None else min(limit, predicted)
    return limit


def leap_target(ctx: SearchContext, base: Setup, measured: int) -> int | None:
    """On a GPU: the largest rung the memory line predicts within the limit, when it lies at
    least two rungs above ``measured`` (else the ladder's next rung is as near); None where the
    ladder walks (a CPU, whose ladder ends at a throughput plateau long before RAM fills)."""
    if not ctx.device.gpu or ctx.space.global_batch is not None:
        return None
    line, limit = memory_line(ctx, base.precision), memory_limit(ctx)
    if line is None or limit is None:
        return None
    rungs = ctx.space.rungs()
    fitting = [r for r in rungs if r > measured and line[0] + line[1] * r <= limit]
    known_bad = [
        s.batch_size
        for s, runs in ctx.evaluator.known.items()
        if s.precision == base.precision and ctx.plain(s) and not runs[-1].result.ok
    ]
    fitting = [r for r in fitting if all(r < bad for bad in known_bad)]
    if not fitting or rungs.index(max(fitting)) < rungs.index(measured) + 2:
        return None
    ctx.note(
        f"{base.precision}: peak memory grows {line[1]:,.1f} MB a sample from "
        f"{line[0]:,.0f} MB; batch size {max(fitting)} is the largest rung predicted within "
        f"{limit:,.0f} MB: the ladder goes there next"
    )
    return max(fitting)


def leap(
    ctx: SearchContext, base: Setup, best: Measured, target: int, seen: dict[int, Measured]
) -> tuple[Measured, int | None, bool]:
    """Measure ``target`` (the rung the memory line predicts), then bisect the rungs between
    the best so far and it: towards ``target`` while the middle pays beyond the noise, back
    from it where it did not. The ladder's best, the smallest rung that did not fit, and
    whether throughput stopped growing."""
    rungs = ctx.space.rungs()
    low, high = rungs.index(best.result.spec.batch_size), rungs.index(target)
    start = best
    failed_at: int | None = None
    stalled = False
    probe_at = high
    while high > low:
        b = rungs[probe_at]
        m = ctx.measure(ctx.at_batch(base, b), Stage.BATCH)
        seen[b] = m
        if not ctx.fits(m):
            failed_at = b if failed_at is None else min(failed_at, b)
            why = "over the memory budget" if m.result.ok else ctx.failure(m)
            ctx.note(f"{base.precision}: batch size {b} {why}")
            high = probe_at - 1
        elif m.speed > best.speed * (1 + ctx.settings.noise_floor):
            best, low = m, probe_at
        else:
            stalled, high = True, probe_at - 1
            if m.speed > best.speed:
                best = m  # within the noise, and still the faster
        probe_at = (low + high + 1) // 2
    if best is not start and failed_at is None and not stalled:
        best, stalled = knee_below(ctx, base, start, best, seen)
    return best, failed_at, stalled


def knee_below(
    ctx: SearchContext, base: Setup, start: Measured, best: Measured, seen: dict[int, Measured]
) -> tuple[Measured, bool]:
    """The leap paid, but throughput may have stopped growing on a rung it leapt over: bisect
    the rungs between ``start`` and ``best`` for the smallest whose throughput is within the
    noise of ``best``'s (the same speed for less memory, as the walk up would have found).
    That rung, and whether one below ``best`` was within the noise."""
    rungs = ctx.space.rungs()
    low, high = rungs.index(start.result.spec.batch_size), rungs.index(best.result.spec.batch_size)
    stalled = False
    while high - low > 1:
        middle = (low + high) // 2
        m = ctx.measure(ctx.at_batch(base, rungs[middle]), Stage.BATCH)
        seen[rungs[middle]] = m
        if ctx.fits(m) and m.speed >= best.speed * (1 - ctx.settings.noise_floor):
            best, high, stalled = m, middle, True
        else:
            low = middle
    return best, stalled


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
        ctx.did_not_fit(setup.precision, b)
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
