"""Around a leading pick: the next batch size each way and every combination of the knobs at its
batch size, since the knobs and the batch size interact; the search moves to a better neighbour
while one beats the pick beyond the noise.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from tuner.search.evaluator import StageCut
from tuner.search.measures import KnobTrial, Measured
from tuner.search.stage import Stage
from tuner.search.stages.context import SPE_STEP_MS, SearchContext, multiple_of_8
from tuner.setup import KNOBS, Around, Knob, Setup, same_memory

#: How many times the search moves to a better neighbour of a pick (the next batch size each
#: way, every XLA x steps-per-execution combination); each move costs at most seven trials,
#: fewer where the knob stages measured them already.
NEIGHBOURHOOD_MOVES = 2


def neighbours(ctx: SearchContext, precision: str, center: Measured) -> list[Setup]:
    """Around ``center``: the next batch size down and up (the ladder's rungs and, with
    refinement, the multiples of 8 halfway between) with its knobs, and every combination
    of the values each knob's row offers around a pick (:attr:`~tuner.knobs.Knob.around`:
    XLA both ways where it is searched and this precision's try did not fail, steps per
    execution where the step is short enough for it to matter) at its batch size."""
    setup = center.result.spec.setup
    rungs = list(ctx.space.batch_sizes)
    sizes = set(rungs)
    if ctx.space.refine and ctx.space.global_batch is None:
        sizes |= {multiple_of_8((a + b) // 2) for a, b in itertools.pairwise(rungs)}
    ordered = sorted(sizes)
    # Never up to a batch size that did not fit; never up at all past one that crashed or
    # timed out (its ladder ended there, as the notes say).
    ceiling: float = math.inf
    for s, runs in ctx.evaluator.known.items():
        if s.precision != precision or not runs or s.batch_size <= setup.batch_size:
            continue
        if not same_memory(s, setup):  # another knob's run did not fit: not this one's limit
            continue
        if ctx.too_big(runs[-1]):
            ceiling = min(ceiling, s.batch_size)
        elif not runs[-1].result.ok:
            ceiling = setup.batch_size
    found: list[Setup] = []
    smaller = [b for b in ordered if b < setup.batch_size]
    larger = [b for b in ordered if setup.batch_size < b < ceiling]
    for batch in ([smaller[-1]] if smaller else []) + ([larger[0]] if larger else []):
        found.append(ctx.at_batch(setup, batch))
    p50 = center.result.step_time_ms.get("p50")
    short = p50 is not None and p50 * setup.steps_per_execution < SPE_STEP_MS
    values: dict[str, tuple[Any, ...]] = {}
    for knob in AROUND:
        assert knob.around is not None
        here = Around(setup, getattr(setup, knob.name), _searched(ctx, precision, knob), short)
        values[knob.name] = knob.around(here)
    # The knobs are few: every combination at the pick's batch size (most were measured by
    # the knob stages already, and are recalled, not run again).
    for combination in itertools.product(*values.values()):
        found.append(setup.replace(**dict(zip(values, combination, strict=True))))
    return [s for s in dict.fromkeys(found) if s != setup]


#: The knobs looked at around a pick (:attr:`~tuner.knobs.Knob.around`), in their order.
AROUND = tuple(knob for knob in KNOBS if knob.around is not None)


def _searched(ctx: SearchContext, precision: str, knob: Knob) -> bool:
    """Whether ``knob``'s stage ran for ``precision`` without its try failing."""
    failed = any(
        k.precision == precision and k.knob == knob.name and k.status not in (None, "ok")
        for k in ctx.knobs
    )
    return not failed and ctx.knob_skipped(knob) is None


#: What the neighbourhood varies, in words: "batch size, XLA and steps per execution together".
_TOGETHER = (
    ", ".join(["batch size", *(k.words for k in AROUND[:-1])])
    + (f" and {AROUND[-1].words}" if AROUND else "")
    + " together"
)


def explore(ctx: SearchContext, precision: str, center: Measured) -> Measured:
    """Move to the best neighbour (:func:`neighbours`) while it is faster than the center
    beyond the noise floor, at most :data:`NEIGHBOURHOOD_MOVES` times; each setup stands
    on :meth:`SearchContext.standing`."""
    speed, behind = ctx.standing(center)
    for _ in range(NEIGHBOURHOOD_MOVES):
        setups = neighbours(ctx, precision, center)
        if not setups:
            break
        ctx.announce(
            Stage.NEIGHBOURHOOD,
            f"around {precision}'s pick ({center.result.spec.setup.label}): {_TOGETHER}",
        )
        cut: StageCut | None = None
        try:
            tried = ctx.concurrently(setups, lambda s: ctx.measure(s, Stage.NEIGHBOURHOOD))
        except StageCut as exc:  # the budget keeps the rest for the runoff and the final
            cut = exc
            ctx.cut(Stage.NEIGHBOURHOOD, f"the search around {precision}'s pick", exc)
            known = ctx.evaluator.known
            tried = [known[s][0] for s in setups if known.get(s)]
        scored = [(ctx.standing(m), m) for m in tried if ctx.fits(m)]
        if not scored:
            break
        (best_speed, best_behind), best = max(scored, key=lambda x: x[0][0])
        if best_speed <= speed * (1 + ctx.settings.noise_floor):
            break
        trials = (*behind, *best_behind)
        ctx.note(
            f"{precision}: {best.result.spec.setup.label} beat "
            f"{center.result.spec.setup.label} by {best_speed / speed - 1:.0%} "
            f"(trials {', '.join(f'#{n}' for n in trials)})"
        )
        ctx.record_knob(
            KnobTrial(
                precision,
                "neighbourhood",
                center.result.spec.setup,
                best.result.spec.setup,
                speed,
                best_speed,
                trials,
                True,
                "ok",
            )
        )
        ctx.move(precision, center, best_speed / speed)  # one lane a precision
        ctx.move_pick(precision, center.result.spec.setup, best)
        center, speed, behind = best, best_speed, best_behind
        if cut is not None:
            break
    return center
