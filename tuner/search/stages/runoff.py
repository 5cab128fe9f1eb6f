"""The runoff: a leading pick and the setups of its precision that measured within the noise floor
of it, measured back to back and decided on the medians of their per-turn ratios.
"""

from __future__ import annotations

import statistics

from tuner.search.measures import KnobTrial, Measured, decide
from tuner.search.stage import AFTER_STANDING, Stage
from tuner.search.stages.context import SearchContext
from tuner.search.stages.turns import RUNOFF_RUNS, back_to_back
from tuner.search.wording import and_join

#: The runoff (:func:`run`): a leading pick and at most this many setups in all that
#: measured within the noise floor of it...
RUNOFF_SIZE = 3
#: ...and the fastest on the ratios wins unless a simpler setup is within this of it. One
#: trial each cannot tell two setups 3% apart on a machine whose figures swing by more than
#: that between runs; the ratios of runs taken back to back, in up to this many turns, can, and
#: the choice between them then costs two or three trials a setup (bench/bench_search.py,
#: docs/search.md).
RUNOFF_MARGIN = 0.01
#: The setup the neighbourhood last moved away from joins its runoff when the move gained less
#: than this many noise floors: a move decided by one trial just past the floor is itself a
#: near tie (bench run 8 moved to a batch size on a 3.1% lead that its next run did not keep).
RUNOFF_MOVED_FLOORS = 2.0


def run(ctx: SearchContext, precision: str, center: Measured) -> Measured:
    """Decide between ``center`` and the setups of ``precision`` that measured within the
    noise floor of it (either side; the nearest first, :data:`RUNOFF_SIZE` in all), and
    the setup a narrow neighbourhood move left (:data:`RUNOFF_MOVED_FLOORS`): measured
    back to back in :data:`RUNOFF_RUNS` turns (:func:`back_to_back`), each compared with
    ``center`` on the median of its per-turn ratios. The fastest wins, unless a simpler
    setup is within :data:`RUNOFF_MARGIN` of it. Only for the speed objective: memory per
    sample does not swing between runs."""
    if ctx.settings.objective != "speed":
        return center
    speed, _ = ctx.standing(center)
    floor = ctx.settings.noise_floor
    here = center.result.spec.setup
    near = [
        m
        for m in ctx.usable(precision)
        if m.result.spec.setup != here
        and m.stage not in AFTER_STANDING  # after the runoff in a search not stopped
        and ctx.fits(m)
        and abs(ctx.standing(m)[0] - speed) <= floor * speed
    ]
    near.sort(key=lambda m: abs(ctx.standing(m)[0] - speed))
    finalists = [center, *near[: RUNOFF_SIZE - 1]]
    left = ctx.moved_from.get(precision)
    if (
        left is not None
        and left[1] <= 1 + RUNOFF_MOVED_FLOORS * floor
        and left[0].result.spec.setup not in {m.result.spec.setup for m in finalists}
    ):
        # The move that made ``center`` the pick won on one trial by a hair: the setup
        # it left is as near a tie as any, whatever its figure now.
        finalists = [*finalists[: RUNOFF_SIZE - 1], left[0]]
    if len(finalists) < 2:
        return center
    setups = [m.result.spec.setup for m in finalists]
    ctx.announce(
        Stage.RUNOFF,
        f"{precision}: {and_join([s.label for s in setups])} measured within "
        f"{floor:.0%} of each other; {RUNOFF_RUNS} turns back to back",
    )
    ctx.run_off(setups)
    paired = back_to_back(ctx, setups, Stage.RUNOFF, RUNOFF_RUNS, RUNOFF_MARGIN)
    ctx.pair(Stage.RUNOFF, precision, paired)
    ratios = {s: paired.ratio(here, s) for s in setups}  # ``here`` itself: 1.0
    valid = {s: r for s, r in ratios.items() if r is not None}
    if len(valid) < 2:
        return center
    winner = decide(valid, RUNOFF_MARGIN)
    standing = ctx.ran_off_runs(winner)
    if winner == here or not standing:
        return center
    ratio = valid[winner]
    turns = paired.numbers(here, winner)
    ctx.note(
        f"{precision}: {winner.label} beat {here.label} in a runoff, {ratio - 1:.1%} on "
        f"the median of {len(paired.ratios(here, winner))} turns back to back (trials "
        f"{', '.join(f'#{n}' for n in turns)})"
    )
    base_speed = statistics.median(r.speed for r in ctx.ran_off_runs(here) or [center])
    ctx.record_knob(
        KnobTrial(
            precision,
            "runoff",
            here,
            winner,
            base_speed,
            base_speed * ratio,
            turns,
            True,
            "ok",
        )
    )
    return standing[0]
